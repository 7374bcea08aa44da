"""Input embeddings of the BERT family: word + learned absolute position + token type, then
LayerNorm and dropout.

Decisions:
- The three tables are plain weights of one layer (not three `keras.layers.Embedding`s) so the
  word table can be shared and read by the MLM output layer (`attend`) without owning a layer,
  and so their TF1 names (`word_embeddings`, `position_embeddings`, `token_type_embeddings`) map
  one-to-one.
- The width is `embedding_size`, which may differ from the encoder's hidden size (ELECTRA-small,
  ALBERT-style factorisation). Projecting to the hidden size is NOT done here: ELECTRA's generator
  shares these embeddings with the discriminator but has its own projection, so the projection
  (`embeddings_project`) belongs to the encoder (models/layers/transformer.py).
- Mixed precision: tables stay float32 and are not autocast as a whole (that would cast the full
  vocab table every step); only the gathered rows are cast to the compute dtype. LayerNorm uses
  Keras' LayerNormalization, which normalises in float32 even under a bf16/fp16 policy.
- Ids must lie in [0, vocab_size): TF's gather errors on CPU but silently returns zeros on GPU
  (bert issue #82), so the model builders check the data manifest's maximum id up front.
"""
from __future__ import annotations

import tensorflow as tf

from textrain.models.layers.fused import Dropout, LayerNormalization

LAYER_NORM_EPS = 1e-12  # the originals' LayerNorm epsilon


def truncated_normal(stddev: float) -> tf.keras.initializers.Initializer:
    """The originals' `create_initializer`: truncated normal (at 2 stddev), mean 0."""
    return tf.keras.initializers.TruncatedNormal(stddev=stddev)


class TransformerEmbeddings(tf.keras.layers.Layer):
    """`[batch, length]` ids -> `[batch, length, embedding_size]` embeddings."""

    def __init__(self, vocab_size: int, embedding_size: int, max_position_embeddings: int = 512,
                 type_vocab_size: int = 2, initializer_range: float = 0.02, dropout_rate: float = 0.1,
                 layer_norm_eps: float = LAYER_NORM_EPS, name: str = "embeddings", **kwargs):
        # autocast=False: the tables are read by gather and cast row-wise (see module docstring).
        super().__init__(name=name, autocast=False, **kwargs)
        if vocab_size <= 0 or embedding_size <= 0:
            raise ValueError(f"vocab_size ({vocab_size}) and embedding_size ({embedding_size}) must be > 0")
        self.vocab_size = vocab_size
        self.embedding_size = embedding_size
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.initializer_range = initializer_range
        self.layer_norm = LayerNormalization(epsilon=layer_norm_eps, name="LayerNorm",
                                                             dtype=self.dtype_policy)
        self.dropout = Dropout(dropout_rate, dtype=self.dtype_policy)

    def build(self, input_shape=None) -> None:
        init = truncated_normal(self.initializer_range)
        self.word_embeddings = self.add_weight(
            name="word_embeddings", shape=(self.vocab_size, self.embedding_size), initializer=init)
        self.position_embeddings = self.add_weight(
            name="position_embeddings", shape=(self.max_position_embeddings, self.embedding_size),
            initializer=init)
        self.token_type_embeddings = None
        if self.type_vocab_size > 0:
            self.token_type_embeddings = self.add_weight(
                name="token_type_embeddings", shape=(self.type_vocab_size, self.embedding_size),
                initializer=init)
        self.layer_norm.build((None, None, self.embedding_size))
        self.built = True

    def call(self, input_ids: tf.Tensor, segment_ids: tf.Tensor | None = None,
             training: bool = False) -> tf.Tensor:
        length = input_ids.shape[1]
        if length is not None and length > self.max_position_embeddings:
            raise ValueError(f"sequence length {length} exceeds max_position_embeddings "
                             f"{self.max_position_embeddings}")
        x = tf.gather(self.word_embeddings, input_ids)
        positions = self.position_embeddings[: tf.shape(input_ids)[1]]
        x = x + positions[tf.newaxis]
        if self.token_type_embeddings is not None:
            if segment_ids is None:
                segment_ids = tf.zeros_like(input_ids)
            x = x + tf.gather(self.token_type_embeddings, segment_ids)
        x = self.layer_norm(x)
        x = self.dropout(x, training=training)
        return tf.cast(x, self.compute_dtype)

    @property
    def embedding_table(self) -> tf.Variable:
        return self.word_embeddings

    def attend(self, x: tf.Tensor) -> tf.Tensor:
        """Logits over the vocabulary: `x @ word_embeddings^T` (tied output layer), in x's dtype.

        `x` of any rank is flattened to `[rows, width]` for ONE 2-D matmul and reshaped back. A rank-3
        `x` times the rank-2 table is a broadcasting BatchMatMul, whose gradient for the table is a
        `[batch, vocab, width]` product summed over the batch: at BERT-base (batch 32, vocab 30522) that
        is a 3 GB temporary and ~4 s of a 2-layer step on 2 cores (profile, docs/HISTORY.md).
        Same products, same sums: the values do not change."""
        table = tf.cast(self.word_embeddings, x.dtype)
        if x.shape.rank == 2:
            return tf.matmul(x, table, transpose_b=True)
        shape = tf.shape(x)
        flat = tf.reshape(x, [-1, self.embedding_size])
        logits = tf.reshape(tf.matmul(flat, table, transpose_b=True),
                            tf.concat([shape[:-1], [self.vocab_size]], axis=0))
        logits.set_shape(x.shape[:-1].concatenate([self.vocab_size]))
        return logits

    def tf1_variable_map(self, scope: str) -> dict[str, tf.Variable]:
        """Original names under `scope` (e.g. `bert/embeddings`)."""
        names = {
            f"{scope}/word_embeddings": self.word_embeddings,
            f"{scope}/position_embeddings": self.position_embeddings,
            f"{scope}/LayerNorm/gamma": self.layer_norm.gamma,
            f"{scope}/LayerNorm/beta": self.layer_norm.beta,
        }
        if self.token_type_embeddings is not None:
            names[f"{scope}/token_type_embeddings"] = self.token_type_embeddings
        return names
