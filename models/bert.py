"""BERT (Devlin et al., 2018): config, encoder + pooler, pretraining heads (MLM + NSP) and a
sequence-classification head, with import from the original TF1 checkpoints by variable name.

Decisions:
- `BertConfig` reads the original `bert_config.json` unchanged. Keys it does not know (some
  released configs carry `directionality`, `pooler_*`, ...) are logged and ignored, as the
  original did; a missing `vocab_size`, a wrong type or a malformed file is an error naming the
  file. `embedding_size` (absent from original BERT configs) lets ELECTRA reuse the class.
- Like the original, "gelu" is the tanh approximation, LayerNorm epsilon 1e-12, and every
  kernel/embedding is initialised truncated-normal(initializer_range).
- The MLM head gathers the `masked_lm_positions` rows BEFORE the transform and the
  `[hidden, vocab]` output matmul: projecting all L positions costs L/P (~6x at L128/P20) more in
  the most expensive matmul of the model (HF's 20.6 vs 16.4 s/step, DESIGN §7).
- Logits are float32 before softmax/cross-entropy under any precision policy; losses are returned
  as sums and counts (`Term`), the loop divides after all-reducing (models/base.py). The original
  divided by `sum(weights) + 1e-5` per replica; ours is exact across replicas.
- Models build their variables in the constructor (explicit `build` methods from the config's
  shapes, not a dummy forward pass, which costs seconds of Keras symbolic tracing), so `tf1_variable_map`,
  optimizer creation and checkpoint restore work right after construction, inside the
  distribution strategy scope the caller constructs them in.
- NSP `output_weights` is `[2, hidden]` as in the original (transposed vs a Keras kernel), so it
  is a plain weight, not a Dense layer; the classifier's `output_weights` likewise.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any

import tensorflow as tf
from absl import logging

from textrain.framework.registry import register_model
from textrain.models import hf_format
from textrain.models.base import StepOutput, Term, TrainableModel
from textrain.models.checkpoints import load_tf1_checkpoint
from textrain.models.layers.activations import get_activation
from textrain.models.layers.dense import Dense
from textrain.models.layers.embeddings import LAYER_NORM_EPS, TransformerEmbeddings, truncated_normal
from textrain.models.layers.fused import LayerNormalization, sparse_softmax_cross_entropy
from textrain.models.layers.transformer import TransformerEncoder, dense_variable_map, layer_norm_variable_map
from textrain.models.task_heads import ClassifierModel, num_labels_from_manifest, task_type_from_manifest

# Google's released sizes (BERT-Tiny ... BERT-Large); heads are hidden/64, FFN is 4*hidden.
PRESETS: dict[str, dict[str, int]] = {
    "tiny": dict(num_hidden_layers=2, hidden_size=128),
    "mini": dict(num_hidden_layers=4, hidden_size=256),
    "small": dict(num_hidden_layers=4, hidden_size=512),
    "medium": dict(num_hidden_layers=8, hidden_size=512),
    "base": dict(num_hidden_layers=12, hidden_size=768),
    "large": dict(num_hidden_layers=24, hidden_size=1024),
}


_POSITIVE_INTS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                  "intermediate_size", "max_position_embeddings")


@dataclasses.dataclass
class BertConfig:
    """The original `bert_config.json` fields (plus `embedding_size`, None = hidden_size)."""

    vocab_size: int
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    embedding_size: int | None = None

    def __post_init__(self) -> None:
        errors = self.validation_errors()
        if errors:
            raise ValueError("invalid BertConfig: " + "; ".join(errors))

    def validation_errors(self) -> list[str]:
        """Every wrong type or range, so one error lists them all."""
        found = []
        for name in _POSITIVE_INTS + ("type_vocab_size", "embedding_size"):
            value = getattr(self, name)
            if name == "embedding_size" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                found.append(f"{name} must be int, got {value!r}")
            elif value < (0 if name == "type_vocab_size" else 1):
                found.append(f"{name} must be {'>= 0' if name == 'type_vocab_size' else '> 0'}, got {value}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
                found.append(f"{name} must be a number in [0, 1), got {value!r}")
        try:
            get_activation(self.hidden_act)
        except (ValueError, TypeError) as e:
            found.append(f"hidden_act: {e}")
        if not found and self.hidden_size % self.num_attention_heads:
            found.append(f"hidden_size {self.hidden_size} is not a multiple of "
                         f"num_attention_heads {self.num_attention_heads}")
        return found

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "config dict") -> "BertConfig":
        """From the original json's keys; unknown keys are logged and ignored. Errors name `source`."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            logging.info("%s: ignoring keys BertConfig does not use: %s", source, ", ".join(unknown))
        if "vocab_size" not in values:
            raise ValueError(f"{source}: vocab_size is required")
        try:
            return cls(**{k: v for k, v in values.items() if k in known})
        except ValueError as e:
            raise ValueError(f"{source}: {e}") from e

    @classmethod
    def from_json_file(cls, path: str) -> "BertConfig":
        with tf.io.gfile.GFile(path, "r") as f:
            text = f.read()
        try:
            values = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{e.lineno}: not valid JSON: {e.msg}") from e
        if not isinstance(values, dict):
            raise ValueError(f"{path}: expected a JSON object, got {type(values).__name__}")
        return cls.from_dict(values, source=path)

    @classmethod
    def preset(cls, name: str, vocab_size: int = 30522, **overrides: Any) -> "BertConfig":
        """A released size (`tiny`, `mini`, `small`, `medium`, `base`, `large`)."""
        if name not in PRESETS:
            raise ValueError(f"unknown BERT size {name!r}; known: {', '.join(PRESETS)}")
        sizes = dict(PRESETS[name])
        hidden = sizes["hidden_size"]
        sizes.update(num_attention_heads=hidden // 64, intermediate_size=4 * hidden)
        sizes.update(overrides)
        return cls(vocab_size=vocab_size, **sizes)

    def to_dict(self) -> dict[str, Any]:
        values = dataclasses.asdict(self)
        if values["embedding_size"] is None:
            del values["embedding_size"]  # keep files readable by the original code
        return values

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"


def encoder_from_config(config: BertConfig, embeddings: TransformerEmbeddings | None = None,
                        name: str = "encoder") -> TransformerEncoder:
    """The Transformer stack a `BertConfig` describes (optionally reading shared embeddings)."""
    return TransformerEncoder(
        vocab_size=config.vocab_size, hidden_size=config.hidden_size,
        num_layers=config.num_hidden_layers, num_heads=config.num_attention_heads,
        intermediate_size=config.intermediate_size, hidden_act=config.hidden_act,
        hidden_dropout=config.hidden_dropout_prob, attention_dropout=config.attention_probs_dropout_prob,
        max_position_embeddings=config.max_position_embeddings, type_vocab_size=config.type_vocab_size,
        initializer_range=config.initializer_range, embedding_size=config.embedding_size,
        embeddings=embeddings, name=name)


def resolve_config(config: BertConfig | str | dict) -> BertConfig:
    """A BertConfig from itself, a dict, a preset name or a path to a bert_config.json."""
    if isinstance(config, BertConfig):
        return config
    if isinstance(config, dict):
        return BertConfig.from_dict(config)
    if isinstance(config, str) and config in PRESETS:
        return BertConfig.preset(config)
    if isinstance(config, str):
        return BertConfig.from_json_file(config)
    raise TypeError(f"expected a BertConfig, dict, preset name or json path, got {config!r}")


def gather_indexes(sequence: tf.Tensor, positions: tf.Tensor) -> tf.Tensor:
    """`[B, L, H]` rows at `positions` `[B, P]` -> `[B, P, H]`."""
    return tf.gather(sequence, tf.cast(positions, tf.int32), batch_dims=1)


class BertModel(tf.keras.Model):
    """Encoder + pooler (tanh dense on the first token)."""

    def __init__(self, config: BertConfig, name: str = "bert", **kwargs):
        super().__init__(name=name, **kwargs)
        self.config = config
        self.encoder = encoder_from_config(config)
        self.pooler = Dense(config.hidden_size, activation="tanh",
                                            kernel_initializer=truncated_normal(config.initializer_range),
                                            name="pooler_dense")

    @property
    def embeddings(self) -> TransformerEmbeddings:
        return self.encoder.embeddings

    def build(self, input_shape=None) -> None:
        self.encoder.build(input_shape)
        self.pooler.build((None, self.config.hidden_size))
        self.built = True

    def call(self, input_ids: tf.Tensor, input_mask: tf.Tensor | None = None,
             segment_ids: tf.Tensor | None = None, training: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
        """-> (sequence_output `[B, L, hidden]`, pooled_output `[B, hidden]`)."""
        sequence_output = self.encoder(input_ids, input_mask, segment_ids, training=training)
        pooled_output = self.pooler(sequence_output[:, 0])
        return sequence_output, pooled_output

    def tf1_variable_map(self, scope: str = "bert") -> dict[str, tf.Variable]:
        names = self.encoder.tf1_variable_map(scope)
        names.update(dense_variable_map(f"{scope}/pooler/dense", self.pooler))
        return names


class MaskedLMHead(tf.keras.layers.Layer):
    """Transform (dense + act + LayerNorm) then logits tied to the word embeddings, plus a bias.

    The transform maps to the embedding table's width, so it also serves factorised embeddings
    (ELECTRA's generator). Call with positions to gather first.
    """

    def __init__(self, embeddings: TransformerEmbeddings, hidden_act: str = "gelu",
                 initializer_range: float = 0.02, layer_norm_eps: float = LAYER_NORM_EPS,
                 name: str = "predictions", **kwargs):
        super().__init__(name=name, **kwargs)
        self.embeddings = embeddings
        self.dense = Dense(embeddings.embedding_size, activation=get_activation(hidden_act),
                                           kernel_initializer=truncated_normal(initializer_range),
                                           name="transform_dense")
        self.layer_norm = LayerNormalization(epsilon=layer_norm_eps, name="transform_LayerNorm")

    def build(self, input_shape) -> None:
        self.dense.build(input_shape)
        self.layer_norm.build((None, self.embeddings.embedding_size))
        self.output_bias = self.add_weight(name="output_bias", shape=(self.embeddings.vocab_size,),
                                           initializer="zeros")
        self.built = True

    def call(self, sequence_output: tf.Tensor, positions: tf.Tensor | None = None) -> tf.Tensor:
        """-> float32 logits `[B, P, vocab]` (or `[B, L, vocab]` without positions)."""
        x = sequence_output if positions is None else gather_indexes(sequence_output, positions)
        x = self.layer_norm(self.dense(x))
        logits = tf.cast(self.embeddings.attend(x), tf.float32)
        return logits + tf.cast(self.output_bias, tf.float32)

    def tf1_variable_map(self, scope: str = "cls/predictions") -> dict[str, tf.Variable]:
        names = dense_variable_map(f"{scope}/transform/dense", self.dense)
        names.update(layer_norm_variable_map(f"{scope}/transform/LayerNorm", self.layer_norm))
        names[f"{scope}/output_bias"] = self.output_bias
        return names


class TransposedDense(tf.keras.layers.Layer):
    """`x @ output_weights^T + output_bias` with the originals' `[units, in]` weight layout."""

    def __init__(self, units: int, initializer_range: float = 0.02, name: str = "output", **kwargs):
        super().__init__(name=name, **kwargs)
        self.units = units
        self.initializer_range = initializer_range

    def build(self, input_shape) -> None:
        self.output_weights = self.add_weight(name="output_weights", shape=(self.units, int(input_shape[-1])),
                                              initializer=truncated_normal(self.initializer_range))
        self.output_bias = self.add_weight(name="output_bias", shape=(self.units,), initializer="zeros")
        self.built = True

    def call(self, x: tf.Tensor) -> tf.Tensor:
        """-> float32 logits (the layer is tiny; fp32 keeps the loss exact under bf16)."""
        x = tf.cast(x, tf.float32)
        return tf.matmul(x, tf.cast(self.output_weights, tf.float32), transpose_b=True) + \
            tf.cast(self.output_bias, tf.float32)

    def tf1_variable_map(self, scope: str) -> dict[str, tf.Variable]:
        prefix = f"{scope}/" if scope else ""
        return {f"{prefix}output_weights": self.output_weights, f"{prefix}output_bias": self.output_bias}


def _float(x: tf.Tensor) -> tf.Tensor:
    return tf.cast(x, tf.float32)


def masked_lm_terms(logits: tf.Tensor, label_ids: tf.Tensor, weights: tf.Tensor) -> tuple[Term, Term]:
    """(loss, accuracy) Terms of the MLM: weighted sums over predictions, counted by sum of weights."""
    label_ids = tf.cast(label_ids, tf.int32)
    weights = _float(weights)
    ce = sparse_softmax_cross_entropy(label_ids, logits)
    correct = _float(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), label_ids))
    count = tf.reduce_sum(weights)
    return Term(tf.reduce_sum(ce * weights), count), Term(tf.reduce_sum(correct * weights), count)


def classification_terms(logits: tf.Tensor, labels: tf.Tensor,
                         weights: tf.Tensor | None = None) -> tuple[Term, Term]:
    """(loss, accuracy) Terms of a per-example classification; `weights` defaults to ones."""
    labels = tf.reshape(tf.cast(labels, tf.int32), [-1])
    weights = tf.ones_like(labels, tf.float32) if weights is None else tf.reshape(_float(weights), [-1])
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    correct = _float(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), labels))
    count = tf.reduce_sum(weights)
    return Term(tf.reduce_sum(ce * weights), count), Term(tf.reduce_sum(correct * weights), count)


@register_model(name="bert")
class BertPretrainer(TrainableModel):
    """BERT with the masked-LM and next-sentence-prediction heads of the original pretraining."""

    def __init__(self, config: BertConfig | str | dict, name: str = "bert_pretrainer", **kwargs):
        super().__init__(name=name, **kwargs)
        self.config = resolve_config(config)
        self.bert = BertModel(self.config)
        self.masked_lm = MaskedLMHead(self.bert.embeddings, self.config.hidden_act,
                                      self.config.initializer_range)
        self.next_sentence = TransposedDense(2, self.config.initializer_range, name="seq_relationship")
        self.build(None)

    @classmethod
    def from_config(cls, config: dict, *, num_labels: int | None = None, n_top: tuple[int, int] = (5, 5),
                    head: str = "original"):
        return cls(BertConfig.from_dict(config))

    @classmethod
    def from_settings(cls, *, size: str | None = None, config_file: str | None = None,
                      vocab_size: int | None = None, manifest: dict | None = None, **_other: Any) -> "BertPretrainer":
        """The one constructor (every trainer builds the model through it): see `pretraining_config`;
        data the config cannot embed is refused. Settings of other model families (`_other`) are not BERT's."""
        config, source = pretraining_config(size, config_file, vocab_size, manifest)
        check_data_fits(config, manifest, source)
        return cls(config)

    def build(self, input_shape=None) -> None:
        """Create every variable now (see module docstring); shapes come from the config."""
        hidden = self.config.hidden_size
        self.bert.build(None)
        self.masked_lm.build((None, None, hidden))
        self.next_sentence.build((None, hidden))
        self.built = True

    def call(self, features: dict[str, tf.Tensor], training: bool = False) -> dict[str, tf.Tensor]:
        """-> mlm_logits `[B, P, vocab]`, nsp_logits `[B, 2]` (float32), sequence/pooled outputs."""
        sequence_output, pooled_output = self.bert(
            features["input_ids"], features.get("input_mask"), features.get("segment_ids"), training=training)
        return {
            "mlm_logits": self.masked_lm(sequence_output, features["masked_lm_positions"]),
            "nsp_logits": self.next_sentence(pooled_output),
            "sequence_output": sequence_output,
            "pooled_output": pooled_output,
        }

    def step_output(self, features: dict[str, tf.Tensor], state: Any, training: bool) -> StepOutput:
        outputs = self(features, training=training)
        mlm_loss, mlm_accuracy = masked_lm_terms(outputs["mlm_logits"], features["masked_lm_ids"],
                                                 features["masked_lm_weights"])
        nsp_loss, nsp_accuracy = classification_terms(outputs["nsp_logits"], features["next_sentence_labels"])
        return StepOutput(losses={"mlm": mlm_loss, "nsp": nsp_loss},
                          metrics={"mlm_accuracy": mlm_accuracy, "nsp_accuracy": nsp_accuracy},
                          state=state if state is not None else {})

    def tf1_variable_map(self) -> dict[str, tf.Variable]:
        names = self.bert.tf1_variable_map("bert")
        names.update(self.masked_lm.tf1_variable_map("cls/predictions"))
        names.update(self.next_sentence.tf1_variable_map("cls/seq_relationship"))
        return names

    def load_tf1_checkpoint(self, path: str) -> list[str]:
        """Import an original BERT pretraining checkpoint (e.g. uncased_L-12_H-768_A-12/bert_model.ckpt)."""
        return load_tf1_checkpoint(path, self.tf1_variable_map())


@register_model(name="bert_classifier")
class BertClassifier(ClassifierModel):
    """Pooled output -> dropout -> dense `num_labels` (run_classifier.py's head and names).

    Features: input_ids, input_mask, segment_ids `[B, L]`, label_ids `[B]` (multilabel: `[B, num_labels]`),
    and optionally is_real_example `[B]` (padding examples of fixed-size eval batches get weight 0).
    `task_type` "regression" (num_labels 1, squared error) and "multilabel" (sigmoid per label) use the
    same head (models/task_heads.py); the original has classification only.
    """

    serves_raw_text = True  # WordPiece: tokenised in the serving graph (trainers/export.py)

    encoder_attribute = "bert"
    # Pretraining-only names of an original release (MLM/NSP heads).
    init_allow_unexpected = (r"^cls/",)

    def __init__(self, config: BertConfig | str | dict, num_labels: int = 2, task_type: str = "classification",
                 name: str = "bert_classifier", **kwargs):
        super().__init__(num_labels, task_type, name=name, **kwargs)
        self.config = resolve_config(config)
        self.bert = BertModel(self.config)
        self.dropout = tf.keras.layers.Dropout(self.config.hidden_dropout_prob)
        self.classifier = TransposedDense(num_labels, self.config.initializer_range, name="classifier")
        self.build(None)

    def build(self, input_shape=None) -> None:
        self.bert.build(None)
        self.classifier.build((None, self.config.hidden_size))
        self.built = True

    @property
    def num_layers(self) -> int:
        return self.config.num_hidden_layers

    def logits(self, features: dict[str, tf.Tensor], training: bool = False) -> tf.Tensor:
        """-> float32 logits `[B, num_labels]`."""
        _, pooled_output = self.bert(features["input_ids"], features.get("input_mask"),
                                     features.get("segment_ids"), training=training)
        return self.classifier(self.dropout(pooled_output, training=training))

    def encoder_tf1_variable_map(self) -> dict[str, tf.Variable]:
        return self.bert.tf1_variable_map("bert")

    def head_tf1_variable_map(self) -> dict[str, tf.Variable]:
        return self.classifier.tf1_variable_map("")

    def tf1_variable_map(self, include_head: bool = True) -> dict[str, tf.Variable]:
        names = self.encoder_tf1_variable_map()
        if include_head:
            names.update(self.head_tf1_variable_map())
        return names

    def load_tf1_checkpoint(self, path: str) -> list[str]:
        """Import a checkpoint fine-tuned by the original run_classifier.py (head included)."""
        return load_tf1_checkpoint(path, self.tf1_variable_map())

    def init_from_pretrained(self, path: str) -> list[str]:
        """Load the encoder and pooler from an original pretraining checkpoint; heads stay fresh."""
        return self.load_init_checkpoint(path)

    @classmethod
    def from_config(cls, config: dict, *, num_labels: int | None = None, n_top: tuple[int, int] = (5, 5),
                    head: str = "original"):
        return cls(BertConfig.from_dict(config), num_labels=int(num_labels or 2))

    @classmethod
    def from_settings(cls, *, num_labels: int | None = None, task_type: str | None = None, size: str | None = None,
                      config_file: str | None = None, overrides: dict | None = None,
                      manifest: dict | None = None, task_name: str | None = None, **_other: Any) -> "BertClassifier":
        """The one constructor: a size preset or a bert_config.json, `overrides`; the label count and task
        type default to the data manifest's. Settings of other model families (`_other`) are not BERT's."""
        task_type = task_type or task_type_from_manifest(manifest)
        num_labels = num_labels_from_manifest(manifest, task_type) if num_labels is None else num_labels
        config, source = config_from_settings(size, config_file, overrides, manifest)
        check_data_fits(config, manifest, source)
        return cls(config, num_labels=num_labels, task_type=task_type)


def config_from_settings(size: str | None, config_file: str | None, overrides: dict | None,
                         manifest: dict | None) -> tuple[BertConfig, str]:
    """(config, where it came from): the json file if given, else the preset (default base) with the
    data's vocab_size; `overrides` replace single fields (e.g. a tiny test model)."""
    settings = (manifest or {}).get("settings") or {}
    if config_file and hf_format.is_hf_directory(config_file):  # a Hugging Face model's config.json
        values = hf_format.bert_config_dict(hf_format.read_config(config_file), config_file)
        config, source = BertConfig.from_dict(values, source=config_file), config_file
    elif config_file:
        config, source = BertConfig.from_json_file(config_file), config_file
    else:
        size = size or "base"
        vocab_size = int(settings.get("vocab_size") or settings.get("inputs_vocab_size") or 30522)
        config, source = BertConfig.preset(size, vocab_size=vocab_size), f"size {size} (vocab_size {vocab_size})"
    if overrides:
        # A config FILE may carry keys BERT does not use (logged); an override names a field on purpose, so a
        # misspelt one is refused rather than dropped.
        known = {f.name for f in dataclasses.fields(BertConfig)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(f"overrides: BertConfig has no field {', '.join(map(repr, unknown))}; its fields: "
                             f"{', '.join(sorted(known))}")
        config = BertConfig.from_dict({**config.to_dict(), **overrides}, source=f"{source} + overrides")
    return config, source


def check_data_fits(config: BertConfig, manifest: dict | None, source: str = "model config") -> None:
    """Refuse data the model cannot embed: ids >= vocab_size (bert issue #82: on GPU/TPU the
    lookup silently returns zeros), or sequences longer than max_position_embeddings."""
    if not manifest:
        return
    max_id = (manifest.get("feature_max") or {}).get("input_ids")
    if max_id is not None and max_id >= config.vocab_size:
        raise ValueError(f"the data's largest input id is {max_id} but {source} has vocab_size "
                         f"{config.vocab_size}: ids must be < vocab_size (wrong vocab or config?)")
    seq_len = (manifest.get("settings") or {}).get("max_seq_length")
    if seq_len is not None and seq_len > config.max_position_embeddings:
        raise ValueError(f"the data's max_seq_length is {seq_len} but {source} has max_position_embeddings "
                         f"{config.max_position_embeddings}")


def pretraining_config(size: str | None, config_file: str | None, vocab_size: int | None,
                       manifest: dict | None) -> tuple[BertConfig, str]:
    """(config, where it came from): `config_file` (an original bert_config.json) if given, else the
    `size` preset (default base) with the data's vocab_size (else `vocab_size`, else 30522)."""
    settings = (manifest or {}).get("settings") or {}
    if config_file:
        config = BertConfig.from_json_file(config_file)
        data_vocab = settings.get("vocab_size")
        if data_vocab is not None and data_vocab != config.vocab_size:
            logging.warning("%s has vocab_size %d but the data's vocabulary has %d entries",
                           config_file, config.vocab_size, data_vocab)
        return config, f"bert_config_file={config_file}"
    size = size or "base"
    vocab_size = settings.get("vocab_size") or vocab_size or 30522
    return BertConfig.preset(size, vocab_size=int(vocab_size)), f"model_size={size} (vocab_size {vocab_size})"
