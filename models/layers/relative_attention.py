"""Transformer-XL relative positional attention and XLNet's two-stream attention, batch-major.

Semantics follow zihangdai/xlnet `modeling.py` (`rel_attn_core`, `rel_shift`,
`relative_positional_encoding`, `two_stream_rel_attn`, `positionwise_ffn`); the code and the tensor
layout are our own.

Decisions:
- Batch-major everywhere: hidden states `[B, L, d]`, heads `[B, L, n, d_head]`, scores
  `[B, n, Lq, Lk]`. The original is time-major (`[L, B, d]`, scores `[i, j, b, n]`).
- Attention masks here are *allow* masks (True/1 = may attend, `[B, 1, Lq, Lk]` or broadcastable),
  the convention of `models/layers/softmax.masked_softmax`; the original's "1 = cannot attend" is
  converted once, in `models/xlnet.py`. A fully blocked row gives zero attention (the original's
  `score - 1e30` would give a uniform row); XLNet's permutation masks never produce one for a
  predicted position, so this only changes rows nobody reads.
- Relative position embeddings are computed once per call as `[P, R, d]` with P = 1, or 2 under
  `bi_data` (forward half, backward half), and broadcast over the batch instead of tiled to it as
  the original does: the projection `r -> k_head_r` is then done P times instead of B times. The
  one consequence is that dropout on the position embedding shares its mask across the examples
  of a half.
- The segment term is computed as the original's one-hot einsum but with a `where` on a boolean
  "different segment" matrix (same numbers, no `[B, Lq, Lk, 2]` one-hot).
- Scores are formed in the compute dtype (bf16 under mixed precision) and the softmax runs in
  float32; LayerNorm statistics are float32 too. Epsilon 1e-12 as the original. On a training step's
  tensors the shift, the three terms' sum, the scale and the softmax are one XLA forward and one XLA
  backward (`attention_probs`, as models/layers/fused.py does for other chains): ~12 % less CPU for
  that chain at XLNet-base L512 with memories; the matmuls stay oneDNN's.
- Dropout is stateless: every call takes a `seed` (shape [2] int tensor) and each dropout site
  folds its own id into it. Re-running a layer (gradient checkpointing, `tf.recompute_grad`) then
  draws exactly the same masks, which stateful dropout cannot guarantee.
- Einsum kernels `[d_model, n_head, d_head]` without bias for q, k, v, r, o (the original's
  `head_projection`/`post_attention`), so released checkpoints load without reshaping.
"""
from __future__ import annotations

import math
from typing import Callable

import tensorflow as tf

from textrain.models.layers import fused
from textrain.models.layers.activations import get_activation
from textrain.models.layers.softmax import _masked_softmax, masked_softmax

LAYER_NORM_EPSILON = 1e-12


# ----------------------------------------------------------------------------------------------
# Stateless dropout


def fold_seed(seed: tf.Tensor | None, site: int) -> tf.Tensor | None:
    """A per-site seed derived from a call's seed (None stays None)."""
    if seed is None:
        return None
    return tf.random.experimental.stateless_fold_in(tf.cast(seed, tf.int64), site)


def dropout(x: tf.Tensor, rate: float, seed: tf.Tensor | None, training: bool) -> tf.Tensor:
    """Inverted dropout with a stateless seed; identity when not training or rate == 0."""
    if not training or rate <= 0.0:
        return x
    if seed is None:
        raise ValueError("dropout during training needs a seed (pass `seed=` to the layer call)")
    return fused.stateless_dropout(x, rate, seed)


# ----------------------------------------------------------------------------------------------
# Relative positions


def sinusoid_embedding(pos_seq: tf.Tensor, d_model: int) -> tf.Tensor:
    """`[R] -> [R, d_model]`: sin of the first d_model/2 frequencies, then cos (original order)."""
    freq_seq = tf.range(0, d_model, 2.0, dtype=tf.float32)
    inv_freq = 1.0 / (10000.0 ** (freq_seq / d_model))
    sinusoid = tf.einsum("i,d->id", pos_seq, inv_freq)
    return tf.concat([tf.sin(sinusoid), tf.cos(sinusoid)], axis=-1)


def relative_positions(qlen, klen, attn_type: str, clamp_len: int) -> tf.Tensor:
    """Distances `klen, klen-1, ..., end+1` (float32) with end = -qlen (bi) or -1 (uni), clamped."""
    if attn_type == "bi":
        end = -qlen
    elif attn_type == "uni":
        end = -1
    else:
        raise ValueError(f"attn_type must be 'bi' or 'uni', got {attn_type!r}")
    pos_seq = tf.cast(tf.range(klen, end, -1), tf.float32)
    if clamp_len > 0:
        pos_seq = tf.clip_by_value(pos_seq, -float(clamp_len), float(clamp_len))
    return pos_seq


def relative_positional_encoding(qlen, klen, d_model: int, clamp_len: int, attn_type: str,
                                 bi_data: bool, dtype: tf.DType = tf.float32) -> tf.Tensor:
    """`[P, R, d_model]` position embeddings; P = 2 under `bi_data` (row 1 = negated distances).

    The original clamps the forward and backward sequences separately; negation commutes with a
    symmetric clip, so clamping once then negating is the same.
    """
    fwd = relative_positions(qlen, klen, attn_type, clamp_len)
    seqs = [fwd, -fwd] if bi_data else [fwd]
    return tf.cast(tf.stack([sinusoid_embedding(s, d_model) for s in seqs]), dtype)


def rel_shift(x: tf.Tensor, klen) -> tf.Tensor:
    """`[B, n, Lq, R] -> [B, n, Lq, klen]` with out[..., i, j] = x[..., i, j + Lq - i].

    Column c of x scores distance `klen - c`, so the result scores distance `mlen + i - j`, the
    query's absolute position minus the key's (the original's reshape trick, batch-major).
    """
    shape = tf.shape(x)
    b, n, q, r = shape[0], shape[1], shape[2], shape[3]
    # Drop the first q elements of each flattened [q, r] row block (the original's "drop the first row" of
    # its [r, q] view), view the rest as [q, r-1] and keep klen columns. tf.slice, not Python slicing: the
    # gradient of a StridedSlice on these [B, n, L, mlen+2L] tensors took ~8x the CPU of Slice's (a Pad).
    x = tf.slice(tf.reshape(x, [b, n, r * q]), [0, 0, q], [-1, -1, q * (r - 1)])
    return tf.slice(tf.reshape(x, [b, n, q, r - 1]), [0, 0, 0, 0], [-1, -1, -1, klen])


def position_scores(q_r: tf.Tensor, k_r: tf.Tensor) -> tf.Tensor:
    """`q_r [B, Lq, n, h]`, `k_r [P, R, n, h]` -> `[B, n, Lq, R]`; batch half p uses k_r[p].

    One matmul batched over (batch, head) with k_r broadcast over the batch, so the `[B, n, Lq, R]`
    product (the layer's largest tensor) comes out in place: the einsum form ("bind,jnd->bnij")
    multiplied per head with batch x query as rows and then transposed that product, forward and
    backward (~2x the CPU of this form at XLNet-base L512; same products and sums)."""
    q = tf.transpose(q_r, [0, 2, 1, 3])                                # [B, n, Lq, h]
    k = tf.transpose(k_r, [0, 2, 3, 1])                                # [P, n, h, R]
    if k_r.shape[0] == 1:
        return tf.matmul(q, k)
    shape = tf.shape(q)
    halves = tf.reshape(q, tf.concat([[2, shape[0] // 2], shape[1:]], 0))
    scores = tf.matmul(halves, k[:, None])                             # [2, B/2, n, Lq, R]
    return tf.reshape(scores, tf.concat([[shape[0]], tf.shape(scores)[2:]], 0))


def _scores(ac, bd, ef, seg_diff, scale, klen) -> tf.Tensor:
    """float32 `[B, n, Lq, klen]`: (content + shifted position [+ segment] terms) x scale, summed in
    the compute dtype as the original."""
    score = ac + rel_shift(bd, klen)
    if ef is not None:
        score += tf.where(seg_diff[:, None], ef[..., 1:2], ef[..., 0:1])
    return tf.cast(score, tf.float32) * scale


def _probs_forward(ac, bd, ef, seg_diff, mask, scale):
    score = _scores(ac, bd, ef, seg_diff, scale, ac.shape[-1])
    if mask is None:
        return tf.cast(tf.nn.softmax(score, axis=-1), ac.dtype)
    return tf.cast(_masked_softmax(score, mask), ac.dtype)


def _probs_backward(probs, dy, seg_diff, scale, r: int, with_ef: bool):
    """Gradients of `_probs_forward` for (ac, bd, ef): d score = p (dy - sum(dy p)) x scale; bd's is
    the inverse of rel_shift (zeros where rel_shift dropped entries), ef's the sums over the keys of
    the same / different segment."""
    p32, dy32 = tf.cast(probs, tf.float32), tf.cast(dy, tf.float32)
    d = p32 * (dy32 - tf.reduce_sum(dy32 * p32, axis=-1, keepdims=True)) * scale
    b, n, q, k = d.shape
    d_bd = tf.pad(d, [[0, 0], [0, 0], [0, 0], [0, r - 1 - k]])
    d_bd = tf.reshape(tf.pad(tf.reshape(d_bd, [b, n, q * (r - 1)]), [[0, 0], [0, 0], [q, 0]]), [b, n, q, r])
    grads = [tf.cast(d, probs.dtype), tf.cast(d_bd, probs.dtype)]
    if with_ef:
        different = tf.reduce_sum(tf.where(seg_diff[:, None], d, 0.0), axis=-1, keepdims=True)
        same = tf.reduce_sum(d, axis=-1, keepdims=True) - different
        grads.append(tf.cast(tf.concat([same, different], axis=-1), probs.dtype))
    return grads


_probs_forward_xla = fused.xla(_probs_forward)
_probs_backward_xla = fused.xla(_probs_backward)


def attention_probs(ac: tf.Tensor, bd: tf.Tensor, ef: tf.Tensor | None, seg_diff: tf.Tensor | None,
                    mask: tf.Tensor | None, scale: float, klen) -> tf.Tensor:
    """Attention probabilities (compute dtype) from the content scores `ac [B, n, Lq, klen]`, the
    unshifted position scores `bd [B, n, Lq, R]` and the segment scores `ef [B, n, Lq, 2]` (or None)
    with `seg_diff` bool `[B, Lq, klen]`, under the allow-`mask` (or None).

    On a training step's tensors (static shapes, fusable) the shift, the sums, the scale and the
    softmax run as one XLA forward and one XLA backward (models/layers/fused.py): op by op they wrote
    and read the `[B, n, Lq, klen]` scores some ten times each way. Same formula; elsewhere op by op."""
    static = [t for t in (ac, bd, ef, seg_diff, mask) if t is not None]
    if not (fused.fusable(ac) and all(t.shape.is_fully_defined() for t in static)):
        score = _scores(ac, bd, ef, seg_diff, scale, klen)
        return tf.cast(masked_softmax(score, mask, axis=-1), ac.dtype)
    if mask is not None:
        mask = tf.cast(mask, tf.bool)
    r, with_ef = bd.shape[-1], ef is not None

    @tf.custom_gradient
    def run(*inputs):
        probs = _probs_forward_xla(*inputs[:2], inputs[2] if with_ef else None, seg_diff, mask, scale)
        return probs, lambda dy: _probs_backward_xla(probs, dy, seg_diff, scale, r, with_ef)

    return run(ac, bd, *([ef] if with_ef else []))


# ----------------------------------------------------------------------------------------------
# Layers


class LayerNorm(tf.keras.layers.Layer):
    """Post-LN with the original's variable names (`gamma`, `beta`) and epsilon 1e-12."""

    def __init__(self, d_model: int, epsilon: float = LAYER_NORM_EPSILON, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon
        self.gamma = self.add_weight(name="gamma", shape=(d_model,), initializer="ones")
        self.beta = self.add_weight(name="beta", shape=(d_model,), initializer="zeros")
        self.built = True

    def call(self, x: tf.Tensor) -> tf.Tensor:
        if fused.fusable(x):  # same formula as below, one XLA loop each way (models/layers/fused.py)
            return fused.fused_layer_norm(x, tf.convert_to_tensor(self.gamma), tf.convert_to_tensor(self.beta),
                                          self.epsilon)
        x32 = tf.cast(x, tf.float32)
        mean, var = tf.nn.moments(x32, axes=[-1], keepdims=True)
        y = (x32 - mean) * tf.math.rsqrt(var + self.epsilon)
        y = y * tf.cast(self.gamma, tf.float32) + tf.cast(self.beta, tf.float32)
        return tf.cast(y, x.dtype)


class RelativeAttention(tf.keras.layers.Layer):
    """One XLNet attention block (`layer_N/rel_attn`): relative attention, optionally two-stream.

    Called with the content stream `h` only it is Transformer-XL's `rel_multihead_attn`; with a
    query stream `g` as well it is `two_stream_rel_attn`: both streams share the k/v/r projections
    of [mems; h], and each gets its own mask (content: `mask_h`, query: `mask_g`).
    """

    def __init__(self, d_model: int, n_head: int, d_head: int, dropout: float = 0.0,
                 dropatt: float = 0.0, initializer=None, **kwargs):
        super().__init__(**kwargs)
        self.d_model, self.n_head, self.d_head = d_model, n_head, d_head
        self.dropout_rate, self.dropatt = dropout, dropatt
        self.scale = 1.0 / math.sqrt(d_head)
        init = initializer or tf.keras.initializers.RandomNormal(stddev=0.02)
        shape = (d_model, n_head, d_head)
        self.q_kernel = self.add_weight(name="q_kernel", shape=shape, initializer=init)
        self.k_kernel = self.add_weight(name="k_kernel", shape=shape, initializer=init)
        self.v_kernel = self.add_weight(name="v_kernel", shape=shape, initializer=init)
        self.r_kernel = self.add_weight(name="r_kernel", shape=shape, initializer=init)
        self.o_kernel = self.add_weight(name="o_kernel", shape=shape, initializer=init)
        self.layer_norm = LayerNorm(d_model, name="LayerNorm")
        self.built = True

    def kernels(self) -> dict[str, tf.Variable]:
        return {"q": self.q_kernel, "k": self.k_kernel, "v": self.v_kernel, "r": self.r_kernel,
                "o": self.o_kernel}

    def _project(self, x: tf.Tensor, kernel: tf.Variable) -> tf.Tensor:
        return tf.einsum("bld,dnh->blnh", x, tf.cast(kernel, x.dtype))

    def _attend(self, q, k, v, k_r, r_w_bias, r_r_bias, r_s_bias, seg_embed, seg_diff, mask,
                klen, training, seed) -> tf.Tensor:
        """The original's `rel_attn_core`: `[B, Lq, n, h]` queries -> `[B, Lq, n, h]` vectors."""
        dtype = q.dtype
        ac = tf.einsum("bind,bjnd->bnij", q + tf.cast(r_w_bias, dtype), k)
        bd = position_scores(q + tf.cast(r_r_bias, dtype), k_r)
        ef = None
        if seg_diff is not None:
            # ef[b, n, i, s]: query i against segment embedding s (0 = same segment, 1 = different).
            ef = tf.einsum("bind,snd->bnis", q + tf.cast(r_s_bias, dtype), tf.cast(seg_embed, dtype))
        prob = attention_probs(ac, bd, ef, seg_diff, mask, self.scale, klen)
        prob = dropout(prob, self.dropatt, seed, training)
        return tf.einsum("bnij,bjnd->bind", prob, v)

    def _post_attention(self, x, attn_vec, training, seed) -> tf.Tensor:
        out = tf.einsum("blnh,dnh->bld", attn_vec, tf.cast(self.o_kernel, attn_vec.dtype))
        out = dropout(out, self.dropout_rate, seed, training)
        return self.layer_norm(out + x)

    def call(self, h: tf.Tensor, g: tf.Tensor | None, r: tf.Tensor, mems: tf.Tensor | None,
             r_w_bias: tf.Tensor, r_r_bias: tf.Tensor, r_s_bias: tf.Tensor | None = None,
             seg_embed: tf.Tensor | None = None, seg_diff: tf.Tensor | None = None,
             mask_h: tf.Tensor | None = None, mask_g: tf.Tensor | None = None,
             target_mapping: tf.Tensor | None = None, training: bool = False,
             seed: tf.Tensor | None = None) -> tuple[tf.Tensor, tf.Tensor | None]:
        """Shapes: h `[B, L, d]`; g `[B, M, d]` (M = num_predict with target_mapping, else L);
        r `[P, R, d]`; mems `[B, mlen, d]`; seg_diff bool `[B, L, mlen+L]`; masks allow-masks
        broadcastable to `[B, n, L, mlen+L]`; target_mapping `[B, M, L]`.
        Returns (new h, new g or None)."""
        cat = h if mems is None else tf.concat([tf.cast(mems, h.dtype), h], axis=1)
        klen = tf.shape(cat)[1]
        k = self._project(cat, self.k_kernel)
        v = self._project(cat, self.v_kernel)
        k_r = tf.einsum("prd,dnh->prnh", tf.cast(r, h.dtype), tf.cast(self.r_kernel, h.dtype))
        common = dict(k=k, v=v, k_r=k_r, r_w_bias=r_w_bias, r_r_bias=r_r_bias, r_s_bias=r_s_bias,
                      seg_embed=seg_embed, seg_diff=seg_diff, klen=klen, training=training)

        q_h = self._project(h, self.q_kernel)
        attn_h = self._attend(q_h, mask=mask_h, seed=fold_seed(seed, 0), **common)
        out_h = self._post_attention(h, attn_h, training, fold_seed(seed, 1))
        if g is None:
            return out_h, None

        q_g = self._project(g, self.q_kernel)
        if target_mapping is not None:
            tm = tf.cast(target_mapping, q_g.dtype)
            q_g = tf.einsum("bmnd,bml->blnd", q_g, tm)  # predicted rows placed at their positions
        attn_g = self._attend(q_g, mask=mask_g, seed=fold_seed(seed, 2), **common)
        if target_mapping is not None:
            attn_g = tf.einsum("blnd,bml->bmnd", attn_g, tm)
        out_g = self._post_attention(g, attn_g, training, fold_seed(seed, 3))
        return out_h, out_g


class PositionwiseFFN(tf.keras.layers.Layer):
    """`layer_N/ff`: dense `layer_1` (activation) -> dropout -> dense `layer_2` -> dropout -> post-LN."""

    def __init__(self, d_model: int, d_inner: int, activation: str | Callable = "relu",
                 dropout: float = 0.0, initializer=None, **kwargs):
        super().__init__(**kwargs)
        if activation not in ("relu", "gelu", "gelu_exact") and not callable(activation):
            raise ValueError(f"ff_activation must be 'relu', 'gelu' (as the original) or 'gelu_exact', "
                             f"got {activation!r}")
        self.activation = get_activation(activation)
        self.dropout_rate = dropout
        init = initializer or tf.keras.initializers.RandomNormal(stddev=0.02)
        self.kernel_1 = self.add_weight(name="layer_1_kernel", shape=(d_model, d_inner), initializer=init)
        self.bias_1 = self.add_weight(name="layer_1_bias", shape=(d_inner,), initializer="zeros")
        self.kernel_2 = self.add_weight(name="layer_2_kernel", shape=(d_inner, d_model), initializer=init)
        self.bias_2 = self.add_weight(name="layer_2_bias", shape=(d_model,), initializer="zeros")
        self.layer_norm = LayerNorm(d_model, name="LayerNorm")
        self.built = True

    def call(self, x: tf.Tensor, training: bool = False, seed: tf.Tensor | None = None) -> tf.Tensor:
        dt = x.dtype
        y = tf.einsum("bld,de->ble", x, tf.cast(self.kernel_1, dt)) + tf.cast(self.bias_1, dt)
        y = dropout(self.activation(y), self.dropout_rate, fold_seed(seed, 0), training)
        y = tf.einsum("ble,ed->bld", y, tf.cast(self.kernel_2, dt)) + tf.cast(self.bias_2, dt)
        y = dropout(y, self.dropout_rate, fold_seed(seed, 1), training)
        return self.layer_norm(y + x)
