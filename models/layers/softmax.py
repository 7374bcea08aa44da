"""The one masked softmax every attention uses.

Masked positions get exactly zero weight (not exp(-1e9)), a row with every position masked gives all
zeros instead of NaN or a uniform distribution, and the fill value is derived from the logits' dtype
so fp16/bf16 never overflow.
"""
from __future__ import annotations

import tensorflow as tf


def large_negative(dtype: tf.DType) -> tf.Tensor:
    """A finite value far below any real logit of `dtype` (half of its most negative number)."""
    return tf.constant(dtype.min / 2 if dtype.is_floating else -1e9, dtype=dtype)


def masked_softmax(logits: tf.Tensor, mask: tf.Tensor | None, axis: int = -1) -> tf.Tensor:
    """Softmax over `axis` where `mask` (broadcastable to logits; 1/True = attend) is 0 gets weight 0."""
    if mask is None:
        return tf.nn.softmax(logits, axis=axis)
    mask = tf.cast(mask, tf.bool)
    logits = tf.where(mask, logits, large_negative(logits.dtype))
    probs = tf.nn.softmax(logits, axis=axis)
    # Exact zeros on masked positions; a fully masked row becomes all zeros (softmax made it uniform).
    return tf.where(mask, probs, tf.zeros_like(probs))
