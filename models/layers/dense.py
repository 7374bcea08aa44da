"""The Dense layer every Transformer layer here uses.

tf.keras Dense multiplies a `[batch, length, in]` input by its `[in, out]` kernel with one rank-3 x
rank-2 matmul, which TensorFlow lowers to a broadcasting BatchMatMul: on CPU that is ~1.5x slower than
one 2-D MatMul over `[batch * length, in]`, forward and backward (measured with oneDNN, BERT-base
shapes). This subclass reshapes to 2-D around the same kernel and bias, so variables, names and
checkpoints are those of tf.keras Dense.
"""
from __future__ import annotations

import tensorflow as tf


class Dense(tf.keras.layers.Dense):
    def call(self, inputs, training=None):
        rank = inputs.shape.rank
        if rank is None or rank <= 2:
            return super().call(inputs)
        shape = tf.shape(inputs)
        flat = tf.reshape(inputs, [-1, inputs.shape[-1] if inputs.shape[-1] is not None else shape[-1]])
        out = tf.reshape(super().call(flat), tf.concat([shape[:-1], [self.units]], axis=0))
        out.set_shape(inputs.shape[:-1].concatenate([self.units]))
        return out
