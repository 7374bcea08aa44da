"""Built-in problems; importing this package registers them all."""
from textrain.problems import bert_pretrain, electra_pretrain, translate, xlnet_pretrain  # noqa: F401
from textrain.problems import glue, tsv_classification  # noqa: F401  (GLUE tasks, your own TSV files)
from textrain.problems import race, squad  # noqa: F401  (SQuAD v1.1/v2.0, RACE)
