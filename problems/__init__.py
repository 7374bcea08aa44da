"""Built-in problems; importing this package registers them all."""
from problems import bert_pretrain, classification, electra_pretrain, translate, xlnet_pretrain  # noqa: F401
