"""The contract between a model and the one training loop (trainers/core.py).

A pretraining (or fine-tuning) model is a Keras model that also says how to turn a batch of
features into losses and metrics. It returns *sums and counts*, not means: the loop all-reduces the
counts across replicas, so the loss on N replicas equals the loss on one replica with the same
global batch even when replicas hold different numbers of masked tokens. It may carry per-replica
state across steps (XLNet memories); models without state use an empty dict.
"""
from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, NamedTuple

import tensorflow as tf


class Term(NamedTuple):
    """A quantity averaged over the global batch: `weight * sum(total) / sum(count)`."""

    total: tf.Tensor  # scalar, sum over this replica's examples/tokens
    count: tf.Tensor  # scalar, how many examples/tokens `total` sums over
    weight: float = 1.0  # coefficient of this term in the training loss (ignored for metrics)


class StepOutput(NamedTuple):
    losses: dict[str, Term]  # training loss = sum of weight * global mean of each term
    metrics: dict[str, Term]  # reported as global means (accuracies, sub-losses)
    state: Any  # nested structure of tensors, fed back to this replica's next step


def weighted_loss(losses: dict[str, Term]) -> tf.Tensor:
    """The training loss of one replica's terms: sum of weight * total / count (zero-count terms give
    0). The trainer does the same with counts all-reduced across replicas."""
    f32 = lambda x: tf.cast(x, tf.float32)  # noqa: E731
    return tf.add_n([t.weight * tf.math.divide_no_nan(f32(t.total), f32(t.count)) for t in losses.values()])


def model_setting(help_text: str) -> Any:
    """A field of a model's `Settings` dataclass: a trainer flag defaulting to None ("the preset decides")."""
    return dataclasses.field(default=None, metadata={"help": help_text})


class TrainableModel(tf.keras.Model):
    """Base class of every model the trainers drive by name (see framework.registry.models).

    Every registered model is built by ONE constructor, `from_settings(manifest=..., **settings)`:
    plain values (trainers/trainer_flags.py maps the trainer flags to them, trainers/finetune.py the gin
    bindings), never a flags object; settings of other model families are ignored.

    What the trainers need to know about a model is declared here, on the class, and read through the
    registry (`registry.models.get(name).tokenizer`), never probed or listed by name in trainers/.
    """

    # The tokenizer of the pretrained model's vocabulary: "wordpiece" (BERT, ELECTRA) | "sentencepiece" (XLNet).
    # A fine-tuning task's records are made with it (trainers/finetune.py sets the problem's `tokenizer`).
    tokenizer: ClassVar[str] = "wordpiece"
    # Original (TF1) or textrain checkpoint names an init_checkpoint may hold that this model leaves unused
    # (regexes). Default: the pretraining heads and poolers of the original BERT, ELECTRA and XLNet releases, which
    # a model built on one of their encoders (continued pretraining, a user's model) does not build.
    init_allow_unexpected: ClassVar[tuple[str, ...]] = (
        r"^cls/", r"^generator_predictions/", r"^discriminator_predictions/", r"^generator/", r"/lm_loss/",
        r"^model/lm_loss/", r"^bert/pooler/", r"^electra/pooler/")
    # A dataclass of model_setting fields, each a trainer flag of its name (as a problem's HParams are datagen
    # flags), handed to from_settings when given; None: the model has no flags of its own.
    Settings: ClassVar[type | None] = None
    # Layer-wise LR decay's depth rule (trainers/optimization.model_depth_fn): "electra" | "xlnet".
    lr_decay_style: ClassVar[str] = "electra"

    @property
    def num_layers(self) -> int:
        """Encoder layers for layer-wise LR decay; 0: counted from the original variable names."""
        return 0

    @classmethod
    def from_settings(cls, *, manifest: dict | None = None, **settings: Any) -> "TrainableModel":
        """The model of `settings` for data described by `manifest` (the train split's)."""
        raise NotImplementedError(f"{cls.__name__} defines no from_settings(manifest=..., **settings)")

    @classmethod
    def trainer_defaults(cls, settings: dict[str, Any]) -> dict[str, Any]:
        """Trainer settings (by trainer flag name) the model's hyper-parameter set decides, used where
        the command line does not give them (tensor2tensor: the set carries batch, schedule, Adam)."""
        del settings
        return {}

    def initial_state(self, batch_size: int) -> Any:
        """Per-replica state before the first step; `batch_size` is the per-replica batch."""
        return {}

    def step_output(self, features: dict[str, tf.Tensor], state: Any, training: bool) -> StepOutput:
        raise NotImplementedError

    def tf1_variable_map(self) -> dict[str, tf.Variable]:
        """Original checkpoint variable name -> this model's variable (models/checkpoints.py)."""
        raise NotImplementedError(f"{type(self).__name__} has no mapping to an original checkpoint")

    @classmethod
    def from_config(cls, config: dict[str, Any], *, num_labels: int | None = None,
                    n_top: tuple[int, int] = (5, 5), head: str = "original") -> "TrainableModel":
        """The model of an original / Hugging Face config dict (textrain-convert: trainers/convert.py);
        `num_labels` for a classifier's head, `n_top` for XLNet's SQuAD head, `head` the head variant
        (ELECTRA's heads: "hf" is transformers'; a model with one head has only "original")."""
        raise NotImplementedError(f"{cls.__name__} cannot be built from an original config")


class FinetuneModel(TrainableModel):
    """A pretrained encoder with a fine-tuning head: what fine-tuning, evaluation, prediction and export
    need of a model (trainers/finetune.py, trainers/evaluation.py, trainers/export.py)."""

    task_type: str = "classification"  # framework/tasks.py TASK_TYPES (an instance may set its own)
    # Whether export also serves raw strings (tokenised in the graph; needs a core-TensorFlow tokenizer).
    serves_raw_text: ClassVar[bool] = False

    def load_init_checkpoint(self, path: str, init_head: bool = False) -> list[str]:
        """Initialise the encoder from `path` (the head stays fresh unless `init_head`); the names loaded."""
        raise NotImplementedError

    def predict_outputs(self, features: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """Inference outputs (no dropout) of a batch of features."""
        raise NotImplementedError

    def serving_features(self, input_ids: tf.Tensor, input_mask: tf.Tensor,
                         segment_ids: tf.Tensor) -> dict[str, tf.Tensor]:
        """Features from the three id tensors of the serving signature (see trainers/export.py)."""
        return {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids}


class Seq2SeqModel(TrainableModel):
    """A model that decodes (textrain-decode, trainers/decode.py): `infer` plus its decoding defaults."""

    # Decoding defaults where a flag is not given: beam_size, alpha, extra_length, max_length (0: none).
    hparams: Any

    def infer(self, inputs: tf.Tensor, decode_length, beam_size: int = 4, alpha: float = 0.6):
        """Best ids `[B, decode_length]` and their scores."""
        raise NotImplementedError
