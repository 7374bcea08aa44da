"""Elementwise chains fused by XLA, matmuls left to TensorFlow's own kernels (oneDNN on CPU).

Why. Profiling a BERT-base training step (benchmarks/README.md, "Training step") shows the matmuls near
the machine's matmul peak and the rest of the time in chains of elementwise ops (GELU and its gradient,
LayerNorm and its gradient, the masked softmax), where TensorFlow runs one kernel per op and each
reads and writes a full activation tensor. Compiling the WHOLE model with XLA on a CPU is slower (its dots
are slower than oneDNN's, and bf16 dots lose AMX), so only these chains are compiled: each is a
`tf.function(jit_compile=True)` with a hand-written gradient that is compiled too, and each becomes one
fused loop (GELU forward + backward on [4096, 3072]: 27 vs 136 CPU-ms fp32, 79 vs 262 bf16).

Decisions:
- The formulas are the model's own (tanh GELU, erf GELU, float32 LayerNorm with the originals' epsilon,
  the one masked softmax): only how they are scheduled changes. Results agree with the op-by-op graph to
  float rounding (tests/test_layers.py compares both).
- Fused only when the tensor's shape is fully known and holds at least `FUSE_MIN_SIZE` elements: a
  training step's activations. Small or dynamically shaped tensors (unit tests, eager calls, exported
  serving signatures with a free batch dimension) take the op-by-op path: one XLA compilation per shape
  (~0.1-0.5 s) would not pay back there, and SavedModels stay free of XLA calls.
- Each fused function saves only its inputs (and per-row statistics) for the backward pass, which
  recomputes the rest inside the fused loop: activation memory stays that of the op-by-op custom gradients.
- Dropout: the random numbers stay TensorFlow's (`stateless_uniform` from the layer's Keras seed generator,
  exactly what `keras.layers.Dropout` draws: XLA's own RNG on a CPU is ~50x slower); only the compare, scale
  and select after them are fused (forward and backward one pass each instead of three), so the output is
  bit-for-bit Keras' and the kept mask (1 byte per element) is what the backward pass keeps, as TF's does.
"""
from __future__ import annotations

import tensorflow as tf

FUSE_MIN_SIZE = 1 << 16  # elements


def fusable(x: tf.Tensor) -> bool:
    """True when `x` has a fully known shape of at least FUSE_MIN_SIZE elements."""
    n = x.shape.num_elements()
    return n is not None and n >= FUSE_MIN_SIZE


def xla(fn):
    """`fn` compiled by XLA as one unit (retraced per input shape and dtype)."""
    return tf.function(fn, jit_compile=True, autograph=False)


# ------------------------------------------------------------------------------------ layer norm
def layer_norm_forward(x, gamma, beta, epsilon):
    """Float32 LayerNorm over the last axis -> (y in x's dtype, mean, 1/std) (Keras' formula)."""
    x32 = tf.cast(x, tf.float32)
    mean = tf.reduce_mean(x32, axis=-1, keepdims=True)
    var = tf.reduce_mean(tf.math.squared_difference(x32, mean), axis=-1, keepdims=True)
    rstd = tf.math.rsqrt(var + epsilon)
    inv = rstd * tf.cast(gamma, tf.float32)
    y = x32 * inv + (tf.cast(beta, tf.float32) - mean * inv)
    return tf.cast(y, x.dtype), mean, rstd


def layer_norm_backward(x, gamma, mean, rstd, dy):
    """Gradients of `layer_norm_forward` for x, gamma, beta (in their dtypes)."""
    x32, dy32 = tf.cast(x, tf.float32), tf.cast(dy, tf.float32)
    xhat = (x32 - mean) * rstd
    rows = list(range(x.shape.rank - 1))
    dbeta = tf.reduce_sum(dy32, axis=rows)
    dgamma = tf.reduce_sum(dy32 * xhat, axis=rows)
    g = dy32 * tf.cast(gamma, tf.float32)
    dx = rstd * (g - tf.reduce_mean(g, axis=-1, keepdims=True)
                 - xhat * tf.reduce_mean(g * xhat, axis=-1, keepdims=True))
    return tf.cast(dx, x.dtype), tf.cast(dgamma, gamma.dtype), tf.cast(dbeta, gamma.dtype)


_ln_forward_xla = xla(layer_norm_forward)
_ln_backward_xla = xla(layer_norm_backward)


def fused_layer_norm(x: tf.Tensor, gamma: tf.Tensor, beta: tf.Tensor, epsilon: float) -> tf.Tensor:
    """LayerNorm over the last axis in float32, output in x's dtype, as one XLA forward and backward."""
    eps = tf.constant(epsilon, tf.float32)

    @tf.custom_gradient
    def run(x, gamma, beta):
        y, mean, rstd = _ln_forward_xla(x, gamma, beta, eps)

        def grad(dy):
            return _ln_backward_xla(x, gamma, mean, rstd, dy)

        return y, grad

    return run(x, gamma, beta)


class LayerNormalization(tf.keras.layers.LayerNormalization):
    """Keras' LayerNormalization (same variables, names and formula) with the fused kernel for the
    common case: normalise over the last axis with gamma and beta, on a fusable tensor."""

    def call(self, inputs):
        axis = self.axis if isinstance(self.axis, (list, tuple)) else [self.axis]
        rank = inputs.shape.rank
        last = rank is not None and [a % rank for a in axis] == [rank - 1]
        if not (last and self.center and self.scale and not self.rms_scaling and fusable(inputs)):
            return super().call(inputs)
        # Reading the variables here gives what Keras' own call reads (autocast to the compute dtype).
        gamma, beta = tf.convert_to_tensor(self.gamma), tf.convert_to_tensor(self.beta)
        return tf.cast(fused_layer_norm(inputs, gamma, beta, self.epsilon), self.compute_dtype)


# ---------------------------------------------------------------------------------- masked softmax
def softmax_backward(probs, dy):
    """d softmax: p * (dy - sum(dy * p)); zero wherever p is zero (masked positions)."""
    p32, dy32 = tf.cast(probs, tf.float32), tf.cast(dy, tf.float32)
    d = p32 * (dy32 - tf.reduce_sum(dy32 * p32, axis=-1, keepdims=True))
    return tf.cast(d, probs.dtype)


_softmax_backward_xla = xla(softmax_backward)


# ----------------------------------------------------------------------------------------- dropout
def dropout_forward(x, uniform, rate, scale):
    keep = uniform >= rate
    return tf.where(keep, x * scale, tf.zeros_like(x)), keep


def dropout_backward(dy, keep, scale):
    return tf.where(keep, dy * scale, tf.zeros_like(dy))


_dropout_forward_xla = xla(dropout_forward)
_dropout_backward_xla = xla(dropout_backward)


class Dropout(tf.keras.layers.Dropout):
    """Keras' Dropout (same seed generator, same random numbers, same output) with the elementwise part
    fused on a fusable tensor (see the module docstring)."""

    def call(self, inputs, training=False):
        if not (training is True and 0 < self.rate < 1 and self.noise_shape is None and fusable(inputs)):
            return super().call(inputs, training=training)
        from keras.src.backend.tensorflow import random as keras_tf_random  # Keras' own seed handling
        seed = keras_tf_random._cast_seed(keras_tf_random.draw_seed(self.seed_generator))
        uniform = tf.random.stateless_uniform(tf.shape(inputs), seed=seed, dtype=inputs.dtype)
        rate = tf.constant(self.rate, inputs.dtype)
        scale = tf.constant(1.0 / (1.0 - self.rate), inputs.dtype)

        @tf.custom_gradient
        def run(x):
            y, keep = _dropout_forward_xla(x, uniform, rate, scale)
            return y, lambda dy: _dropout_backward_xla(dy, keep, scale)

        return run(inputs)
