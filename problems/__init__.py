"""Built-in problems; importing this package registers them all."""
from problems import bert_pretrain, electra_pretrain, race, squad, translate, xlnet_pretrain  # noqa: F401
