"""tensor2tensor's Transformer encoder-decoder (Vaswani et al., 2017) as t2t's `transformer` model.

    textrain-train-gpu --problem=translate_enzh_sub8k --model=transformer --hparams_set=transformer_small \
        --hparams='num_hidden_layers=3,hidden_size=256' --data_dir=data --model_dir=runs/t

Decisions (t2t's defaults, re-stated; the sets are those of t2t's models/transformer.py):
- Pre-norm sequences (t2t's layer_preprocess_sequence "n", layer_postprocess_sequence "da"): each
  sub-layer is `x + dropout(f(layer_norm(x)))`, and the encoder and the decoder end with a layer norm.
  LayerNorm epsilon 1e-6.
- Attention is the shared models/layers/attention.py layer (the one masked softmax) without biases and
  with Glorot-uniform kernels (t2t: `uniform_unit_scaling`, gain 1.0, i.e. variance scaling fan_avg
  uniform); the feed-forward is dense(filter, relu) -> relu_dropout -> dense(hidden), with biases.
- Positions: t2t's timing signal, sin on the first half of the channels and cos on the second, timescales
  1 .. 1e4, added to the embeddings; the embeddings are multiplied by sqrt(hidden) and zeroed on
  padding (id 0). Embedding tables are normal(0, hidden^-0.5).
- The decoder input is the target embeddings shifted right by one position with a zero vector first
  (t2t's shift_right_3d), so step 0 of decoding reads zeros.
- Source and target embeddings are one table when the data's two vocabularies are the same file (same
  fingerprint in the manifest), else two; the softmax reads the target table transposed when
  `shared_embedding_and_softmax_weights` (t2t's default), else its own. translate_enzh_sub8k has separate
  en and zh vocabularies, so it gets two tables, the target one tied to the softmax.
- Loss: t2t's label smoothing: the target gets `1 - ls`, every other id `ls / (vocab - 1)`, and the
  cross entropy has the entropy of that distribution subtracted (so a perfect model scores 0), summed
  over non-padding target tokens and counted (`models.base.Term`): the trainer divides after the
  all-reduce, as t2t's `padded_cross_entropy` divides by the non-padding weight.
- Hyper-parameters: `--hparams_set` picks a set, `--hparams='a=1,b=2'` overrides fields (t2t syntax). A
  set also carries t2t's training choices (token batch 4096, max_length 256, Adam 0.9/0.997/1e-9 without
  weight decay or clipping, schedule `constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size` with
  constant 2.0 and 8000 warmup steps); `Transformer.trainer_defaults` hands them to the trainer for every flag
  the command line did not give.
- Incremental decoding: `decoding_cache` encodes once and projects each layer's encoder keys/values once;
  `decode_step` runs one position, writing its self-attention keys/values into fixed-size per-layer
  buffers `[N, heads, decode_length, head_size]` (a one-hot write, fixed shapes for tf.while_loop and
  XLA) and attending to positions <= i. Its logits equal the full forward pass's (tested to 1e-5).
"""
from __future__ import annotations

import dataclasses
import math
import typing
from typing import Any

import tensorflow as tf

from textrain.framework.registry import register_model
from textrain.models import beam_search as search
from textrain.models.base import Seq2SeqModel, StepOutput, Term
from textrain.models.layers.attention import MultiHeadAttention
from textrain.models.layers.dense import Dense


# ============================================================================================ hparams
@dataclasses.dataclass
class TransformerHParams:
    hidden_size: int = 512
    filter_size: int = 2048
    num_heads: int = 8
    num_hidden_layers: int = 6
    num_encoder_layers: int = 0  # 0: num_hidden_layers
    num_decoder_layers: int = 0  # 0: num_hidden_layers
    layer_prepostprocess_dropout: float = 0.1
    attention_dropout: float = 0.1
    relu_dropout: float = 0.1
    label_smoothing: float = 0.1
    layer_norm_epsilon: float = 1e-6
    initializer_gain: float = 1.0
    shared_embedding_and_softmax_weights: bool = True
    # Training choices of the set (handed to the trainer flags the user did not give).
    batch_size: int = 4096  # tokens per batch
    max_length: int = 256
    learning_rate_constant: float = 2.0
    learning_rate_warmup_steps: int = 8000
    optimizer_adam_beta1: float = 0.9
    optimizer_adam_beta2: float = 0.997
    optimizer_adam_epsilon: float = 1e-9
    weight_decay: float = 0.0
    clip_grad_norm: float = 0.0
    # Decoding (t2t's decode_hparams).
    beam_size: int = 4
    alpha: float = 0.6
    extra_length: int = 100

    @property
    def encoder_layers(self) -> int:
        return self.num_encoder_layers or self.num_hidden_layers

    @property
    def decoder_layers(self) -> int:
        return self.num_decoder_layers or self.num_hidden_layers

    def validate(self) -> None:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not a multiple of num_heads {self.num_heads}")
        for name in ("hidden_size", "filter_size", "num_heads", "num_hidden_layers", "batch_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if not 0 <= self.label_smoothing < 1:
            raise ValueError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")


def transformer_base() -> TransformerHParams:
    """t2t's transformer_base (= transformer_base_v3)."""
    return TransformerHParams()


def transformer_big() -> TransformerHParams:
    return dataclasses.replace(transformer_base(), hidden_size=1024, filter_size=4096, num_heads=16,
                               batch_size=2048, layer_prepostprocess_dropout=0.3)


def transformer_small() -> TransformerHParams:
    return dataclasses.replace(transformer_base(), num_hidden_layers=2, hidden_size=256, filter_size=1024,
                               num_heads=4)


def transformer_tiny() -> TransformerHParams:
    return dataclasses.replace(transformer_base(), num_hidden_layers=2, hidden_size=128, filter_size=512,
                               num_heads=4)


HPARAMS_SETS = {f.__name__: f for f in (transformer_tiny, transformer_small, transformer_base, transformer_big)}


def _parse_value(name: str, tp: type, text: str) -> Any:
    if tp is bool:
        if text.lower() in ("true", "1", "yes"):
            return True
        if text.lower() in ("false", "0", "no"):
            return False
        raise ValueError(f"--hparams: {name} must be true or false, got {text!r}")
    try:
        return tp(text)
    except ValueError:
        raise ValueError(f"--hparams: {name} must be {tp.__name__}, got {text!r}") from None


def parse_hparams(hparams_set: str | None, overrides: str | None) -> TransformerHParams:
    """The named set with t2t-style `name=value,name=value` overrides; unknown names are an error."""
    name = hparams_set or "transformer_base"
    if name not in HPARAMS_SETS:
        raise ValueError(f"--hparams_set={name!r} is not a transformer set; known: {', '.join(HPARAMS_SETS)}")
    hp = HPARAMS_SETS[name]()
    types = typing.get_type_hints(TransformerHParams)
    values = {}
    for item in filter(None, (s.strip() for s in (overrides or "").split(","))):
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or key not in types:
            known = ", ".join(f.name for f in dataclasses.fields(TransformerHParams))
            raise ValueError(f"--hparams: {item!r} is not name=value with a known name; known: {known}")
        values[key] = _parse_value(key, types[key], text.strip())
    hp = dataclasses.replace(hp, **values)
    hp.validate()
    return hp


# ============================================================================================= layers
def timing_signal(length, channels: int, start=0, min_timescale: float = 1.0,
                  max_timescale: float = 1.0e4) -> tf.Tensor:
    """t2t's `get_timing_signal_1d`: `[length, channels]`, sin on the first half, cos on the second."""
    position = tf.cast(tf.range(length) + start, tf.float32)
    num_timescales = channels // 2
    increment = math.log(max_timescale / min_timescale) / max(num_timescales - 1, 1)
    inv_timescales = min_timescale * tf.exp(tf.range(num_timescales, dtype=tf.float32) * -increment)
    scaled = position[:, None] * inv_timescales[None, :]
    signal = tf.concat([tf.sin(scaled), tf.cos(scaled)], axis=1)
    return tf.pad(signal, [[0, 0], [0, channels % 2]])


def glorot(gain: float) -> tf.keras.initializers.Initializer:
    """t2t's uniform_unit_scaling initializer: variance scaling, fan_avg, uniform."""
    return tf.keras.initializers.VarianceScaling(scale=gain, mode="fan_avg", distribution="uniform")


class SymbolEmbedding(tf.keras.layers.Layer):
    """A `[vocab, hidden]` table: `embed` (x sqrt(hidden), zero on padding) and `logits` (x @ table^T)."""

    def __init__(self, vocab_size: int, hidden_size: int, name: str = "embedding", **kwargs):
        super().__init__(name=name, **kwargs)
        self.vocab_size, self.hidden_size = vocab_size, hidden_size

    def build(self, input_shape=None) -> None:
        self.table = self.add_weight(
            name="weights", shape=(self.vocab_size, self.hidden_size),
            initializer=tf.keras.initializers.RandomNormal(0.0, self.hidden_size ** -0.5))
        self.built = True

    def embed(self, ids: tf.Tensor) -> tf.Tensor:
        x = tf.gather(self.table, ids) * (self.hidden_size ** 0.5)
        return x * tf.cast(tf.not_equal(ids, 0), x.dtype)[..., None]

    def logits(self, x: tf.Tensor) -> tf.Tensor:
        """float32 logits `[..., vocab]`."""
        flat = tf.reshape(tf.cast(x, tf.float32), [-1, self.hidden_size])
        out = tf.matmul(flat, tf.cast(self.table, tf.float32), transpose_b=True)
        return tf.reshape(out, tf.concat([tf.shape(x)[:-1], [self.vocab_size]], axis=0))


class FeedForward(tf.keras.layers.Layer):
    """t2t's dense_relu_dense: dense(filter, relu) -> relu_dropout -> dense(hidden)."""

    def __init__(self, hp: TransformerHParams, name: str = "ffn", **kwargs):
        super().__init__(name=name, **kwargs)
        init = glorot(hp.initializer_gain)
        self.hidden = Dense(hp.filter_size, activation="relu", kernel_initializer=init, name="conv1")
        self.output_dense = Dense(hp.hidden_size, kernel_initializer=init, name="conv2")
        self.dropout = tf.keras.layers.Dropout(hp.relu_dropout)
        self.hidden_size = hp.hidden_size

    def build(self, input_shape=None) -> None:
        self.hidden.build((None, None, self.hidden_size))
        self.output_dense.build((None, None, self.hidden.units))
        self.built = True

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        return self.output_dense(self.dropout(self.hidden(x), training=training))


def _attention(hp: TransformerHParams, name: str) -> MultiHeadAttention:
    return MultiHeadAttention(hp.hidden_size, hp.num_heads, hp.attention_dropout, name=name, use_bias=False,
                              kernel_initializer=glorot(hp.initializer_gain))


def _layer_norm(hp: TransformerHParams, name: str) -> tf.keras.layers.LayerNormalization:
    return tf.keras.layers.LayerNormalization(epsilon=hp.layer_norm_epsilon, name=name)


class EncoderLayer(tf.keras.layers.Layer):
    def __init__(self, hp: TransformerHParams, name: str, **kwargs):
        super().__init__(name=name, **kwargs)
        self.hidden_size = hp.hidden_size
        self.self_attention_norm = _layer_norm(hp, "self_attention_norm")
        self.self_attention = _attention(hp, "self_attention")
        self.ffn_norm = _layer_norm(hp, "ffn_norm")
        self.ffn = FeedForward(hp)
        self.dropout = tf.keras.layers.Dropout(hp.layer_prepostprocess_dropout)

    def build(self, input_shape=None) -> None:
        shape = (None, None, self.hidden_size)
        for layer in (self.self_attention_norm, self.self_attention, self.ffn_norm, self.ffn):
            layer.build(shape)
        self.built = True

    def call(self, x: tf.Tensor, mask: tf.Tensor, training: bool = False) -> tf.Tensor:
        y = self.self_attention(self.self_attention_norm(x), attention_mask=mask, training=training)
        x = x + self.dropout(y, training=training)
        return x + self.dropout(self.ffn(self.ffn_norm(x), training=training), training=training)


class DecoderLayer(tf.keras.layers.Layer):
    def __init__(self, hp: TransformerHParams, name: str, **kwargs):
        super().__init__(name=name, **kwargs)
        self.hidden_size = hp.hidden_size
        self.self_attention_norm = _layer_norm(hp, "self_attention_norm")
        self.self_attention = _attention(hp, "self_attention")
        self.encdec_attention_norm = _layer_norm(hp, "encdec_attention_norm")
        self.encdec_attention = _attention(hp, "encdec_attention")
        self.ffn_norm = _layer_norm(hp, "ffn_norm")
        self.ffn = FeedForward(hp)
        self.dropout = tf.keras.layers.Dropout(hp.layer_prepostprocess_dropout)

    def build(self, input_shape=None) -> None:
        shape = (None, None, self.hidden_size)
        for layer in (self.self_attention_norm, self.self_attention, self.encdec_attention_norm,
                      self.encdec_attention, self.ffn_norm, self.ffn):
            layer.build(shape)
        self.built = True

    def _rest(self, x, encoder_kv, encoder_mask, training):
        y = self.encdec_attention(self.encdec_attention_norm(x), attention_mask=encoder_mask,
                                  key_value=encoder_kv, training=training)
        x = x + self.dropout(y, training=training)
        return x + self.dropout(self.ffn(self.ffn_norm(x), training=training), training=training)

    def call(self, x: tf.Tensor, causal_mask: tf.Tensor, encoder_output: tf.Tensor, encoder_mask: tf.Tensor,
             training: bool = False) -> tf.Tensor:
        y = self.self_attention(self.self_attention_norm(x), attention_mask=causal_mask, training=training)
        x = x + self.dropout(y, training=training)
        encoder_kv = self.encdec_attention.project_key_value(encoder_output)
        return self._rest(x, encoder_kv, encoder_mask, training)

    def step(self, x: tf.Tensor, i: tf.Tensor, cache: dict, encoder_mask: tf.Tensor) -> tuple[tf.Tensor, dict]:
        """One position `x` `[N, 1, hidden]` at step `i`; `cache` holds this layer's buffers."""
        h = self.self_attention_norm(x)
        k_new, v_new = self.self_attention.project_key_value(h)  # [N, heads, 1, head_size]
        length = tf.shape(cache["k"])[2]
        at_i = tf.one_hot(i, length, dtype=k_new.dtype)[None, None, :, None]
        k = cache["k"] * (1.0 - at_i) + k_new * at_i
        v = cache["v"] * (1.0 - at_i) + v_new * at_i
        visible = (tf.range(length) <= i)[None, None, :]  # [1, 1, T]: positions written so far
        y = self.self_attention(h, attention_mask=visible, key_value=(k, v))
        x = x + y
        x = self._rest(x, (cache["encoder_k"], cache["encoder_v"]), encoder_mask[:, None, :], False)
        return x, dict(cache, k=k, v=v)


# ============================================================================================== model
def smoothed_cross_entropy(logits: tf.Tensor, labels: tf.Tensor, label_smoothing: float) -> tf.Tensor:
    """t2t's `smoothing_cross_entropy` per token: cross entropy against (1-ls on the label, ls/(V-1)
    elsewhere) minus that distribution's entropy, computed without materialising the one-hot."""
    logits = tf.cast(logits, tf.float32)
    vocab = logits.shape[-1] or tf.shape(logits)[-1]
    log_probs = tf.nn.log_softmax(logits)
    label_lp = tf.gather(log_probs, labels, batch_dims=labels.shape.rank)
    if label_smoothing <= 0:
        return -label_lp
    confidence = 1.0 - label_smoothing
    low = label_smoothing / tf.cast(vocab - 1, tf.float32)
    xent = -(confidence * label_lp + low * (tf.reduce_sum(log_probs, axis=-1) - label_lp))
    normalizing = -(confidence * math.log(confidence) +
                    tf.cast(vocab - 1, tf.float32) * low * tf.math.log(low + 1e-20))
    return xent - normalizing


@register_model(name="transformer")
class Transformer(Seq2SeqModel):
    """Features `inputs` `[B, Ls]` and `targets` `[B, Lt]` (ids, 0 = padding, EOS-terminated)."""

    def __init__(self, hparams: TransformerHParams, input_vocab_size: int, target_vocab_size: int,
                 shared_vocab: bool = False, name: str = "transformer", **kwargs):
        super().__init__(name=name, **kwargs)
        hparams.validate()
        if shared_vocab and input_vocab_size != target_vocab_size:
            raise ValueError(f"a shared vocabulary needs equal sizes, got {input_vocab_size} and {target_vocab_size}")
        self.hparams = hp = hparams
        self.input_vocab_size, self.target_vocab_size = input_vocab_size, target_vocab_size
        self.target_embedding = SymbolEmbedding(target_vocab_size, hp.hidden_size, name="target_embedding")
        self.input_embedding = (self.target_embedding if shared_vocab else
                                SymbolEmbedding(input_vocab_size, hp.hidden_size, name="input_embedding"))
        self.softmax = (self.target_embedding if hp.shared_embedding_and_softmax_weights else
                        SymbolEmbedding(target_vocab_size, hp.hidden_size, name="softmax"))
        self.encoder_layers = [EncoderLayer(hp, f"encoder_layer_{i}") for i in range(hp.encoder_layers)]
        self.decoder_layers = [DecoderLayer(hp, f"decoder_layer_{i}") for i in range(hp.decoder_layers)]
        # One attribute per layer as well: TF's object graph does not follow Keras 3's list tracking, so
        # layers held only in a list are reachable in a checkpoint only through the optimizer, and
        # tf.train.Checkpoint(model=...) alone (decoding, averaging, init_checkpoint) would miss them.
        for layer in self.encoder_layers + self.decoder_layers:
            setattr(self, layer.name, layer)
        self.encoder_norm = _layer_norm(hp, "encoder_norm")
        self.decoder_norm = _layer_norm(hp, "decoder_norm")
        self.dropout = tf.keras.layers.Dropout(hp.layer_prepostprocess_dropout)
        self.build(None)

    @classmethod
    def from_settings(cls, *, hparams_set: str | None = None, hparams: str | None = None,
                      manifest: dict | None = None, **_other: Any) -> "Transformer":
        """The one constructor (the trainers and textrain-decode build the model through it): the named
        hparams set with `hparams` overrides, vocabularies from a Text2Text problem's manifest. Settings
        of other model families (`_other`) are not the Transformer's."""
        from textrain.framework.errors import UserError

        try:
            hp = parse_hparams(hparams_set, hparams)
            inputs, targets, shared = vocab_from_manifest(manifest)
        except ValueError as e:
            raise UserError(str(e)) from None
        return cls(hp, inputs, targets, shared_vocab=shared)

    @classmethod
    def trainer_defaults(cls, settings: dict[str, Any]) -> dict[str, Any]:
        """The trainer settings the hparams set decides (t2t: the set carries the optimizer and batching)."""
        hp = parse_hparams(settings.get("hparams_set"), settings.get("hparams"))
        return {"train_batch_size": hp.batch_size, "max_length": hp.max_length, "batching": "tokens",
                "optimizer": "adam", "learning_rate": hp.learning_rate_constant,
                "num_warmup_steps": hp.learning_rate_warmup_steps, "lr_decay": "rsqrt_decay",
                "lr_hidden_size": hp.hidden_size, "adam_beta1": hp.optimizer_adam_beta1,
                "adam_beta2": hp.optimizer_adam_beta2, "adam_epsilon": hp.optimizer_adam_epsilon,
                "weight_decay": hp.weight_decay, "clip_norm": hp.clip_grad_norm}

    def build(self, input_shape=None) -> None:
        shape = (None, None, self.hparams.hidden_size)
        for layer in {id(e): e for e in (self.input_embedding, self.target_embedding, self.softmax)}.values():
            layer.build(None)
        for layer in self.encoder_layers + self.decoder_layers + [self.encoder_norm, self.decoder_norm]:
            layer.build(shape)
        self.built = True

    # -------------------------------------------------------------------------------- forward
    def encode(self, inputs: tf.Tensor, training: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
        """-> (encoder output `[B, Ls, hidden]`, padding mask `[B, Ls]` bool)."""
        inputs = tf.cast(inputs, tf.int32)
        mask = tf.not_equal(inputs, 0)
        x = self.input_embedding.embed(inputs)
        x += timing_signal(tf.shape(inputs)[1], self.hparams.hidden_size)
        x = self.dropout(x, training=training)
        for layer in self.encoder_layers:
            x = layer(x, mask, training=training)
        return self.encoder_norm(x), mask

    def decode(self, targets: tf.Tensor, encoder_output: tf.Tensor, encoder_mask: tf.Tensor,
               training: bool = False) -> tf.Tensor:
        """Teacher-forced decoder: float32 logits `[B, Lt, vocab]`."""
        targets = tf.cast(targets, tf.int32)
        length = tf.shape(targets)[1]
        y = self.target_embedding.embed(targets)
        y = tf.pad(y, [[0, 0], [1, 0], [0, 0]])[:, :-1]  # shift right: position 0 reads zeros
        y += timing_signal(length, self.hparams.hidden_size)
        y = self.dropout(y, training=training)
        causal = tf.linalg.band_part(tf.ones([length, length], tf.bool), -1, 0)[None]  # [1, Lt, Lt]
        for layer in self.decoder_layers:
            y = layer(y, causal, encoder_output, encoder_mask, training=training)
        return self.softmax.logits(self.decoder_norm(y))

    def call(self, features: dict, training: bool = False) -> tf.Tensor:
        encoder_output, encoder_mask = self.encode(features["inputs"], training=training)
        return self.decode(features["targets"], encoder_output, encoder_mask, training=training)

    def step_output(self, features: dict, state: Any, training: bool) -> StepOutput:
        logits = self(features, training=training)
        targets = tf.cast(features["targets"], tf.int32)
        weights = tf.cast(tf.not_equal(targets, 0), tf.float32)
        count = tf.reduce_sum(weights)
        loss = smoothed_cross_entropy(logits, targets, self.hparams.label_smoothing)
        nll = smoothed_cross_entropy(logits, targets, 0.0)
        correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), targets), tf.float32)
        return StepOutput(
            losses={"cross_entropy": Term(tf.reduce_sum(loss * weights), count)},
            metrics={"accuracy": Term(tf.reduce_sum(correct * weights), count),
                     "neg_log_perplexity": Term(-tf.reduce_sum(nll * weights), count)},
            state=state if state is not None else {})

    # ------------------------------------------------------------------------------- decoding
    def decoding_cache(self, inputs: tf.Tensor, decode_length) -> dict:
        """Encode once; per decoder layer: empty self-attention buffers and the encoder keys/values."""
        encoder_output, encoder_mask = self.encode(inputs)
        n = tf.shape(inputs)[0]
        hp = self.hparams
        head = hp.hidden_size // hp.num_heads
        cache = {"encoder_mask": encoder_mask}
        for i, layer in enumerate(self.decoder_layers):
            ek, ev = layer.encdec_attention.project_key_value(encoder_output)
            empty = tf.zeros([n, hp.num_heads, decode_length, head], encoder_output.dtype)
            cache[f"layer_{i}"] = {"k": empty, "v": empty, "encoder_k": ek, "encoder_v": ev}
        return cache

    def decode_step(self, ids: tf.Tensor, i: tf.Tensor, cache: dict) -> tuple[tf.Tensor, dict]:
        """Logits `[N, vocab]` of position `i` given the token at position i-1 (`ids`, ignored at i=0)."""
        x = self.target_embedding.embed(tf.cast(ids, tf.int32)[:, None])
        x = tf.where(tf.equal(i, 0), tf.zeros_like(x), x)
        x += timing_signal(1, self.hparams.hidden_size, start=i)
        cache = dict(cache)
        for n, layer in enumerate(self.decoder_layers):
            x, cache[f"layer_{n}"] = layer.step(x, i, cache[f"layer_{n}"], cache["encoder_mask"])
        return self.softmax.logits(self.decoder_norm(x))[:, 0], cache

    def infer(self, inputs: tf.Tensor, decode_length, beam_size: int = 4, alpha: float = 0.6
              ) -> tuple[tf.Tensor, tf.Tensor]:
        """Best ids `[B, decode_length]` (0 after EOS) and their scores: greedy for beam_size 1."""
        inputs = tf.cast(inputs, tf.int32)
        batch = tf.shape(inputs)[0]
        cache = self.decoding_cache(inputs, decode_length)
        if beam_size <= 1:
            return search.greedy_search(self.decode_step, batch, decode_length, cache)
        ids, scores = search.beam_search(self.decode_step, batch, beam_size, decode_length,
                                         self.target_vocab_size, alpha, cache)
        return ids[:, 0], scores[:, 0]


# ====================================================================================== the trainers
def vocab_from_manifest(manifest: dict | None) -> tuple[int, int, bool]:
    """(input vocab size, target vocab size, shared) from a Text2Text problem's manifest settings."""
    settings = (manifest or {}).get("settings") or {}
    try:
        inputs, targets = int(settings["inputs_vocab_size"]), int(settings["targets_vocab_size"])
    except KeyError:
        raise ValueError("the transformer needs a Text2Text problem's data (inputs_vocab_size and "
                         "targets_vocab_size in its manifest)") from None
    shared = settings.get("inputs_vocab_fingerprint") == settings.get("targets_vocab_fingerprint")
    feature_max = (manifest or {}).get("feature_max") or {}
    for name, size in (("inputs", inputs), ("targets", targets)):
        if feature_max.get(name) is not None and feature_max[name] >= size:
            raise ValueError(f"the data's largest {name} id is {feature_max[name]} but its vocabulary has "
                             f"{size} entries")
    return inputs, targets, shared
