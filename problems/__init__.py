"""Built-in problems; importing this package registers them all."""
from problems import (bert_pretrain, classification, electra_pretrain, race, squad, translate,  # noqa: F401
                      xlnet_pretrain)
