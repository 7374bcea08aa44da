"""Built-in models; importing this package registers them (bert, bert_classifier, electra, xlnet,
transformer)."""
from models import bert, electra, transformer, xlnet  # noqa: F401
