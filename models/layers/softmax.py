"""The one masked softmax every attention uses.

Masked positions get exactly zero weight (not exp(-1e9)), a row with every position masked gives all
zeros instead of NaN or a uniform distribution, and the fill value is derived from the logits' dtype
so fp16/bf16 never overflow.

A training step's softmax over the last axis (a fusable tensor, models/layers/fused.py) runs as one XLA
forward (select, softmax, select) and one XLA backward `p * (dy - sum(dy * p))`, which is zero on masked
positions as the op-by-op gradient is; same values.
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


_masked_softmax_xla = fused.xla(_masked_softmax)


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
