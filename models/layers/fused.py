"""Elementwise chains fused by XLA, matmuls left to TensorFlow's own kernels (oneDNN on CPU).

Why. Profiling a BERT-base training step (docs/HISTORY.md, "Benchmark history") shows the matmuls near
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
- bf16 (mixed precision): each fused loop reads and writes bf16 but computes in float32 and rounds once
  (`in_float32`, the LayerNorm and softmax statistics). XLA's CPU code for bf16 arithmetic converts around
  every op: the bf16 GELU loop took 93 CPU-ms where the float32-inside one takes 36 (docs/HISTORY.md).
  The post-LN sub-layer output LN(x + dropout(y)) and attention's softmax + dropout are one
  compiled function each way; bf16 LayerNorm gradients take gamma/beta's column sums as oneDNN GEMVs
  (`column_sums`), and so do the Dense layers' bias gradients (models/layers/dense.py).
- Row reductions (LayerNorm's statistics and gradient, softmax) are written as `row_sums` (a product with
  ones) and `row_max` (a halving tree): XLA's CPU backend fuses a dot with the elementwise ops feeding it,
  but writes the whole input of a reduce to memory first. Inside one compiled function nothing
  activation-sized is then written in float32 (BERT-base bf16: LayerNorm forward 3.8 -> 2.3 ms, backward
  5.9 -> 3.7, softmax + dropout backward 5.8 -> 3.7; docs/HISTORY.md).
- Attention's head split and merge (`swap_middle_axes`) are XLA transposes, the query scale folded in.
- Fused only when the tensor's shape is fully known and holds at least `FUSE_MIN_SIZE` elements: a
  training step's activations. Small or dynamically shaped tensors (unit tests, eager calls, exported
  serving signatures with a free batch dimension) take the op-by-op path: one XLA compilation per shape
  (~0.1-0.5 s) would not pay back there, and SavedModels stay free of XLA calls.
- Each fused function saves only its inputs (and per-row statistics) for the backward pass, which
  recomputes the rest inside the fused loop: activation memory stays that of the op-by-op custom gradients.
- Dropout: the keep/drop decision of each element is a counter-based hash of (seed, element index),
  computed inside the fused loop: no random tensor is written or read and no mask is stored, because the
  backward pass recomputes the same decisions from the seed. The seed is drawn from the layer's Keras
  seed generator exactly as `keras.layers.Dropout` draws its own, so runs are reproducible and every call
  gets fresh decisions. Why not TensorFlow's random ops: Philox filling a float tensor cost ~5 % of a
  BERT-base fp32 step on the CPU (docs/HISTORY.md), and XLA's own RNG on a CPU is ~50x slower still.
  The hash (one round of a 32-bit integer mixer over `index * odd key + key`) is not cryptographic; dropout
  needs only independent Bernoulli(1 - rate) decisions, and tests check their rate and independence across
  positions and calls. A second mixer round cost ~1 ms more per 6.3 M elements (BERT-base: ~300 M a step).
  The probability is exact to 2^-32 (threshold on the 32-bit value); the scale is 1 / (1 - rate) as Keras'.
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


def in_float32(fn):
    """`fn` computed in float32 on its (floating) arguments, the result cast back to the first argument's
    dtype: a bf16/fp16 chain reads and writes its narrow dtype but rounds once. float32 inputs: `fn` as is."""
    def run(*args):
        dtype = args[0].dtype
        if dtype == tf.float32:
            return fn(*args)
        return tf.cast(fn(*(tf.cast(a, tf.float32) if a.dtype.is_floating else a for a in args)), dtype)

    run.__name__ = getattr(fn, "__name__", "in_float32")
    return run


# ---------------------------------------------------------------------------------- row reductions
# XLA's CPU backend (TF 2.21) never fuses a reduce with the ops that produce its input: it writes that
# input out in full (float32 for a bf16 chain) and reads it back, often twice (a reduce-window pass, then
# the reduce). A dot, though, takes its elementwise producer into its own loop. So inside the fused
# functions a row sum is a matrix-vector product with ones, and a row max a halving tree of elementwise
# maxima (one loop). Measured on this project's 2-core CPU (docs/HISTORY.md): sum(x * x)
# over [4096, 768] float32 0.53 vs 2.39 ms, a masked row max over [32, 12, 128, 128] bf16 1.2 vs 4.0 ms.
def cpu_only() -> bool:
    """True when no GPU or TPU is visible (checked when a function is traced). Only XLA's CPU backend needs the
    dot forms; on accelerators a float32 dot may round its inputs (TF32 on GPUs, bf16 passes on TPUs), while
    their XLA backends fuse reductions anyway."""
    return not (tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU"))


def row_sums(t: tf.Tensor) -> tf.Tensor:
    """Sum over the last axis, kept as size 1: on a CPU `t @ ones` (float32 accumulation in t's dtype)."""
    if not cpu_only():
        return tf.reduce_sum(t, axis=-1, keepdims=True)
    return tf.linalg.matvec(t, tf.ones([t.shape[-1]], t.dtype))[..., tf.newaxis]


def row_max(t: tf.Tensor) -> tf.Tensor:
    """Max over the last axis, kept as size 1: halves while the length is even, then one reduce."""
    n = t.shape[-1]
    while n % 2 == 0 and n > 1:
        n //= 2
        t = tf.maximum(t[..., :n], t[..., n:])
    return t if n == 1 else tf.reduce_max(t, axis=-1, keepdims=True)


# ------------------------------------------------------------------------------------ layer norm
def layer_norm_forward(x, gamma, beta, epsilon):
    """Float32 LayerNorm over the last axis -> (y in x's dtype, mean, 1/std) (Keras' formula)."""
    x32 = tf.cast(x, tf.float32)
    n = x.shape[-1]
    mean = row_sums(x32) / n
    var = row_sums(tf.math.squared_difference(x32, mean)) / n
    rstd = tf.math.rsqrt(var + epsilon)
    inv = rstd * tf.cast(gamma, tf.float32)
    y = x32 * inv + (tf.cast(beta, tf.float32) - mean * inv)
    return tf.cast(y, x.dtype), mean, rstd


def layer_norm_backward_rows(x, gamma, mean, rstd, dy):
    """The row-wise part of `layer_norm_backward`: (dx in x's dtype, dy * xhat in float32)."""
    x32, dy32 = tf.cast(x, tf.float32), tf.cast(dy, tf.float32)
    xhat = (x32 - mean) * rstd
    g = dy32 * tf.cast(gamma, tf.float32)
    n = x.shape[-1]
    dx = rstd * (g - row_sums(g) / n - xhat * (row_sums(g * xhat) / n))
    return tf.cast(dx, x.dtype), dy32 * xhat


def layer_norm_backward(x, gamma, mean, rstd, dy):
    """Gradients of `layer_norm_forward` for x, gamma, beta (in their dtypes): the row-wise part, then
    gamma's and beta's sums over the rows."""
    dx, dy_xhat = layer_norm_backward_rows(x, gamma, mean, rstd, dy)
    rows = list(range(x.shape.rank - 1))
    dgamma = tf.reduce_sum(dy_xhat, axis=rows)
    dbeta = tf.reduce_sum(tf.cast(dy, tf.float32), axis=rows)
    return dx, tf.cast(dgamma, gamma.dtype), tf.cast(dbeta, gamma.dtype)


def column_sums(t: tf.Tensor) -> tf.Tensor:
    """Sum over every axis but the last, as ONE `ones @ t` matmul (oneDNN's GEMV: float32 accumulation,
    the result in t's dtype)."""
    flat = tf.reshape(t, [-1, t.shape[-1]])
    return tf.matmul(tf.ones([1, flat.shape[0]], t.dtype), flat)[0]


def _ln_backward_narrow(x, gamma, mean, rstd, dy):
    """`layer_norm_backward` for bf16/fp16 x: the row-wise loop fused, then the gamma/beta column sums by
    `column_sums`. XLA's CPU code for a bf16 column reduction in the same loop cost 2.5x the row-wise part
    (17 vs 7 CPU-ms at [4096, 768], docs/HISTORY.md); float32 keeps the single loop."""
    dx, dy_xhat = _ln_backward_rows_xla(x, gamma, mean, rstd, dy)
    # dy is exact in its narrow dtype (so is its GEMV, accumulating in float32); dy * xhat stays float32.
    return dx, tf.cast(column_sums(dy_xhat), gamma.dtype), tf.cast(column_sums(dy), gamma.dtype)


_ln_forward_xla = xla(layer_norm_forward)
_ln_backward_xla = xla(layer_norm_backward)
_ln_backward_rows_xla = xla(layer_norm_backward_rows)


def fused_layer_norm(x: tf.Tensor, gamma: tf.Tensor, beta: tf.Tensor, epsilon: float) -> tf.Tensor:
    """LayerNorm over the last axis in float32, output in x's dtype, as one XLA forward and backward."""
    eps = tf.constant(epsilon, tf.float32)

    @tf.custom_gradient
    def run(x, gamma, beta):
        y, mean, rstd = _ln_forward_xla(x, gamma, beta, eps)

        def grad(dy):
            if x.dtype == tf.float32:
                return _ln_backward_xla(x, gamma, mean, rstd, dy)
            return _ln_backward_narrow(x, gamma, mean, rstd, dy)

        return y, grad

    return run(x, gamma, beta)


def _residual_forward(x, y, gamma, beta, epsilon, keys, threshold, scale):
    """(LN(x + dropout(y)) in x's dtype, the sum x + dropout(y) in x's dtype, mean, 1/std); the sum and the
    statistics in float32 (`keys` None: no dropout)."""
    y32 = tf.cast(y, tf.float32)
    z = tf.cast(x, tf.float32) + (y32 if keys is None else dropout_apply(y32, keys, threshold, scale))
    z = tf.cast(z, x.dtype)  # what the backward pass reads (the op-by-op graph's sum, in x's dtype)
    out, mean, rstd = layer_norm_forward(z, gamma, beta, epsilon)
    return out, z, mean, rstd


def _residual_backward(z, gamma, mean, rstd, dy, keys, threshold, scale):
    """(d residual input, d dropout input, [d gamma, d beta] or [dy * xhat in float32])."""
    if z.dtype == tf.float32:
        dz, dgamma, dbeta = layer_norm_backward(z, gamma, mean, rstd, dy)
        extra = (dgamma, dbeta)
    else:
        dz, dy_xhat = layer_norm_backward_rows(z, gamma, mean, rstd, dy)
        extra = (dy_xhat,)
    dropped = dz if keys is None else tf.cast(dropout_apply(tf.cast(dz, tf.float32), keys, threshold, scale), z.dtype)
    return (dz, dropped) + extra


_residual_forward_xla = xla(_residual_forward)
_residual_backward_xla = xla(_residual_backward)


def residual_dropout_layer_norm(x: tf.Tensor, y: tf.Tensor, gamma: tf.Tensor, beta: tf.Tensor, epsilon: float,
                                rate: float = 0.0, seed: tf.Tensor | None = None) -> tf.Tensor:
    """The post-LN block's `LN(x + dropout(y))` as ONE compiled function each way (the dropout decisions those of
    `stateless_dropout` with `seed`; `rate` 0 or no seed: no dropout). In float32 the values are the
    op-by-op ones; in bf16 the dropout, the sum and the statistics are float32 and rounded once."""
    eps = tf.constant(epsilon, tf.float32)
    keys = threshold = scale = None
    if 0 < rate < 1 and seed is not None and y.shape.num_elements() < 2 ** 31:
        keys, threshold, scale = dropout_constants(rate, seed, tf.float32)

    @tf.custom_gradient
    def run(x, y, gamma, beta):
        out, z, mean, rstd = _residual_forward_xla(x, y, gamma, beta, eps, keys, threshold, scale)

        def grad(dy):
            dz, dropped, *extra = _residual_backward_xla(z, gamma, mean, rstd, dy, keys, threshold, scale)
            if z.dtype == tf.float32:
                dgamma, dbeta = extra
            else:  # the column sums as GEMVs (see _ln_backward_narrow)
                dgamma, dbeta = column_sums(extra[0]), column_sums(tf.cast(dy, z.dtype))
            return dz, tf.cast(dropped, y.dtype), tf.cast(dgamma, gamma.dtype), tf.cast(dbeta, beta.dtype)

        return out, grad

    return run(x, y, gamma, beta)


class LayerNormalization(tf.keras.layers.LayerNormalization):
    """Keras' LayerNormalization (same variables, names and formula) with the fused kernel for the
    common case: normalise over the last axis with gamma and beta, on a fusable tensor."""

    def _fuses(self, inputs: tf.Tensor) -> bool:
        axis = self.axis if isinstance(self.axis, (list, tuple)) else [self.axis]
        rank = inputs.shape.rank
        last = rank is not None and [a % rank for a in axis] == [rank - 1]
        return last and self.center and self.scale and not self.rms_scaling and fusable(inputs)

    def call(self, inputs):
        if not self._fuses(inputs):
            return super().call(inputs)
        # Reading the variables here gives what Keras' own call reads (autocast to the compute dtype).
        gamma, beta = tf.convert_to_tensor(self.gamma), tf.convert_to_tensor(self.beta)
        return tf.cast(fused_layer_norm(inputs, gamma, beta, self.epsilon), self.compute_dtype)

    def residual(self, x: tf.Tensor, y: tf.Tensor, dropout: "Dropout", training: bool = False) -> tf.Tensor:
        """`self(x + dropout(y, training))`, the post-LN block's sub-layer output, as one fused loop each
        way (`residual_dropout_layer_norm`) when this layer's fused kernel applies to x and y alike."""
        if not (self.built and self._fuses(x) and x.shape == y.shape and x.dtype == y.dtype
                and dropout.noise_shape is None):
            return self(x + dropout(y, training=training))
        drop = training is True and 0 < dropout.rate < 1
        gamma, beta = tf.cast(self.gamma, x.dtype), tf.cast(self.beta, x.dtype)  # what `self(...)` reads
        return residual_dropout_layer_norm(x, y, gamma, beta, self.epsilon, dropout.rate if drop else 0.0,
                                           dropout.draw_seed() if drop else None)


# ---------------------------------------------------------------------------------- head transposes
def _swap_middle_axes(x, scale):
    y = tf.transpose(x, [0, 2, 1, 3])
    return y if scale is None else y * tf.cast(scale, x.dtype)


_swap_middle_axes_xla = xla(_swap_middle_axes)


def swap_middle_axes(x: tf.Tensor, scale: float | None = None) -> tf.Tensor:
    """`tf.transpose(x, [0, 2, 1, 3])` (times `scale` in x's dtype, if given): attention's split and merge
    of heads. On a fusable rank-4 tensor it is one XLA loop each way, the scale folded in: XLA's CPU
    transpose is about twice as fast as TensorFlow's (0.61 vs 1.48 ms on [32, 128, 12, 64] bf16,
    docs/HISTORY.md), and the scaling is no separate pass. Same values either way."""
    if not (fusable(x) and x.shape.rank == 4):
        return _swap_middle_axes(x, scale)
    factor = None if scale is None else tf.constant(scale, tf.float32)

    @tf.custom_gradient
    def run(x):
        # [0, 2, 1, 3] is its own inverse; d(y * s) = dy * s.
        return _swap_middle_axes_xla(x, factor), lambda dy: _swap_middle_axes_xla(dy, factor)

    return run(x)


# ---------------------------------------------------------------------------------- masked softmax
def softmax_backward(probs, dy):
    """d softmax: p * (dy - sum(dy * p)); zero wherever p is zero (masked positions)."""
    p32, dy32 = tf.cast(probs, tf.float32), tf.cast(dy, tf.float32)
    d = p32 * (dy32 - row_sums(dy32 * p32))
    return tf.cast(d, probs.dtype)


_softmax_backward_xla = xla(softmax_backward)


# ------------------------------------------------------------------------------ cross-entropy
def _cross_entropy_forward(logits, labels):
    top = tf.reduce_max(logits, -1, keepdims=True)  # a reduce straight off a float32 argument is fast
    log_sum = tf.math.log(row_sums(tf.exp(logits - top))[:, 0]) + top[:, 0]
    return log_sum - tf.gather(logits, labels[:, None], batch_dims=1)[:, 0], log_sum


def _cross_entropy_backward(logits, labels, log_sum, dy):
    probs = tf.exp(logits - log_sum[:, None])
    return (probs - tf.one_hot(labels, tf.shape(logits)[1], dtype=logits.dtype)) * dy[:, None]


_cross_entropy_forward_xla = xla(_cross_entropy_forward)
_cross_entropy_backward_xla = xla(_cross_entropy_backward)


def sparse_softmax_cross_entropy(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    """`tf.nn.sparse_softmax_cross_entropy_with_logits` (same formula, float32 logits), fused on a large
    logits tensor: the MLM's `[predictions, vocab]` log-softmax, where TensorFlow's kernel costs more CPU
    than one fused pass each way. Labels must lie in [0, vocab) (TensorFlow's kernel checks that; this path does not)."""
    if not (fusable(logits) and logits.dtype == tf.float32):
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    shape = tf.shape(labels)
    flat_labels = tf.reshape(tf.cast(labels, tf.int32), [-1])

    @tf.custom_gradient
    def run(flat_logits):
        ce, log_sum = _cross_entropy_forward_xla(flat_logits, flat_labels)
        return ce, lambda dy: _cross_entropy_backward_xla(flat_logits, flat_labels, log_sum, dy)

    return tf.reshape(run(tf.reshape(logits, [-1, logits.shape[-1]])), shape)


# ----------------------------------------------------------------------------------------- dropout
_GOLDEN = 0x9E3779B9  # 2^32 / golden ratio: decorrelates the two key words


def _mix32(x: tf.Tensor) -> tf.Tensor:
    """A bijective 32-bit integer mixer (xor-shift / multiply rounds, constants from Wellons'
    hash-prospector "lowbias32"): each input bit flips each output bit with probability ~1/2."""
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16))
    x = x * tf.constant(0x7FEB352D, tf.uint32)
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 15))
    x = x * tf.constant(0x846CA68B, tf.uint32)
    return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16))


def dropout_keys(seed: tf.Tensor) -> tf.Tensor:
    """Two uint32 key words from a stateless seed (`[2]` int32 or int64: every bit counts)."""
    words = tf.reshape(tf.bitcast(seed, tf.uint32) if seed.dtype.size == 8 else
                       tf.bitcast(tf.cast(seed, tf.int32), tf.uint32), [-1])
    golden = tf.constant(_GOLDEN, tf.uint32)
    key = _mix32(words[0] + golden)
    for i in range(1, words.shape[0]):
        key = _mix32(tf.bitwise.bitwise_xor(key, words[i]) + golden)
    return tf.stack([key, _mix32(key + golden)])


def dropout_keep(shape: tf.TensorShape, keys: tf.Tensor, threshold: tf.Tensor) -> tf.Tensor:
    """bool `shape`: element i is kept when hash(keys, i) >= threshold (= rate * 2^32)."""
    index = tf.bitcast(tf.range(shape.num_elements(), dtype=tf.int32), tf.uint32)
    # One mixer round over a seed-dependent affine map of the index (an odd multiplier: a bijection).
    # The key multiplier makes two seeds' input sequences differ in stride, not just shift: with `i + k0`
    # alone, one seed's decisions would be another's shifted by k0' - k0 positions.
    odd = tf.bitwise.bitwise_or(keys[1], tf.constant(1, tf.uint32))
    bits = _mix32(index * odd + keys[0])
    return tf.reshape(bits >= threshold, shape)


def dropout_apply(x, keys, threshold, scale):
    """Forward and backward alike: x * scale where kept, 0 elsewhere (one fused loop, mask recomputed)."""
    return tf.where(dropout_keep(x.shape, keys, threshold), x * scale, tf.zeros_like(x))


_dropout_apply_xla = xla(dropout_apply)


def dropout_constants(rate: float, seed: tf.Tensor, dtype: tf.DType) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """(hash keys, uint32 drop threshold, scale in `dtype`) of `dropout_apply` for `rate` and `seed`."""
    threshold = tf.constant(min(round(rate * 2.0 ** 32), 2 ** 32 - 1), tf.uint32)
    return dropout_keys(seed), threshold, tf.constant(1.0 / (1.0 - rate), dtype)


def stateless_dropout(x: tf.Tensor, rate: float, seed: tf.Tensor) -> tf.Tensor:
    """Inverted dropout of `x` decided by `seed` (`[2]` ints): on a fusable tensor the counter hash fused
    with the scaling, else `tf.nn.experimental.stateless_dropout` (same rate and scale, other draws)."""
    if not (0 < rate < 1 and fusable(x) and x.shape.num_elements() < 2 ** 31):  # int32 element index
        return tf.nn.experimental.stateless_dropout(x, rate=rate, seed=seed)
    keys, threshold, scale = dropout_constants(rate, seed, x.dtype)

    @tf.custom_gradient
    def run(value):
        return (_dropout_apply_xla(value, keys, threshold, scale),
                lambda dy: _dropout_apply_xla(dy, keys, threshold, scale))

    return run(x)


class Dropout(tf.keras.layers.Dropout):
    """Keras' Dropout (same seed generator, rate and scale); on a fusable tensor in training the
    decisions come from `stateless_dropout`'s counter hash (see the module docstring)."""

    def call(self, inputs, training=False):
        if not (training is True and 0 < self.rate < 1 and self.noise_shape is None and fusable(inputs)):
            return super().call(inputs, training=training)
        return stateless_dropout(inputs, self.rate, self.draw_seed())

    def draw_seed(self) -> tf.Tensor:
        """The next stateless seed of this layer's generator (what one training call consumes): for a
        caller that fuses this dropout into its own loop (models/layers/softmax.masked_softmax_dropout)."""
        from keras.src.backend.tensorflow import random as keras_tf_random  # Keras' own seed handling
        return keras_tf_random._cast_seed(keras_tf_random.draw_seed(self.seed_generator))
