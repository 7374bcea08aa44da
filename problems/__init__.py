"""Built-in problems; importing this package registers them all."""
# The pretraining problems, translation, GLUE tasks and your own TSV files, SQuAD v1.1/v2.0, RACE and tagging.
from textrain.problems import (  # noqa: F401
    bert_pretrain,
    electra_pretrain,
    glue,
    race,
    squad,
    tagging,
    translate,
    tsv_classification,
    xlnet_pretrain,
)
