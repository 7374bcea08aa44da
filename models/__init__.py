"""Built-in models; importing this package registers them (bert, bert_classifier, electra, xlnet,
transformer, the QA heads, the taggers)."""
from textrain.models import bert, electra, qa_heads, tagging_heads, transformer, xlnet  # noqa: F401
