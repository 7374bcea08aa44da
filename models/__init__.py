"""Built-in models; importing this package registers them (bert, bert_classifier, electra, xlnet)."""
from models import bert, electra, qa_heads, xlnet  # noqa: F401
