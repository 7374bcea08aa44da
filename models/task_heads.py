"""What every fine-tuning (sequence-level) model shares: the task's loss, its outputs, and how its
encoder is initialised from a pretraining checkpoint.

The three classifiers (models/bert.py `bert_classifier`, models/electra.py `electra_classifier`,
models/xlnet.py `xlnet_classifier`) differ only in the encoder and the head that turns it into
`[B, num_labels]` float32 logits (`logits(features, training)`); everything else is here, once.

Decisions:
- One head, three task types (not three copies of each model): `classification` (softmax
  cross-entropy over `num_labels`, as run_classifier.py), `regression` (`num_labels = 1`, squared
  error of the single output, as ELECTRA's and XLNet's STS-B), `multilabel` (independent sigmoid per
  label; `label_ids` is then a `[B, num_labels]` multi-hot vector).
- Losses and metrics are sums and counts (`models.base.Term`) weighted by `is_real_example`, so
  padding rows of a fixed-size eval batch count for nothing and N replicas equal one.
- `predict_outputs(features)` is what evaluation, prediction and the exported SavedModel return:
  `logits` plus `probabilities` (softmax / sigmoid) or, for regression, `predictions`.
- Initialisation (`load_init_checkpoint`): an original TF1 release is read by the originals'
  variable names (the encoder's names only; the pretraining heads in the file may stay unused,
  everything else must match). A textrain pretraining checkpoint (object-based) is read through the
  encoder's attribute path, which the classifiers keep identical to their pretrainers' (`bert`,
  `discriminator`, `transformer`), and `assert_existing_objects_matched` proves every encoder
  variable was found. In both cases the task head stays freshly initialised.
"""
from __future__ import annotations

import re
from typing import Any

import tensorflow as tf

from textrain.framework.tasks import TASK_TYPES
from textrain.models import hf_format
from textrain.models.base import FinetuneModel, StepOutput, Term
from textrain.models.checkpoints import load_tf1_checkpoint


def check_task(task_type: str, num_labels: int) -> None:
    """Refuse an unknown task type or a label count it cannot have."""
    if task_type not in TASK_TYPES:
        raise ValueError(f"unknown task_type {task_type!r}; use one of {', '.join(TASK_TYPES)}")
    if task_type == "regression" and num_labels != 1:
        raise ValueError(f"a regression task has num_labels = 1, got {num_labels}")
    if task_type == "classification" and num_labels < 2:
        raise ValueError(f"a classification task needs num_labels >= 2, got {num_labels}")
    if task_type == "multilabel" and num_labels < 1:
        raise ValueError(f"a multilabel task needs num_labels >= 1, got {num_labels}")


def _f32(x: tf.Tensor) -> tf.Tensor:
    return tf.cast(x, tf.float32)


def task_terms(logits: tf.Tensor, labels: tf.Tensor, task_type: str,
               weights: tf.Tensor | None = None) -> tuple[dict[str, Term], dict[str, Term]]:
    """(losses, metrics) of one batch as weighted sums and counts over its examples."""
    logits = _f32(logits)
    batch = tf.shape(logits)[0]
    weights = tf.ones([batch], tf.float32) if weights is None else tf.reshape(_f32(weights), [-1])
    count = tf.reduce_sum(weights)
    if task_type == "classification":
        labels = tf.reshape(tf.cast(labels, tf.int32), [-1])
        per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        correct = _f32(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels))
        return ({"classification": Term(tf.reduce_sum(per_example * weights), count)},
                {"accuracy": Term(tf.reduce_sum(correct * weights), count)})
    if task_type == "regression":
        error = logits[:, 0] - tf.reshape(_f32(labels), [-1])
        per_example = tf.square(error)
        return ({"regression": Term(tf.reduce_sum(per_example * weights), count)},
                {"mse": Term(tf.reduce_sum(per_example * weights), count)})
    if task_type == "multilabel":
        targets = tf.reshape(_f32(labels), tf.shape(logits))
        per_label = tf.nn.sigmoid_cross_entropy_with_logits(labels=targets, logits=logits)
        correct = _f32(tf.equal(_f32(logits > 0), targets))
        n = _f32(tf.shape(logits)[1])
        return ({"multilabel": Term(tf.reduce_sum(tf.reduce_sum(per_label, -1) * weights), count)},
                {"label_accuracy": Term(tf.reduce_sum(tf.reduce_sum(correct, -1) * weights), count * n)})
    raise ValueError(f"unknown task_type {task_type!r}")


def outputs_from_logits(logits: tf.Tensor, task_type: str) -> dict[str, tf.Tensor]:
    """The outputs a user reads: logits and probabilities (or, for regression, the predicted value)."""
    logits = _f32(logits)
    if task_type == "regression":
        return {"logits": logits, "predictions": logits[:, 0]}
    if task_type == "multilabel":
        return {"logits": logits, "probabilities": tf.sigmoid(logits)}
    return {"logits": logits, "probabilities": tf.nn.softmax(logits, -1)}


def num_labels_from_manifest(manifest: dict | None, task_type: str) -> int:
    """The label count a classification problem's manifest records (`num_labels` or `label_list`)."""
    settings = (manifest or {}).get("settings") or {}
    if task_type == "regression":
        return 1
    if settings.get("num_labels"):
        return int(settings["num_labels"])
    if settings.get("label_list"):
        return len(settings["label_list"])
    raise ValueError("the data manifest records no num_labels / label_list: is this a classification problem's "
                     "data? (train_gpu builds a classifier from the labels the records were made with)")


def task_type_from_manifest(manifest: dict | None) -> str:
    settings = (manifest or {}).get("settings") or {}
    return str(settings.get("task_type") or "classification")


class EncoderFinetuneModel(FinetuneModel):
    """A FinetuneModel whose encoder sits in the attribute `encoder_attribute` (as in its pretrainer) and maps
    to the original checkpoints' names by `encoder_tf1_variable_map()`: its init_checkpoint loading, shared by
    the classifiers here and the QA / multiple-choice heads (models/qa_heads.py)."""

    encoder_attribute: str = ""
    init_allow_unexpected = ()  # each head names the pretraining scopes of its family's releases
    head_variant: str = "original"  # the `head` setting (ELECTRA's heads may be "hf", transformers'): an instance sets its own

    def encoder_tf1_variable_map(self) -> dict[str, tf.Variable]:
        raise NotImplementedError

    def load_init_checkpoint(self, path: str, init_head: bool = False) -> list[str]:
        """Initialise the encoder from `path` (a checkpoint prefix, a model_dir or a Hugging Face
        directory); the head stays fresh unless `init_head` (then a TF1 or HF checkpoint's head of the
        same shape is loaded too).

        Returns the names loaded (TF1: original names; textrain: the encoder's variable paths).
        """
        if hf_format.is_hf_directory(path):
            architecture = hf_format.architecture_of(hf_format.read_config(path), path)
            variant = hf_format.HEAD_VARIANTS.get(architecture, "original")
            if init_head and variant != self.head_variant:
                raise hf_format.HFFormatError(
                    f"init_head: {path} is {architecture}, whose head is the {variant!r} variant; this "
                    f"{type(self).__name__} has head={self.head_variant!r} (bind finetune.model_settings={{'head': "
                    f"'{variant}'}}, or leave init_head off for a fresh head)")
            absent = hf_format.ABSENT_PARTS.get(architecture, ())
            return self._load_tf1_names(path, init_head, head_may_stay=True, absent=absent)
        if tf.io.gfile.isdir(path):
            path = tf.train.latest_checkpoint(path) or path
        names = [n for n, _ in tf.train.list_variables(path)]
        if "_CHECKPOINTABLE_OBJECT_GRAPH" in names:
            encoder = getattr(self, self.encoder_attribute)
            view = tf.train.Checkpoint(model=tf.train.Checkpoint(**{self.encoder_attribute: encoder}))
            status = view.read(path)
            status.expect_partial()  # the pretraining heads and the optimizer stay in the file
            try:
                status.assert_existing_objects_matched()
            except AssertionError as e:
                raise ValueError(f"{path}: this textrain checkpoint has no {self.encoder_attribute!r} encoder "
                                 f"matching {type(self).__name__}: {str(e)[:500]}") from None
            return sorted(v.path for v in encoder.weights)
        return self._load_tf1_names(path, init_head, head_may_stay=False)

    def _load_tf1_names(self, path: str, init_head: bool, head_may_stay: bool, absent: tuple[str, ...] = ()
                        ) -> list[str]:
        """The encoder (with `init_head` the head too) by the originals' names. `head_may_stay`: a head in
        the file that is not loaded is no error (an HF classifier fine-tuned anew); `absent`: patterns of the
        encoder's names the file's architecture does not hold (they stay fresh: BERT's pooler)."""
        full = self.encoder_tf1_variable_map()
        encoder = {n: v for n, v in full.items() if not any(re.search(p, n) for p in absent)}
        head = {n: v for n, v in self.tf1_variable_map().items() if n not in full}
        unused_head = tuple(f"^{re.escape(n)}$" for n in head) + (f"^{hf_format.HF_ONLY_SCOPE}/",) \
            if head_may_stay and not init_head else ()
        return load_tf1_checkpoint(path, {**encoder, **(head if init_head else {})},
                                   allow_unexpected=self.init_allow_unexpected + unused_head)


class ClassifierModel(EncoderFinetuneModel):
    """Base of the sequence-level fine-tuning models (see the module docstring).

    Subclasses set `encoder_attribute` (the attribute holding the encoder, as in their pretrainer),
    `init_allow_unexpected` (pretraining-only names of the original checkpoints) and implement
    `logits(features, training)`, `encoder_tf1_variable_map()` and `head_tf1_variable_map()`.
    """


    def __init__(self, num_labels: int, task_type: str = "classification", **kwargs):
        super().__init__(**kwargs)
        check_task(task_type, num_labels)
        self.num_labels = int(num_labels)
        self.task_type = task_type

    # -- the task
    def logits(self, features: dict[str, tf.Tensor], training: bool = False) -> tf.Tensor:
        raise NotImplementedError

    def call(self, features: dict[str, tf.Tensor], training: bool = False) -> tf.Tensor:
        """-> float32 logits `[B, num_labels]`."""
        return self.logits(features, training=training)

    def step_output(self, features: dict[str, tf.Tensor], state: Any, training: bool) -> StepOutput:
        logits = self.logits(features, training=training)
        losses, metrics = task_terms(logits, features["label_ids"], self.task_type,
                                     features.get("is_real_example"))
        return StepOutput(losses=losses, metrics=metrics, state=state if state is not None else {})

    def predict_outputs(self, features: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """Inference outputs (no dropout): logits + probabilities, or predictions for regression."""
        return outputs_from_logits(self.logits(features, training=False), self.task_type)

    # -- checkpoints
    def head_tf1_variable_map(self) -> dict[str, tf.Variable]:
        raise NotImplementedError

    def tf1_variable_map(self) -> dict[str, tf.Variable]:
        names = self.encoder_tf1_variable_map()
        names.update(self.head_tf1_variable_map())
        return names
