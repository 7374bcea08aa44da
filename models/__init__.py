"""Built-in models; importing this package registers them (bert, bert_classifier, electra, xlnet)."""
from models import bert, electra, xlnet  # noqa: F401
