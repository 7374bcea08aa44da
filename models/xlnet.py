"""XLNet (Yang et al. 2019): Transformer-XL encoder with two-stream attention, and its pretrainer.

Semantics follow zihangdai/xlnet (`modeling.transformer_xl`, `modeling.lm_loss`,
`function_builder.two_stream_loss`, `xlnet.XLNetConfig`/`RunConfig`, `train_gpu.py` flags); the code
is our own and batch-major (`[batch, len, d]`; the original is time-major).

Decisions:
- `XLNetConfig` holds the eight keys of the original `xlnet_config.json` (what a checkpoint fixes)
  plus the original `RunConfig` settings (what a run may change) in one dataclass; `from_json`
  reads only the eight model keys, as the original does.
- Masks enter in the original convention (`perm_mask[b, i, j] = 1`: i may NOT attend to j;
  `input_mask` 1 = padding) because that is what the data carries; they are converted once here to
  the allow-masks of `masked_softmax`. The content stream may always attend to itself (the
  original's `non_tgt_mask`), the query stream never does unless the permutation allows it.
- Memories are the per-layer *inputs* (layer 0: the word embeddings) of the last `mem_len`
  positions of `concat(previous memory, input[:, :reuse_len])`, under `stop_gradient`, as the
  original `_cache_mem`. The state is `{"mems": float32 [n_layer, B, mem_len, d_model]}` (float32
  even under bf16 so the state's dtype does not depend on the policy); memory positions have
  segment 0 and are visible to every query, as in the original. `mem_len = 0` gives no state.
- `bi_data`: the first half of each replica's batch uses forward relative distances, the second
  half the negated ones (the original builds `bsz // 2` of each per core). The per-replica batch
  must be even.
- Dropout is stateless and seeded per call (see models/layers/relative_attention.py); the base seed
  comes from a Keras `SeedGenerator` owned by the encoder, with the replica id folded in so
  replicas draw different masks. This makes `recompute=True` (per-layer `tf.recompute_grad`)
  give the same gradients as no recompute, dropout included.
- The LM head is tied to the word embedding with a free bias `model/lm_loss/bias`; logits and the
  cross-entropy are float32 under any policy. Losses are sums and counts (models/base.Term).
- `d_embed` exists as a flag in the original but its model never reads it (embeddings are
  `d_model` wide); we ignore it too, with a warning when it disagrees with `d_model`.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any

import tensorflow as tf
from absl import logging

from textrain.framework.registry import register_model
from textrain.models import hf_format
from textrain.models.base import StepOutput, Term, TrainableModel, model_setting
from textrain.models.checkpoints import backing_variable
from textrain.models.layers.fused import sparse_softmax_cross_entropy
from textrain.models.layers.relative_attention import (
    PositionwiseFFN,
    RelativeAttention,
    dropout,
    fold_seed,
    relative_positional_encoding,
)
from textrain.models.task_heads import ClassifierModel, num_labels_from_manifest, task_type_from_manifest

MODEL_KEYS = ("n_layer", "d_model", "n_head", "d_head", "d_inner", "ff_activation", "untie_r", "n_token")
# Run settings a fine-tuning model leaves at "no memory" (one segment per example).
PRETRAINING_ONLY = ("mem_len", "reuse_len", "bi_data")


@dataclasses.dataclass
class XLNetConfig:
    # xlnet_config.json (fixed by a checkpoint)
    n_layer: int = 12
    d_model: int = 768
    n_head: int = 12
    d_head: int = 64
    d_inner: int = 3072
    ff_activation: str = "gelu"
    untie_r: bool = True
    n_token: int = 32000
    # run settings (original RunConfig / train_gpu.py flags)
    mem_len: int = 0
    reuse_len: int = 0
    bi_data: bool = False
    clamp_len: int = -1
    same_length: bool = False
    attn_type: str = "bi"
    dropout: float = 0.1
    dropatt: float = 0.1
    init: str = "normal"      # "normal" (init_std) or "uniform" (init_range), as the original --init
    init_std: float = 0.02
    init_range: float = 0.1
    recompute: bool = False    # per-layer gradient checkpointing

    def __post_init__(self):
        self.validate()

    def validate(self, source: str = "XLNetConfig") -> None:
        def bad(msg: str):
            raise ValueError(f"{source}: {msg}")
        for key in ("n_layer", "d_model", "n_head", "d_head", "d_inner", "n_token"):
            if int(getattr(self, key)) <= 0:
                bad(f"{key} must be positive, got {getattr(self, key)!r}")
        if self.ff_activation not in ("relu", "gelu", "gelu_exact"):  # gelu_exact: Hugging Face's XLNets
            bad(f"ff_activation must be 'relu', 'gelu' or 'gelu_exact', got {self.ff_activation!r}")
        if self.attn_type not in ("bi", "uni"):
            bad(f"attn_type must be 'bi' or 'uni', got {self.attn_type!r}")
        if self.init not in ("normal", "uniform"):
            bad(f"init must be 'normal' or 'uniform', got {self.init!r}")
        if self.mem_len < 0 or self.reuse_len < 0:
            bad(f"mem_len and reuse_len must be >= 0, got {self.mem_len}, {self.reuse_len}")
        for key in ("dropout", "dropatt"):
            if not 0.0 <= getattr(self, key) < 1.0:
                bad(f"{key} must be in [0, 1), got {getattr(self, key)!r}")

    @property
    def initializer_range(self) -> float:
        """The scale of the weight initializer (std for normal, range for uniform)."""
        return self.init_std if self.init == "normal" else self.init_range

    def initializer(self) -> tf.keras.initializers.Initializer:
        if self.init == "normal":
            return tf.keras.initializers.RandomNormal(stddev=self.init_std)
        return tf.keras.initializers.RandomUniform(-self.init_range, self.init_range)

    @classmethod
    def preset(cls, name: str, **overrides) -> "XLNetConfig":
        if name not in PRESETS:
            raise ValueError(f"unknown XLNet preset {name!r}; known: {', '.join(sorted(PRESETS))}")
        return cls(**{**PRESETS[name], **overrides})

    @classmethod
    def from_json(cls, path: str, **run_settings) -> "XLNetConfig":
        """Read an original `xlnet_config.json` (its eight model keys); run settings as kwargs."""
        with tf.io.gfile.GFile(path) as f:
            try:
                data = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{e.lineno}: not valid JSON: {e.msg}") from e
        missing = [k for k in MODEL_KEYS if k not in data]
        if missing:
            raise ValueError(f"{path}: XLNet config lacks {', '.join(missing)} "
                             f"(expected keys: {', '.join(MODEL_KEYS)})")
        try:
            return cls(**{k: data[k] for k in MODEL_KEYS}, **run_settings)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{path}: {e}") from e

    def to_json(self, path: str) -> None:
        """Write the eight model keys, as the original `XLNetConfig.to_json`."""
        with tf.io.gfile.GFile(path, "w") as f:
            json.dump({k: getattr(self, k) for k in MODEL_KEYS}, f, indent=4, sort_keys=True)


PRESETS: dict[str, dict[str, Any]] = {
    # The released cased checkpoints' xlnet_config.json.
    "base": dict(n_layer=12, d_model=768, n_head=12, d_head=64, d_inner=3072, ff_activation="gelu",
                 untie_r=True, n_token=32000),
    "large": dict(n_layer=24, d_model=1024, n_head=16, d_head=64, d_inner=4096, ff_activation="gelu",
                  untie_r=True, n_token=32000),
    "tiny": dict(n_layer=2, d_model=32, n_head=4, d_head=8, d_inner=64, ff_activation="gelu",
                 untie_r=True, n_token=100, dropout=0.0, dropatt=0.0),
}

CONFIG_FIELDS = frozenset(f.name for f in dataclasses.fields(XLNetConfig))


# ----------------------------------------------------------------------------------------------
# Masks and memories


def causal_blocked(qlen, mlen: int, same_length: bool) -> tf.Tensor:
    """bool `[qlen, mlen+qlen]`, True = blocked: query i (absolute mlen+i) never sees the future;
    with `same_length` it also loses the keys before i so every query sees mlen+1 keys."""
    i = tf.range(qlen)[:, None]
    j = tf.range(mlen + qlen)[None, :]
    blocked = j > i + mlen
    if same_length:
        blocked = tf.logical_or(blocked, j < i)
    return blocked


def attention_masks(perm_mask, input_mask, qlen, mlen: int, attn_type: str,
                    same_length: bool) -> tuple[tf.Tensor | None, tf.Tensor | None]:
    """Allow-masks `(content, query)`, bool `[B|1, 1, qlen, mlen+qlen]`, or (None, None) if all see all.

    `perm_mask [B, L, L]` / `input_mask [B, L]` use the original's 1 = blocked convention.
    """
    blocked = causal_blocked(qlen, mlen, same_length)[None] if attn_type == "uni" else None
    data = None
    if input_mask is not None:
        data = tf.cast(input_mask, tf.float32)[:, None, :] > 0
    if perm_mask is not None:
        pm = tf.cast(perm_mask, tf.float32) > 0
        data = pm if data is None else tf.logical_or(data, pm)
    if data is not None:
        shape = tf.shape(data)
        data = tf.concat([tf.zeros([shape[0], shape[1], mlen], tf.bool), data], axis=-1)  # mems: visible
        blocked = data if blocked is None else tf.logical_or(blocked, data)
    if blocked is None:
        return None, None
    own = tf.concat([tf.zeros([qlen, mlen], tf.bool), tf.eye(qlen, dtype=tf.bool)], axis=-1)
    allow_g = tf.logical_not(blocked)
    allow_h = tf.logical_or(allow_g, own[None])
    return allow_h[:, None], allow_g[:, None]


def segment_difference(seg_id: tf.Tensor, mlen: int) -> tf.Tensor:
    """bool `[B, L, mlen+L]`: True where query and key are in different segments (mems = segment 0)."""
    seg_id = tf.cast(seg_id, tf.int32)
    cat = tf.concat([tf.zeros([tf.shape(seg_id)[0], mlen], tf.int32), seg_id], axis=1)
    return tf.not_equal(seg_id[:, :, None], cat[:, None, :])


def cache_mem(curr: tf.Tensor, prev: tf.Tensor | None, mem_len: int, reuse_len: int) -> tf.Tensor | None:
    """The original `_cache_mem`, batch-major, float32, without gradient."""
    if mem_len == 0:
        return None
    if reuse_len > 0:
        curr = curr[:, :reuse_len]
    curr = tf.cast(curr, tf.float32)
    new = curr if prev is None else tf.concat([tf.cast(prev, tf.float32), curr], axis=1)
    return tf.stop_gradient(new[:, -mem_len:])


def _replica_id() -> int | tf.Tensor:
    ctx = tf.distribute.get_replica_context()
    return 0 if ctx is None else ctx.replica_id_in_sync_group


# ----------------------------------------------------------------------------------------------
# Encoder


class XLNetEncoder(tf.keras.layers.Layer):
    """`model/transformer`: embeddings, relative positions, n_layer two-stream blocks, memories."""

    def __init__(self, config: XLNetConfig, **kwargs):
        super().__init__(**kwargs)
        self.config = c = config
        init = c.initializer()
        bias_shape = (c.n_layer, c.n_head, c.d_head) if c.untie_r else (c.n_head, c.d_head)
        self.lookup_table = self.add_weight(name="word_embedding", shape=(c.n_token, c.d_model),
                                            initializer=init)
        # The original gives mask_emb no initializer, i.e. TF1's default glorot_uniform.
        self.mask_emb = self.add_weight(name="mask_emb", shape=(1, 1, c.d_model),
                                        initializer="glorot_uniform")
        self.r_w_bias = self.add_weight(name="r_w_bias", shape=bias_shape, initializer=init)
        self.r_r_bias = self.add_weight(name="r_r_bias", shape=bias_shape, initializer=init)
        self.r_s_bias = self.add_weight(name="r_s_bias", shape=bias_shape, initializer=init)
        self.seg_embed = self.add_weight(name="seg_embed", shape=(c.n_layer, 2, c.n_head, c.d_head),
                                         initializer=init)
        self.attn_layers = [RelativeAttention(c.d_model, c.n_head, c.d_head, c.dropout, c.dropatt,
                                              initializer=init, name=f"layer_{i}_rel_attn")
                            for i in range(c.n_layer)]
        self.ffn_layers = [PositionwiseFFN(c.d_model, c.d_inner, c.ff_activation, c.dropout,
                                           initializer=init, name=f"layer_{i}_ff")
                           for i in range(c.n_layer)]
        # tf.train.Checkpoint does not see layers inside a Keras list attribute: name each one
        # (see models/layers/transformer.py).
        for layer in self.attn_layers + self.ffn_layers:
            setattr(self, layer.name, layer)
        self.seed_generator = tf.keras.random.SeedGenerator(seed=None, name="dropout_seed")
        self.built = True

    def _layer_bias(self, var: tf.Variable, i: int) -> tf.Tensor:
        return var[i] if self.config.untie_r else tf.convert_to_tensor(var)

    def _base_seed(self, training: bool, seed: tf.Tensor | None) -> tf.Tensor | None:
        c = self.config
        if not training or (c.dropout <= 0 and c.dropatt <= 0):
            return None
        if seed is None:
            seed = self.seed_generator.next()
        return tf.random.experimental.stateless_fold_in(tf.cast(seed, tf.int64), _replica_id())

    def call(self, input_ids: tf.Tensor, seg_ids: tf.Tensor | None = None,
             input_mask: tf.Tensor | None = None, mems: tf.Tensor | list | None = None,
             perm_mask: tf.Tensor | None = None, target_mapping: tf.Tensor | None = None,
             inp_q: tf.Tensor | None = None, training: bool = False, seed: tf.Tensor | None = None,
             return_layer_inputs: bool = False) -> dict[str, Any]:
        """Returns {"output": [B, M, d] query stream if `inp_q` is given else [B, L, d] content
        stream, "new_mems": float32 [n_layer, B, mem_len, d] or None, ("layer_inputs": list)}.

        `mems`: [n_layer, B, mlen, d] tensor or list of n_layer [B, mlen, d]; `input_ids` int [B, L].
        """
        c = self.config
        dtype = self.compute_dtype
        input_ids = tf.convert_to_tensor(input_ids)
        if input_ids.shape.rank != 2:
            raise ValueError(f"input_ids must be [batch, len], got shape {input_ids.shape}")
        batch, qlen = tf.shape(input_ids)[0], tf.shape(input_ids)[1]
        if mems is not None:
            mems = [m for m in tf.unstack(mems)] if not isinstance(mems, (list, tuple)) else list(mems)
            if len(mems) != c.n_layer:
                raise ValueError(f"mems has {len(mems)} layers, the model has n_layer={c.n_layer}")
            mlen = int(mems[0].shape[1])
        else:
            mems = [None] * c.n_layer
            mlen = 0
        klen = mlen + qlen
        if c.bi_data and input_ids.shape[0] is not None and input_ids.shape[0] % 2:
            raise ValueError(f"bi_data needs an even per-replica batch (forward and backward halves), "
                             f"got {input_ids.shape[0]}")
        seed = self._base_seed(training, seed)
        site = iter(range(1000, 2000))  # seeds of the dropouts outside the blocks

        mask_h, mask_g = attention_masks(perm_mask, input_mask, qlen, mlen, c.attn_type, c.same_length)
        seg_diff = segment_difference(seg_ids, mlen) if seg_ids is not None else None

        word_emb = tf.cast(tf.gather(self.lookup_table, input_ids), dtype)
        h = dropout(word_emb, c.dropout, fold_seed(seed, next(site)), training)
        g = None
        if inp_q is not None:
            mask_emb = tf.cast(self.mask_emb, dtype)
            if target_mapping is not None:
                g = tf.tile(mask_emb, [batch, tf.shape(target_mapping)[1], 1])
            else:
                q = tf.cast(inp_q, dtype)[:, :, None]
                g = q * mask_emb + (1 - q) * word_emb
            g = dropout(g, c.dropout, fold_seed(seed, next(site)), training)

        pos_emb = relative_positional_encoding(qlen, klen, c.d_model, c.clamp_len, c.attn_type,
                                               c.bi_data, dtype)
        pos_emb = dropout(pos_emb, c.dropout, fold_seed(seed, next(site)), training)

        new_mems, layer_inputs = [], []
        for i in range(c.n_layer):
            layer_inputs.append(h)
            new_mems.append(cache_mem(h, mems[i], c.mem_len, c.reuse_len))
            run = self._layer_fn(i, pos_emb, mems[i], seg_diff, mask_h, mask_g, target_mapping,
                                 training, fold_seed(seed, i))
            if c.recompute and training:
                run = tf.recompute_grad(run)
            if g is None:
                h = run(h)
            else:
                h, g = run(h, g)

        output = dropout(h if g is None else g, c.dropout, fold_seed(seed, next(site)), training)
        result = {"output": output,
                  "new_mems": tf.stack(new_mems) if c.mem_len > 0 else None}
        if return_layer_inputs:
            result["layer_inputs"] = layer_inputs
        return result

    def _layer_fn(self, i, pos_emb, mem, seg_diff, mask_h, mask_g, target_mapping, training, seed):
        """Block i as a function of the streams only, so `tf.recompute_grad` can re-run it; the
        variables (biases included) are read inside, where the recompute tape sees them."""

        def run(h, g=None):
            seg = seg_diff is not None
            h, g = self.attn_layers[i](
                h, g, pos_emb, mem,
                r_w_bias=self._layer_bias(self.r_w_bias, i),
                r_r_bias=self._layer_bias(self.r_r_bias, i),
                r_s_bias=self._layer_bias(self.r_s_bias, i) if seg else None,
                seg_embed=self.seg_embed[i] if seg else None,
                seg_diff=seg_diff, mask_h=mask_h, mask_g=mask_g, target_mapping=target_mapping,
                training=training, seed=fold_seed(seed, 0))
            h = self.ffn_layers[i](h, training=training, seed=fold_seed(seed, 1))
            if g is None:
                return h
            g = self.ffn_layers[i](g, training=training, seed=fold_seed(seed, 2))
            return h, g

        return run

    def tf1_variable_map(self, prefix: str = "model/transformer") -> dict[str, tf.Variable]:
        out = {f"{prefix}/word_embedding/lookup_table": self.lookup_table,
               f"{prefix}/mask_emb/mask_emb": self.mask_emb,
               f"{prefix}/r_w_bias": self.r_w_bias,
               f"{prefix}/r_r_bias": self.r_r_bias,
               f"{prefix}/r_s_bias": self.r_s_bias,
               f"{prefix}/seg_embed": self.seg_embed}
        for i, (attn, ff) in enumerate(zip(self.attn_layers, self.ffn_layers, strict=True)):
            layer = f"{prefix}/layer_{i}"
            for name, var in attn.kernels().items():
                out[f"{layer}/rel_attn/{name}/kernel"] = var
            out[f"{layer}/rel_attn/LayerNorm/gamma"] = attn.layer_norm.gamma
            out[f"{layer}/rel_attn/LayerNorm/beta"] = attn.layer_norm.beta
            out[f"{layer}/ff/layer_1/kernel"] = ff.kernel_1
            out[f"{layer}/ff/layer_1/bias"] = ff.bias_1
            out[f"{layer}/ff/layer_2/kernel"] = ff.kernel_2
            out[f"{layer}/ff/layer_2/bias"] = ff.bias_2
            out[f"{layer}/ff/LayerNorm/gamma"] = ff.layer_norm.gamma
            out[f"{layer}/ff/LayerNorm/beta"] = ff.layer_norm.beta
        return {name: backing_variable(var) for name, var in out.items()}


# ----------------------------------------------------------------------------------------------
# Pretrainer

FEATURES = ("input_k", "input_q", "seg_id", "perm_mask", "target", "target_mask")


@dataclasses.dataclass
class XLNetSettings:
    """XLNet's model flags (zihangdai/xlnet train_gpu.py); None: the preset / config file / data manifest."""

    seq_len: int | None = model_setting('XLNet sequence length (original 512); checked against the manifest.')
    reuse_len: int | None = model_setting('Tokens reused as memory in each example (original 256).')
    mem_len: int | None = model_setting('Memory length carried across steps (original 0 in data, 384 in training).')
    perm_size: int | None = model_setting('Permutation window (original = reuse_len).')
    bi_data: bool | None = model_setting('Bidirectional data pipeline (original True); checked against the manifest.')
    mask_alpha: int | None = model_setting('Tokens per group of masked spans (original 6).')
    mask_beta: int | None = model_setting('Masked tokens per group (original 1).')
    num_predict: int | None = model_setting(
        'Predicted tokens per example (original 85); checked against the manifest.')
    n_layer: int | None = model_setting('Layers (original 24).')
    d_model: int | None = model_setting('Hidden size (original 1024).')
    d_embed: int | None = model_setting('Embedding size (the original ignores it: embeddings are d_model wide).')
    n_head: int | None = model_setting('Attention heads (original 16).')
    d_head: int | None = model_setting('Size of each head (original 64).')
    d_inner: int | None = model_setting('Feed-forward size (original 4096).')
    untie_r: bool | None = model_setting('Untie the relative-attention biases across layers (original True).')
    ff_activation: str | None = model_setting('relu or gelu (original relu).')
    clamp_len: int | None = model_setting('Clamp relative distances (-1: no clamping).')
    same_length: bool | None = model_setting('Same attention length for every token.')
    uncased: bool | None = model_setting('Lower-case input (SentencePiece side).')
    dropout: float | None = model_setting('Dropout (original 0.1).')
    dropatt: float | None = model_setting('Attention dropout (original 0.1).')
    model_config_path: str | None = model_setting('xlnet_config.json of an original release.')
    attn_type: str | None = model_setting('bi or uni attention (original bi).')
    init: str | None = model_setting('normal or uniform initialisation (original normal).')
    init_std: float | None = model_setting('Stddev of the normal initialiser (original 0.02).')
    init_range: float | None = model_setting('Range of the uniform initialiser (original 0.1).')
    n_token: int | None = model_setting("Vocabulary size (default: the data manifest's).")
    recompute: bool | None = model_setting('Recompute activations in the backward pass (memory for time).')


@register_model(name="xlnet")
class XLNetPretrainer(TrainableModel):
    """Permutation-LM pretraining: two-stream encoder + LM head tied to the word embedding.

    Features (batch-major, as the original records after batching): `input_k [B,L]` int,
    `input_q [B,L]` (1 = predicted), `seg_id [B,L]`, `perm_mask [B,L,L]` (1 = cannot attend),
    `target_mapping [B,P,L]` (optional: without it every position is a query), `target [B,P]`,
    `target_mask [B,P]`.
    """

    Settings = XLNetSettings  # its fields are trainer flags (trainers/trainer_flags.py)

    tokenizer = "sentencepiece"

    def __init__(self, config: XLNetConfig, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.transformer = XLNetEncoder(config, name="transformer")
        self.lm_bias = self.add_weight(name="lm_loss_bias", shape=(config.n_token,), initializer="zeros")
        self.built = True  # every variable exists now: optimizers and checkpoints need no dummy call

    @classmethod
    def from_config(cls, config: dict, *, num_labels: int | None = None, n_top: tuple[int, int] = (5, 5),
                    head: str = "original"):
        return cls(XLNetConfig(**config))

    @classmethod
    def from_settings(cls, *, config_file: str | None = None, seq_len: int | None = None,
                      num_predict: int | None = None, d_embed: int | None = None, manifest: dict | None = None,
                      **settings: Any) -> "XLNetPretrainer":
        """The one constructor (every trainer builds the model through it), in train_gpu.py's names:
        XLNetConfig fields given as settings (`pretraining_config`), checked against the data manifest
        with `seq_len` / `num_predict`. Settings that are not XLNetConfig fields are other families'."""
        config = pretraining_config(config_file, settings, manifest, d_embed)
        check_against_manifest(config, manifest, seq_len, num_predict)
        return cls(config, name="model")

    def initial_state(self, batch_size: int) -> dict[str, tf.Tensor]:
        c = self.config
        if c.mem_len == 0:
            return {}
        return {"mems": tf.zeros([c.n_layer, batch_size, c.mem_len, c.d_model], tf.float32)}

    def call(self, features: dict[str, tf.Tensor], mems: tf.Tensor | None = None,
             training: bool = False, seed: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
        """{"logits": float32 [B, P, n_token], "new_mems": ...} for the predicted positions."""
        missing = [k for k in FEATURES if k not in features]
        if missing:
            raise KeyError(f"XLNet pretraining features lack {', '.join(missing)}; "
                           f"got {', '.join(sorted(features))}")
        enc = self.transformer(
            features["input_k"], seg_ids=features["seg_id"], mems=mems,
            perm_mask=features["perm_mask"], target_mapping=features.get("target_mapping"),
            inp_q=features["input_q"], training=training, seed=seed)
        output = enc["output"]
        table = tf.cast(self.transformer.lookup_table, output.dtype)
        logits = tf.cast(tf.einsum("bmd,nd->bmn", output, table), tf.float32)
        logits += tf.cast(self.lm_bias, tf.float32)
        return {"logits": logits, "new_mems": enc["new_mems"]}

    def step_output(self, features: dict[str, tf.Tensor], state: Any, training: bool) -> StepOutput:
        mems = state.get("mems") if state else None
        if self.config.mem_len > 0 and mems is None:
            raise ValueError("mem_len > 0 but the state has no 'mems'; start from initial_state(batch)")
        out = self(features, mems=mems, training=training)
        logits = out["logits"]
        target = tf.cast(features["target"], tf.int32)
        weight = tf.cast(features["target_mask"], tf.float32)
        ce = sparse_softmax_cross_entropy(target, logits)
        correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), target), tf.float32)
        count = tf.reduce_sum(weight)
        new_state = {"mems": out["new_mems"]} if self.config.mem_len > 0 else {}
        return StepOutput(losses={"lm": Term(tf.reduce_sum(ce * weight), count)},
                          metrics={"lm_accuracy": Term(tf.reduce_sum(correct * weight), count)},
                          state=new_state)

    def tf1_variable_map(self) -> dict[str, tf.Variable]:
        out = self.transformer.tf1_variable_map("model/transformer")
        out["model/lm_loss/bias"] = backing_variable(self.lm_bias)
        return out


# ----------------------------------------------------------------------------------------------
# Fine-tuning


@register_model(name="xlnet_classifier")
class XLNetClassifier(ClassifierModel):
    """XLNet run_classifier.py: the content stream with the padding mask, `summary_type="last"`
    (the last position: the <cls> token, since the records are LEFT-padded), the projection
    `model/sequnece_summary/summary` (tanh dense, d_model; the original's spelling), dropout, then
    `model/classification_{task}/logit` (or `model/regression_{task}/logit`, one unit).

    Features (the original layout): input_ids `[B, L]`, input_mask float `[B, L]` with 1 = PADDING,
    segment_ids `[B, L]` (A 0, B 1, <cls> 2, padding 4: only "same or different" matters),
    label_ids, is_real_example. Layer-wise LR decay follows XLNet's `lr_layer_decay_rate`: only the
    Transformer layers are scaled, layer l by decay ** (n_layer - 1 - l).
    """

    encoder_attribute = "transformer"
    init_allow_unexpected = (r"^model/lm_loss/",)
    lr_decay_style = "xlnet"
    tokenizer = "sentencepiece"

    def __init__(self, config: XLNetConfig, num_labels: int = 2, task_type: str = "classification",
                 task_name: str = "task", name: str = "model", **kwargs):
        super().__init__(num_labels, task_type, name=name, **kwargs)
        if config.mem_len or config.attn_type != "bi":
            raise ValueError("the XLNet classifier runs without memory (mem_len 0) and with bi attention")
        self.config = config
        self.task_name = (task_name or "task").lower()
        self.transformer = XLNetEncoder(config, name="transformer")
        self.summary = tf.keras.layers.Dense(config.d_model, activation="tanh",
                                             kernel_initializer=config.initializer(), name="summary")
        self.summary_dropout = tf.keras.layers.Dropout(config.dropout)
        self.logit = tf.keras.layers.Dense(num_labels, kernel_initializer=config.initializer(), name="logit")
        self.summary.build((None, config.d_model))
        self.logit.build((None, config.d_model))
        self.built = True

    @property
    def num_layers(self) -> int:
        return self.config.n_layer

    def logits(self, features: dict[str, tf.Tensor], training: bool = False) -> tf.Tensor:
        enc = self.transformer(features["input_ids"], seg_ids=features.get("segment_ids"),
                               input_mask=features.get("input_mask"), training=training)
        summary = self.summary(enc["output"][:, -1])
        return tf.cast(self.logit(self.summary_dropout(summary, training=training)), tf.float32)

    def serving_features(self, input_ids, input_mask, segment_ids):
        """The serving signature takes the same three id tensors; input_mask is float, 1 = padding."""
        return {"input_ids": input_ids, "input_mask": tf.cast(input_mask, tf.float32), "segment_ids": segment_ids}

    def encoder_tf1_variable_map(self) -> dict[str, tf.Variable]:
        return self.transformer.tf1_variable_map("model/transformer")

    def head_tf1_variable_map(self) -> dict[str, tf.Variable]:
        kind = "regression" if self.task_type == "regression" else "classification"
        names = {"model/sequnece_summary/summary/kernel": self.summary.kernel,
                 "model/sequnece_summary/summary/bias": self.summary.bias,
                 f"model/{kind}_{self.task_name}/logit/kernel": self.logit.kernel,
                 f"model/{kind}_{self.task_name}/logit/bias": self.logit.bias}
        return {n: backing_variable(v) for n, v in names.items()}

    @classmethod
    def from_config(cls, config: dict, *, num_labels: int | None = None, n_top: tuple[int, int] = (5, 5),
                    head: str = "original"):
        return cls(XLNetConfig(**config), num_labels=int(num_labels or 2), task_name=hf_format.HF_TASK_NAME)

    @classmethod
    def from_settings(cls, *, num_labels: int | None = None, task_type: str | None = None, size: str | None = None,
                      config_file: str | None = None, overrides: dict | None = None,
                      manifest: dict | None = None, task_name: str | None = None, **settings: Any) -> "XLNetClassifier":
        """The one constructor: a preset (base, large, tiny) or an xlnet_config.json, then XLNetConfig
        fields given as settings (the trainers' flags) and `overrides` (model keys and run settings such
        as dropout); label count, task type and head scope name default to the data manifest's. No
        memory: fine-tuning reads one segment per example. Other settings are not XLNet's."""
        task_type = task_type or task_type_from_manifest(manifest)
        num_labels = num_labels_from_manifest(manifest, task_type) if num_labels is None else num_labels
        if task_name is None:
            task_name = str((manifest or {}).get("problem", ""))
        fields = {k: v for k, v in settings.items() if k in CONFIG_FIELDS and k not in PRETRAINING_ONLY}
        config = config_from_settings(size, config_file, {**fields, **(overrides or {})}, manifest)
        return cls(config, num_labels=num_labels, task_type=task_type, task_name=task_name)


def config_from_settings(size: str | None, config_file: str | None, overrides: dict | None,
                         manifest: dict | None) -> XLNetConfig:
    """A fine-tuning model's config (every XLNet fine-tuning head): a preset (default base) with the
    data's vocab size, or an xlnet_config.json; `overrides` may hold model keys and run settings."""
    overrides = dict(overrides or {})
    run = {k: overrides.pop(k) for k in list(overrides) if k not in MODEL_KEYS}
    if config_file and hf_format.is_hf_directory(config_file):  # a Hugging Face model's config.json
        values = hf_format.xlnet_config_dict(hf_format.read_config(config_file), config_file)
        config = XLNetConfig(**{k: values[k] for k in MODEL_KEYS}, **run)
        return dataclasses.replace(config, **overrides) if overrides else config
    if config_file:
        config = XLNetConfig.from_json(config_file, **run)
        return dataclasses.replace(config, **overrides) if overrides else config
    settings = (manifest or {}).get("settings") or {}
    values = dict(PRESETS[size or "base"])
    vocab = settings.get("vocab_size") or settings.get("n_token")
    if vocab:
        values["n_token"] = int(vocab)
    return XLNetConfig(**{**values, **overrides, **run})


def pretraining_config(config_file: str | None, fields: dict[str, Any], manifest: dict | None = None,
                       d_embed: int | None = None) -> XLNetConfig:
    """Model keys from `config_file` (xlnet_config.json) if given, else from `fields`, a missing one
    taking the released base config's value (gelu, untie_r; the original train_gpu.py defaults
    relu/tied); run settings from `fields`, falling back to the data manifest's settings (reuse_len,
    bi_data, vocab_size) and then the original defaults."""
    settings = (manifest or {}).get("settings", {})
    run = {k: v for k, v in fields.items() if k in CONFIG_FIELDS and k not in MODEL_KEYS}
    run["reuse_len"] = int(run.get("reuse_len") or settings.get("reuse_len", 0))
    run.setdefault("bi_data", bool(settings.get("bi_data", False)))
    if config_file:
        return XLNetConfig.from_json(config_file, **run)
    base = PRESETS["base"]
    vocab = fields.get("n_token", settings.get("vocab_size", settings.get("n_token", base["n_token"])))
    model = {k: fields.get(k, base[k]) for k in MODEL_KEYS if k != "n_token"}
    config = XLNetConfig(**model, n_token=int(vocab), **run)
    if d_embed is not None and int(d_embed) != config.d_model:
        logging.warning("--d_embed=%s is ignored (as in the original XLNet): embeddings are d_model=%d wide",
                        d_embed, config.d_model)
    return config


def check_against_manifest(config: XLNetConfig, manifest: dict | None, seq_len: int | None = None,
                           num_predict: int | None = None) -> None:
    """Refuse settings that disagree with how the data was made (seq_len, reuse_len, bi_data,
    num_predict), and a vocabulary larger than the model's."""
    if not manifest:
        return
    from textrain.framework.manifests import check_settings

    expected = {"reuse_len": config.reuse_len or None, "bi_data": config.bi_data,
                "seq_len": int(seq_len) if seq_len else None, "num_predict": int(num_predict) if num_predict else None}
    check_settings(manifest, expected, source="flags")
    settings = manifest.get("settings", {})
    data_seq_len = settings.get("seq_len", expected.get("seq_len"))
    if data_seq_len and config.reuse_len > int(data_seq_len):
        raise ValueError(f"--reuse_len={config.reuse_len} exceeds the data's seq_len={data_seq_len}")
    vocab = settings.get("vocab_size")
    if vocab and int(vocab) > config.n_token:
        raise ValueError(f"the data's vocab_size {vocab} exceeds the model's n_token {config.n_token}")
