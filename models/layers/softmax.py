"""The one masked softmax every attention uses.

Masked positions get exactly zero weight (not exp(-1e9)), a row with every position masked gives all
zeros instead of NaN or a uniform distribution, and the fill value is derived from the logits' dtype
so fp16/bf16 never overflow.

A training step's softmax over the last axis (a fusable tensor, models/layers/fused.py) runs as one XLA
forward (select, softmax, select) and one XLA backward `p * (dy - sum(dy * p))`, which is zero on masked
positions as the op-by-op gradient is; same values. Attention's training step fuses its dropout into the same
two compiled functions (`masked_softmax_dropout`), reading and writing the compute dtype and computing in
float32; in bf16 the dropout scales the rounded probabilities, as the op-by-op graph does.
"""
from __future__ import annotations

import tensorflow as tf

from textrain.models.layers import fused


def large_negative(dtype: tf.DType) -> tf.Tensor:
    """A finite value far below any real logit of `dtype` (half of its most negative number)."""
    return tf.constant(dtype.min / 2 if dtype.is_floating else -1e9, dtype=dtype)


def _masked_softmax(logits: tf.Tensor, mask: tf.Tensor, axis: int = -1) -> tf.Tensor:
    logits = tf.where(mask, logits, large_negative(logits.dtype))
    probs = tf.nn.softmax(logits, axis=axis)
    # Exact zeros on masked positions; a fully masked row becomes all zeros (softmax made it uniform).
    return tf.where(mask, probs, tf.zeros_like(probs))


def softmax_rows(x: tf.Tensor, mask: tf.Tensor | None) -> tf.Tensor:
    """`_masked_softmax` of float32 `x` over the last axis (mask None: plain softmax) in the form XLA's CPU
    backend fuses best (fused.row_max / fused.row_sums): the normaliser goes into the exponent,
    exp(x - max - log(sum)), so the exponentials are computed twice but never written out (a second
    consumer of exp(x - max) would make XLA write it in float32). A fully masked row: log(0) = -inf makes
    every exponent +inf, and the mask selects zeros."""
    if mask is not None:
        x = tf.where(mask, x, large_negative(x.dtype))
    top = fused.row_max(x)
    e = tf.exp(x - top)
    if mask is not None:
        e = tf.where(mask, e, tf.zeros_like(e))
    probs = tf.exp(x - (top + tf.math.log(fused.row_sums(e))))
    return probs if mask is None else tf.where(mask, probs, tf.zeros_like(probs))


_masked_softmax_xla = fused.xla(lambda logits, mask: tf.cast(softmax_rows(tf.cast(logits, tf.float32), mask), logits.dtype))


def masked_softmax(logits: tf.Tensor, mask: tf.Tensor | None, axis: int = -1) -> tf.Tensor:
    """Softmax over `axis` where `mask` (broadcastable to logits; 1/True = attend) is 0 gets weight 0."""
    if mask is None:
        return tf.nn.softmax(logits, axis=axis)
    mask = tf.cast(mask, tf.bool)
    rank = logits.shape.rank
    if axis % max(rank or 1, 1) != (rank or 0) - 1 or not fused.fusable(logits) or not mask.shape.is_fully_defined():
        return _masked_softmax(logits, mask, axis)

    @tf.custom_gradient
    def run(logits):
        probs = _masked_softmax_xla(logits, mask)
        return probs, lambda dy: fused._softmax_backward_xla(probs, dy)

    return run(logits)


def _softmax_dropout_forward(logits, mask, keys, threshold, scale):
    """-> (dropped probabilities, probabilities), both in logits' dtype: the softmax in float32, rounded
    once; the dropout scales those rounded probabilities (in float32, rounded again), which are what the
    backward pass reads, as in the op-by-op graph. One softmax output feeding both keeps XLA from writing
    a float32 copy of the probabilities for two consumers."""
    probs = tf.cast(softmax_rows(tf.cast(logits, tf.float32), mask), logits.dtype)
    if keys is None:
        return probs, probs
    dropped = fused.dropout_apply(tf.cast(probs, tf.float32), keys, threshold, scale)
    return tf.cast(dropped, logits.dtype), probs


def _softmax_dropout_backward(probs, dy, keys, threshold, scale):
    """Gradient for the logits: dropout's gradient (same decisions), then softmax's, in float32:
    p * (d - sum(d * p)) with d = dropout(dy). The sum takes dropout(dy * p), the same products, so that XLA
    recomputes the decisions in both loops instead of writing d out in float32 for its two consumers."""
    if keys is None:
        return fused.softmax_backward(probs, dy)
    p, dy = tf.cast(probs, tf.float32), tf.cast(dy, tf.float32)
    total = fused.row_sums(fused.dropout_apply(dy * p, keys, threshold, scale))
    return tf.cast(p * (fused.dropout_apply(dy, keys, threshold, scale) - total), probs.dtype)


_softmax_dropout_forward_xla = fused.xla(_softmax_dropout_forward)
_softmax_dropout_backward_xla = fused.xla(_softmax_dropout_backward)


def fusable_softmax_dropout(logits: tf.Tensor, mask: tf.Tensor | None) -> bool:
    """True when `masked_softmax_dropout` runs fused on these inputs (else callers take the op-by-op path)."""
    return fused.fusable(logits) and (mask is None or mask.shape.is_fully_defined())


def masked_softmax_dropout(logits: tf.Tensor, mask: tf.Tensor | None, rate: float = 0.0,
                           seed: tf.Tensor | None = None) -> tf.Tensor:
    """Attention's `dropout(masked_softmax(logits))` over the last axis as ONE compiled function each way, computed
    in float32 whatever `logits`' dtype and returned in it (bf16 scores in, bf16 probabilities out: no
    float32 copy of the `[B, heads, Lq, Lk]` tensor is written, cast or kept for the backward pass, which
    reads the probabilities in `logits`' dtype). The dropout decisions are `fused.stateless_dropout`'s
    counter hash of `seed`; `rate` 0 (or no seed) is the softmax alone. Only for `fusable_softmax_dropout`
    inputs. In float32 the values are those of masked_softmax followed by fused.stateless_dropout."""
    if mask is not None:
        mask = tf.cast(mask, tf.bool)
    keys = threshold = scale = None
    if 0 < rate < 1 and seed is not None and logits.shape.num_elements() < 2 ** 31:
        keys, threshold, scale = fused.dropout_constants(rate, seed, tf.float32)

    @tf.custom_gradient
    def run(logits):
        dropped, probs = _softmax_dropout_forward_xla(logits, mask, keys, threshold, scale)
        return dropped, lambda dy: _softmax_dropout_backward_xla(probs, dy, keys, threshold, scale)

    return run(logits)
