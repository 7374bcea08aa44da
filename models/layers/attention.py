"""Multi-head (self or cross) attention, batch-major, as in the original BERT.

Decisions:
- Q, K, V are three Dense layers `[hidden, hidden]` named `query`, `key`, `value` and the output
  projection `output_dense` is a fourth, because those are the released checkpoints' shapes
  (`attention/self/query/kernel` is `[hidden, heads*head_size]`); fused QKV would need a split on
  import for no measurable gain on CPU.
- Scores are computed in the compute dtype (bf16 matmuls are the point of mixed precision) and
  the one masked softmax (models/layers/softmax.py) runs in float32: exp/normalise of long rows is
  where bf16 loses accuracy. Probabilities go back to the compute dtype. On a training step's
  scores, softmax and attention dropout are one fused loop each way that reads and writes the
  compute dtype (`masked_softmax_dropout`): no float32 copy of the scores is cast, written or kept.
- The query is scaled by 1/sqrt(head_size) before the score matmul (L*d work instead of L*L).
- `attention_mask` is 1 = may attend, 0 = may not; `[batch, key_len]` (padding) or
  `[batch, query_len, key_len]` (causal, two-stream, cross). It is never named `mask`, which
  Keras reserves for its own masking.
- Incremental decoding (models/transformer.py) passes keys and values it already projected
  (`key_value=`, from `project_key_value`), so a decoder step projects only its new position and the
  encoder output is projected once per sentence. `use_bias=False` and `kernel_initializer` give
  tensor2tensor's attention (no biases, Glorot-uniform) with the same code.
"""
from __future__ import annotations

import math

import tensorflow as tf

from textrain.models.layers.dense import Dense
from textrain.models.layers.embeddings import truncated_normal
from textrain.models.layers.fused import Dropout, swap_middle_axes
from textrain.models.layers.softmax import fusable_softmax_dropout, masked_softmax, masked_softmax_dropout


def expand_attention_mask(attention_mask: tf.Tensor | None) -> tf.Tensor | None:
    """`[B, Lk]` or `[B, Lq, Lk]` -> `[B, 1, 1|Lq, Lk]`, broadcastable over heads (and queries)."""
    if attention_mask is None:
        return None
    rank = attention_mask.shape.rank
    if rank == 2:
        return attention_mask[:, tf.newaxis, tf.newaxis, :]
    if rank == 3:
        return attention_mask[:, tf.newaxis, :, :]
    raise ValueError(f"attention_mask must be [batch, key_len] or [batch, query_len, key_len], "
                     f"got shape {attention_mask.shape}")


class MultiHeadAttention(tf.keras.layers.Layer):
    """`[B, Lq, H]` (and optional `[B, Lk, H]` memory) -> `[B, Lq, H]`, output projection included."""

    def __init__(self, hidden_size: int, num_heads: int, attention_dropout: float = 0.1,
                 initializer_range: float = 0.02, name: str = "attention", use_bias: bool = True,
                 kernel_initializer: tf.keras.initializers.Initializer | None = None, **kwargs):
        super().__init__(name=name, **kwargs)
        if hidden_size % num_heads:
            raise ValueError(f"hidden_size {hidden_size} is not a multiple of num_attention_heads {num_heads}")
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.head_size = hidden_size // num_heads
        init = kernel_initializer or truncated_normal(initializer_range)

        def dense(layer_name: str) -> tf.keras.layers.Dense:
            return Dense(hidden_size, kernel_initializer=init, name=layer_name, use_bias=use_bias,
                         dtype=self.dtype_policy)

        self.query = dense("query")
        self.key = dense("key")
        self.value = dense("value")
        self.output_dense = dense("output_dense")
        self.dropout = Dropout(attention_dropout, dtype=self.dtype_policy)

    def build(self, input_shape) -> None:
        width = (None, None, self.hidden_size)
        for layer in (self.query, self.key, self.value, self.output_dense):
            layer.build(width)
        self.built = True

    def _split_heads(self, x: tf.Tensor, scale: float | None = None) -> tf.Tensor:
        """`[B, L, H]` -> `[B, heads, L, head_size]` (times `scale`, if given)."""
        shape = tf.shape(x)
        x = tf.reshape(x, [shape[0], shape[1], self.num_heads, self.head_size])
        return swap_middle_axes(x, scale)

    def project_key_value(self, memory: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """`[B, Lk, H]` -> keys and values `[B, heads, Lk, head_size]` (what a decoding cache holds)."""
        return self._split_heads(self.key(memory)), self._split_heads(self.value(memory))

    def call(self, inputs: tf.Tensor, memory: tf.Tensor | None = None,
             attention_mask: tf.Tensor | None = None, training: bool = False,
             return_probs: bool = False, key_value: tuple[tf.Tensor, tf.Tensor] | None = None):
        """`key_value`: keys and values already projected (`project_key_value`); `memory` is then unused."""
        q = self._split_heads(self.query(inputs), 1.0 / math.sqrt(self.head_size))
        if key_value is None:
            memory = inputs if memory is None else tf.cast(memory, inputs.dtype)
            k, v = self.project_key_value(memory)
        else:
            k, v = (tf.cast(t, inputs.dtype) for t in key_value)
        scores = tf.matmul(q, k, transpose_b=True)  # [B, heads, Lq, Lk]
        mask = expand_attention_mask(attention_mask)
        if fusable_softmax_dropout(scores, mask):
            drop = training is True and 0 < self.dropout.rate < 1
            probs = masked_softmax_dropout(scores, mask, self.dropout.rate if drop else 0.0,
                                           self.dropout.draw_seed() if drop else None)
        else:
            probs = masked_softmax(tf.cast(scores, tf.float32), mask)
            probs = self.dropout(tf.cast(probs, v.dtype), training=training)
        context = tf.matmul(probs, v)  # [B, heads, Lq, head_size]
        context = swap_middle_axes(context)
        shape = tf.shape(inputs)
        context = tf.reshape(context, [shape[0], shape[1], self.hidden_size])
        output = self.output_dense(context)
        return (output, probs) if return_probs else output
