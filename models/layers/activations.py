"""Activation functions by the names the originals' config files use.

Decisions:
- "gelu" is the tanh approximation, as in the original BERT and XLNet code (their released
  checkpoints were trained with it); "gelu_exact" is the erf form that ELECTRA's `modeling.py`
  uses. The two differ by < 1e-3, but a mismatch still shifts imported checkpoints' outputs,
  so the name is explicit.
- Unknown names are a clear error listing the known ones (config files are user input).
- Both GELUs have hand-written gradients that save only their input (memory, see `gelu`); on a training
  step's activations both directions run as one XLA-fused loop each (models/layers/fused.py).
- The GELUs read and write the input's dtype (bf16 under mixed_bfloat16) but compute in float32
  (`fused.in_float32`), fused or not: XLA's CPU code for bf16 arithmetic converts around every op, so
  the float32 loop is faster, and it rounds once instead of at every op (both paths agree closely).
  relu/swish/tanh compute in the input's dtype.
"""
from __future__ import annotations

import math
from typing import Callable

import tensorflow as tf

from textrain.models.layers import fused

_GELU_C = math.sqrt(2.0 / math.pi)
_GELU_A = 0.044715


def _gelu_tanh(x: tf.Tensor) -> tf.Tensor:
    return tf.tanh(tf.cast(_GELU_C, x.dtype) * (x + tf.cast(_GELU_A, x.dtype) * x * x * x))


@tf.custom_gradient
def gelu(x: tf.Tensor):
    """GELU, tanh approximation (original BERT/XLNet).

    Hand-written gradient that keeps only `x` for the backward pass: autodiff of the composite
    form keeps ~5 FFN-sized intermediates per layer (about 3 GB at BERT-base, L128, batch 32).
    """
    x = tf.convert_to_tensor(x)
    if fused.fusable(x):
        return _gelu_forward_xla(x), lambda dy: _gelu_backward_xla(x, dy)
    return _gelu_forward_f32(x), lambda dy: _gelu_backward_f32(x, dy)


def _gelu_forward(x: tf.Tensor) -> tf.Tensor:
    return 0.5 * x * (1.0 + _gelu_tanh(x))


def _gelu_backward(x: tf.Tensor, dy: tf.Tensor) -> tf.Tensor:
    t = _gelu_tanh(x)
    du = tf.cast(_GELU_C, x.dtype) * (1.0 + tf.cast(3.0 * _GELU_A, x.dtype) * x * x)
    return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du)


_gelu_forward_f32, _gelu_backward_f32 = fused.in_float32(_gelu_forward), fused.in_float32(_gelu_backward)
_gelu_forward_xla, _gelu_backward_xla = fused.xla(_gelu_forward_f32), fused.xla(_gelu_backward_f32)


@tf.custom_gradient
def gelu_exact(x: tf.Tensor):
    """GELU, exact erf form (ELECTRA); gradient `Phi(x) + x * phi(x)` from `x` alone (see gelu)."""
    x = tf.convert_to_tensor(x)
    if fused.fusable(x):
        return _gelu_exact_forward_xla(x), lambda dy: _gelu_exact_backward_xla(x, dy)
    return _gelu_exact_forward_f32(x), lambda dy: _gelu_exact_backward_f32(x, dy)


def _gelu_exact_forward(x: tf.Tensor) -> tf.Tensor:
    return 0.5 * x * (1.0 + tf.math.erf(x / tf.cast(math.sqrt(2.0), x.dtype)))


def _gelu_exact_backward(x: tf.Tensor, dy: tf.Tensor) -> tf.Tensor:
    cdf = 0.5 * (1.0 + tf.math.erf(x / tf.cast(math.sqrt(2.0), x.dtype)))
    pdf = tf.exp(-0.5 * x * x) * tf.cast(1.0 / math.sqrt(2.0 * math.pi), x.dtype)
    return dy * (cdf + x * pdf)


_gelu_exact_forward_f32 = fused.in_float32(_gelu_exact_forward)
_gelu_exact_backward_f32 = fused.in_float32(_gelu_exact_backward)
_gelu_exact_forward_xla = fused.xla(_gelu_exact_forward_f32)
_gelu_exact_backward_xla = fused.xla(_gelu_exact_backward_f32)


def relu(x: tf.Tensor) -> tf.Tensor:
    return tf.nn.relu(x)


def swish(x: tf.Tensor) -> tf.Tensor:
    return x * tf.sigmoid(x)


def tanh(x: tf.Tensor) -> tf.Tensor:
    return tf.tanh(x)


def linear(x: tf.Tensor) -> tf.Tensor:
    return x


ACTIVATIONS: dict[str, Callable[[tf.Tensor], tf.Tensor]] = {
    "gelu": gelu,
    "gelu_exact": gelu_exact,
    "relu": relu,
    "swish": swish,
    "silu": swish,
    "tanh": tanh,
    "linear": linear,
}


def get_activation(name: str | Callable | None) -> Callable[[tf.Tensor], tf.Tensor]:
    """The activation called `name` (case-insensitive); a callable passes through; None/"" = linear."""
    if callable(name):
        return name
    if not name:
        return linear
    key = str(name).lower()
    if key not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; known: {', '.join(sorted(ACTIVATIONS))}")
    return ACTIVATIONS[key]
