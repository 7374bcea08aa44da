"""The Dense layer every Transformer layer here uses.

tf.keras Dense multiplies a `[batch, length, in]` input by its `[in, out]` kernel with one rank-3 x
rank-2 matmul, which TensorFlow lowers to a broadcasting BatchMatMul: on CPU that is ~1.5x slower than
one 2-D MatMul over `[batch * length, in]`, forward and backward (measured with oneDNN, BERT-base
shapes). This subclass reshapes to 2-D around the same kernel and bias, so variables, names and
checkpoints are those of tf.keras Dense.

On a training step's activations (`fused.fusable`) the bias is added by `matmul_bias`, whose bias
gradient is one column-sum GEMV (`fused.column_sums`) instead of TensorFlow's BiasAddGrad: 2.5 vs 3.5 ms
on a `[4096, 3072]` bf16 gradient, 0.47 vs 0.76 ms on `[4096, 768]` (docs/HISTORY.md).
The forward ops are the same MatMul and BiasAdd, which oneDNN still fuses into one kernel. Only where no
accelerator is visible (`fused.cpu_only`): a GPU's float32 GEMV may run in TF32, which rounds its inputs.
"""
from __future__ import annotations

import tensorflow as tf

from textrain.models.layers import fused


def matmul_bias(x: tf.Tensor, kernel: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    """`x @ kernel + bias` for 2-D `x`; the gradients those of the ops, the bias's taken as a GEMV."""
    @tf.custom_gradient
    def run(x, kernel, bias):
        def grad(dy):
            return (tf.matmul(dy, kernel, transpose_b=True), tf.matmul(x, dy, transpose_a=True),
                    fused.column_sums(dy))

        return tf.nn.bias_add(tf.matmul(x, kernel), bias), grad

    return run(x, kernel, bias)


class Dense(tf.keras.layers.Dense):
    def call(self, inputs, training=None):
        rank = inputs.shape.rank
        if rank is None or rank < 2:
            return super().call(inputs)
        flat = inputs
        if rank > 2:
            shape = tf.shape(inputs)
            flat = tf.reshape(inputs, [-1, inputs.shape[-1] if inputs.shape[-1] is not None else shape[-1]])
        if self.use_bias and fused.fusable(flat) and fused.cpu_only():
            # Reading the variables here gives what Keras' own call reads (autocast to the compute dtype).
            out = matmul_bias(flat, tf.convert_to_tensor(self.kernel), tf.convert_to_tensor(self.bias))
            if self.activation is not None:
                out = self.activation(out)
        else:
            out = super().call(flat)
        if rank == 2:
            return out
        out = tf.reshape(out, tf.concat([shape[:-1], [self.units]], axis=0))
        out.set_shape(inputs.shape[:-1].concatenate([self.units]))
        return out
