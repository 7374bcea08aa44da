"""Token classification (NER, POS, chunking, slot filling): one label per word, on BERT, ELECTRA, XLNet.

Each tagger is the family's encoder (the same attribute path as its pretrainer and classifier, so an
init_checkpoint loads as for them: models/task_heads.EncoderFinetuneModel) with one head on the SEQUENCE
output: dropout -> one dense layer `[hidden] -> [num_labels]` applied to every position.

The head's variables (the Hugging Face `*ForTokenClassification` `classifier.weight` / `classifier.bias`
map onto these; the names are TF1 checkpoint names, as `tf1_variable_map()` returns them):

| model | attribute | TF1 names | layout |
|---|---|---|---|
| `bert_tagger` | `classifier` (TransposedDense) | `output_weights` `[num_labels, hidden]`, `output_bias` | as run_classifier.py's head (and HF's `classifier.weight`, untransposed) |
| `electra_tagger` | `dense` (Dense) | `task_specific/{task_name}/dense/kernel` `[hidden, num_labels]`, `.../bias` | as ELECTRA's tagging_tasks.py (tf.layers.dense under run_finetuning.py's scope) |
| `xlnet_tagger` | `logit` (Dense) | `model/tagging_{task_name}/logit/kernel` `[d_model, num_labels]`, `.../bias` | as XLNet's classifier head's naming (`model/classification_{task}/logit`); XLNet has no original tagger |

Features (records of problems/tagging.py): input_ids, input_mask, segment_ids `[B, L]` in the family's
layout; `label_ids` `[B, L]` int, the word's label on its FIRST sub-token and `IGNORE_LABEL` (-1) on
every other position (later sub-tokens, special tokens, padding); optional `is_real_example` `[B]`.

Decisions:
- The loss is token cross-entropy summed over the labelled positions and counted by them (a `Term`), so
  N replicas equal one and a long sentence weighs by its words, as HF's `ignore_index` mean does.
- `predict_outputs` gives `logits` `[B, L, num_labels]` (float32), `probabilities` and `tag_ids` (argmax)
  per position; it passes the records' `word_ids` and `sentence_index` through (problems/tagging.py
  merges windows back to words with them), as the QA heads pass `unique_ids`.
- Dropout: BERT and ELECTRA `hidden_dropout_prob`, XLNet `dropout` (HF's token classifiers' rates).
"""
from __future__ import annotations

from typing import Any

import tensorflow as tf

from textrain.framework.registry import register_model
from textrain.models import electra as electra_lib
from textrain.models import hf_format
from textrain.models import xlnet as xlnet_lib
from textrain.models.base import StepOutput, Term
from textrain.models.bert import (
    BertConfig,
    BertModel,
    TransposedDense,
    check_data_fits,
    config_from_settings,
    encoder_from_config,
    resolve_config,
)
from textrain.models.checkpoints import backing_variable
from textrain.models.electra import ElectraConfig
from textrain.models.layers.dense import Dense
from textrain.models.layers.transformer import dense_variable_map
from textrain.models.task_heads import EncoderFinetuneModel, num_labels_from_manifest
from textrain.models.xlnet import XLNetConfig, XLNetEncoder

IGNORE_LABEL = -1  # label_ids of a position that is not a word's first sub-token: no loss, no metric
PASSED_THROUGH = ("word_ids", "sentence_index")  # record features predict_outputs returns unchanged


def _f32(x: tf.Tensor) -> tf.Tensor:
    return tf.cast(x, tf.float32)


def token_terms(logits: tf.Tensor, label_ids: tf.Tensor, example_weights: tf.Tensor | None = None
                ) -> tuple[dict[str, Term], dict[str, Term]]:
    """(losses, metrics) of a batch of per-position logits `[B, L, C]` against `label_ids` `[B, L]`:
    cross-entropy and accuracy summed over the positions whose label is not IGNORE_LABEL (and whose
    example is real), counted by them."""
    logits = _f32(logits)
    labels = tf.cast(label_ids, tf.int32)
    weights = _f32(tf.not_equal(labels, IGNORE_LABEL))
    if example_weights is not None:
        weights *= tf.reshape(_f32(example_weights), [-1, 1])
    safe = tf.maximum(labels, 0)
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=safe, logits=logits)
    correct = _f32(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), safe))
    count = tf.reduce_sum(weights)
    return ({"tagging": Term(tf.reduce_sum(ce * weights), count)},
            {"accuracy": Term(tf.reduce_sum(correct * weights), count)})


class TaggerModel(EncoderFinetuneModel):
    """Base of the taggers: subclasses set `encoder_attribute`, `init_allow_unexpected` and implement
    `sequence(features, training)` (float32 `[B, L, H]`), `head(x)` (-> `[B, L, num_labels]`),
    `encoder_tf1_variable_map()` and `head_tf1_variable_map()`."""

    task_type = "tagging"

    def __init__(self, num_labels: int, dropout: float, **kwargs):
        super().__init__(**kwargs)
        if num_labels < 1:
            raise ValueError(f"a tagger needs num_labels >= 1, got {num_labels}")
        self.num_labels = int(num_labels)
        self.head_dropout = tf.keras.layers.Dropout(dropout)

    def sequence(self, features: dict[str, tf.Tensor], training: bool) -> tf.Tensor:
        raise NotImplementedError

    def head(self, x: tf.Tensor) -> tf.Tensor:
        raise NotImplementedError

    def logits(self, features: dict[str, tf.Tensor], training: bool = False) -> tf.Tensor:
        """-> float32 logits `[B, L, num_labels]`."""
        x = self.head_dropout(self.sequence(features, training), training=training)
        return _f32(self.head(x))

    def call(self, features: dict[str, tf.Tensor], training: bool = False) -> tf.Tensor:
        return self.logits(features, training=training)

    def step_output(self, features: dict[str, tf.Tensor], state: Any, training: bool) -> StepOutput:
        losses, metrics = token_terms(self.logits(features, training=training), features["label_ids"],
                                      features.get("is_real_example"))
        return StepOutput(losses, metrics, state if state is not None else {})

    def predict_outputs(self, features: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        logits = self.logits(features, training=False)
        out = {"logits": logits, "probabilities": tf.nn.softmax(logits, -1),
               "tag_ids": tf.argmax(logits, -1, output_type=tf.int32)}
        out.update({k: features[k] for k in PASSED_THROUGH if k in features})
        return out

    def head_tf1_variable_map(self) -> dict[str, tf.Variable]:
        raise NotImplementedError

    def tf1_variable_map(self, include_head: bool = True) -> dict[str, tf.Variable]:
        names = self.encoder_tf1_variable_map()
        if include_head:
            names.update(self.head_tf1_variable_map())
        return names


def _labels(num_labels: int | None, manifest: dict | None) -> int:
    return num_labels_from_manifest(manifest, "classification") if num_labels is None else int(num_labels)


@register_model(name="bert_tagger")
class BertTagger(TaggerModel):
    """BERT sequence output -> dropout -> `classifier` (TF1 `output_weights` / `output_bias`)."""

    serves_raw_text = True  # WordPiece: tokenised in the serving graph (trainers/export.py)
    encoder_attribute = "bert"
    init_allow_unexpected = (r"^cls/", r"^bert/pooler/")

    def __init__(self, config: BertConfig | str | dict, num_labels: int = 2, name: str = "bert_tagger", **kwargs):
        config = resolve_config(config)
        super().__init__(num_labels, config.hidden_dropout_prob, name=name, **kwargs)
        self.config = config
        self.bert = BertModel(self.config)
        self.classifier = TransposedDense(num_labels, self.config.initializer_range, name="classifier")
        self.bert.build(None)
        self.classifier.build((None, self.config.hidden_size))
        self.built = True

    @property
    def num_layers(self) -> int:
        return self.config.num_hidden_layers

    def sequence(self, features, training):
        sequence, _ = self.bert(features["input_ids"], features.get("input_mask"), features.get("segment_ids"),
                                training=training)
        return sequence

    def head(self, x):
        return self.classifier(x)

    def encoder_tf1_variable_map(self) -> dict[str, tf.Variable]:
        return self.bert.tf1_variable_map("bert")

    def head_tf1_variable_map(self) -> dict[str, tf.Variable]:
        return self.classifier.tf1_variable_map("")

    @classmethod
    def from_config(cls, config: dict, *, num_labels: int | None = None, n_top: tuple[int, int] = (5, 5),
                    head: str = "original"):
        return cls(BertConfig.from_dict(config), num_labels=int(num_labels or 2))

    @classmethod
    def from_settings(cls, *, num_labels: int | None = None, size: str | None = None, config_file: str | None = None,
                      overrides: dict | None = None, manifest: dict | None = None, **_other: Any) -> "BertTagger":
        """A size preset or a bert_config.json (+ `overrides`); the label count defaults to the data's."""
        config, source = config_from_settings(size, config_file, overrides, manifest)
        check_data_fits(config, manifest, source)
        return cls(config, num_labels=_labels(num_labels, manifest))


@register_model(name="electra_tagger")
class ElectraTagger(TaggerModel):
    """ELECTRA's discriminator sequence output -> dropout -> `dense` (TF1 `task_specific/{task_name}/dense`)."""

    serves_raw_text = True
    encoder_attribute = "discriminator"
    init_allow_unexpected = (r"^generator/", r"^generator_predictions/", r"^discriminator_predictions/")

    def __init__(self, config: ElectraConfig, num_labels: int = 2, task_name: str = "task",
                 name: str = "electra_tagger", **kwargs):
        super().__init__(num_labels, config.hidden_dropout_prob, name=name, **kwargs)
        self.config = config
        self.task_name = task_name or "task"
        disc = config.discriminator_config()
        self.discriminator = encoder_from_config(disc, name="discriminator")
        self.dense = Dense(num_labels, name="dense")
        ids = tf.zeros([1, 2], tf.int32)
        self.discriminator(ids, tf.ones([1, 2], tf.int32), ids)
        self.dense.build((None, disc.hidden_size))
        self.built = True

    @property
    def num_layers(self) -> int:
        return self.config.num_hidden_layers

    def sequence(self, features, training):
        return _f32(self.discriminator(features["input_ids"], features.get("input_mask"),
                                       features.get("segment_ids"), training=training))

    def head(self, x):
        return self.dense(x)

    def encoder_tf1_variable_map(self) -> dict[str, tf.Variable]:
        return self.discriminator.tf1_variable_map("electra")

    def head_tf1_variable_map(self) -> dict[str, tf.Variable]:
        return dense_variable_map(f"task_specific/{self.task_name}/dense", self.dense)

    @classmethod
    def from_config(cls, config: dict, *, num_labels: int | None = None, n_top: tuple[int, int] = (5, 5),
                    head: str = "original"):
        return cls(ElectraConfig.from_dict(config), num_labels=int(num_labels or 2), task_name=hf_format.HF_TASK_NAME)

    @classmethod
    def from_settings(cls, *, num_labels: int | None = None, size: str | None = None, config_file: str | None = None,
                      overrides: dict | None = None, manifest: dict | None = None, task_name: str | None = None,
                      **_other: Any) -> "ElectraTagger":
        """A size preset (default small) or a config json (+ `overrides`); labels and the head's scope name
        default to the data's."""
        if task_name is None:
            task_name = str((manifest or {}).get("problem", ""))
        config = electra_lib.config_from_settings(size, config_file, overrides, manifest)
        return cls(config, num_labels=_labels(num_labels, manifest), task_name=task_name)


@register_model(name="xlnet_tagger")
class XLNetTagger(TaggerModel):
    """XLNet's content stream (no memory, bi attention) -> dropout -> `logit` (TF1
    `model/tagging_{task_name}/logit`). Records in XLNet's layout: input_mask float, 1 = padding."""

    encoder_attribute = "transformer"
    init_allow_unexpected = (r"^model/lm_loss/",)
    lr_decay_style = "xlnet"
    tokenizer = "sentencepiece"

    def __init__(self, config: XLNetConfig, num_labels: int = 2, task_name: str = "task", name: str = "model",
                 **kwargs):
        super().__init__(num_labels, config.dropout, name=name, **kwargs)
        if config.mem_len or config.attn_type != "bi":
            raise ValueError("the XLNet tagger runs without memory (mem_len 0) and with bi attention")
        self.config = config
        self.task_name = (task_name or "task").lower()
        self.transformer = XLNetEncoder(config, name="transformer")
        self.logit = tf.keras.layers.Dense(num_labels, kernel_initializer=config.initializer(), name="logit")
        self.logit.build((None, config.d_model))
        self.built = True

    @property
    def num_layers(self) -> int:
        return self.config.n_layer

    def sequence(self, features, training):
        mask = features.get("input_mask")
        out = self.transformer(features["input_ids"], seg_ids=features.get("segment_ids"),
                               input_mask=None if mask is None else _f32(mask), training=training)
        return _f32(out["output"])

    def head(self, x):
        return self.logit(x)

    def serving_features(self, input_ids, input_mask, segment_ids) -> dict[str, tf.Tensor]:
        """The ids signature's three tensors; XLNet's input_mask is float, 1 = padding."""
        return {"input_ids": input_ids, "input_mask": tf.cast(input_mask, tf.float32), "segment_ids": segment_ids}

    def encoder_tf1_variable_map(self) -> dict[str, tf.Variable]:
        return self.transformer.tf1_variable_map("model/transformer")

    def head_tf1_variable_map(self) -> dict[str, tf.Variable]:
        names = {f"model/tagging_{self.task_name}/logit/kernel": self.logit.kernel,
                 f"model/tagging_{self.task_name}/logit/bias": self.logit.bias}
        return {n: backing_variable(v) for n, v in names.items()}

    @classmethod
    def from_config(cls, config: dict, *, num_labels: int | None = None, n_top: tuple[int, int] = (5, 5),
                    head: str = "original"):
        return cls(XLNetConfig(**config), num_labels=int(num_labels or 2), task_name=hf_format.HF_TASK_NAME)

    @classmethod
    def from_settings(cls, *, num_labels: int | None = None, size: str | None = None, config_file: str | None = None,
                      overrides: dict | None = None, manifest: dict | None = None, task_name: str | None = None,
                      **settings: Any) -> "XLNetTagger":
        """A preset or an xlnet_config.json, XLNetConfig fields as settings and `overrides`; labels and the
        head's scope name default to the data's."""
        if task_name is None:
            task_name = str((manifest or {}).get("problem", ""))
        fields = {k: v for k, v in settings.items()
                  if k in xlnet_lib.CONFIG_FIELDS and k not in xlnet_lib.PRETRAINING_ONLY}
        config = xlnet_lib.config_from_settings(size, config_file, {**fields, **(overrides or {})}, manifest)
        return cls(config, num_labels=_labels(num_labels, manifest), task_name=task_name)

