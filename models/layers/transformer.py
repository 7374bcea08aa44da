"""The post-LayerNorm Transformer block of the original BERT and an encoder stack reusable by
BERT and ELECTRA (discriminator and generator).

Decisions:
- Post-LN, exactly as BERT: `x = LN(x + Dropout(Attn(x)))`, `x = LN(x + Dropout(FFN(x)))`, with
  the activation only after the first FFN dense. Sub-layers are named after the TF1 scopes they map
  to, and each layer can list its own original names (`tf1_variable_map(scope)`), so a model's
  mapping is the concatenation of its parts' mappings under that model's prefixes.
- The encoder owns embeddings -> optional `embeddings_project` -> blocks, and takes an existing
  `TransformerEmbeddings` to share: ELECTRA's generator is a smaller encoder that reads the
  discriminator's embeddings (`electra/embeddings/...`) through its own projection
  (`generator/embeddings_project`). A projection exists exactly when embedding width != hidden.
- Hyper-parameters are explicit keyword arguments (not a config object) so this module does not
  depend on any model's config class; models/bert.py has `encoder_from_config`.
- The padding mask is expanded once per forward pass and shared by every block.
"""
from __future__ import annotations

import tensorflow as tf

from textrain.models.layers.activations import get_activation
from textrain.models.layers.attention import MultiHeadAttention
from textrain.models.layers.dense import Dense
from textrain.models.layers.embeddings import LAYER_NORM_EPS, TransformerEmbeddings, truncated_normal
from textrain.models.layers.fused import Dropout, LayerNormalization


def dense_variable_map(scope: str, layer: tf.keras.layers.Dense) -> dict[str, tf.Variable]:
    return {f"{scope}/kernel": layer.kernel, f"{scope}/bias": layer.bias}


def layer_norm_variable_map(scope: str, layer: tf.keras.layers.LayerNormalization) -> dict[str, tf.Variable]:
    return {f"{scope}/gamma": layer.gamma, f"{scope}/beta": layer.beta}


class TransformerBlock(tf.keras.layers.Layer):
    """One post-LN block: self attention + feed-forward, each with residual and LayerNorm."""

    def __init__(self, hidden_size: int, num_heads: int, intermediate_size: int,
                 hidden_act: str = "gelu", hidden_dropout: float = 0.1, attention_dropout: float = 0.1,
                 initializer_range: float = 0.02, layer_norm_eps: float = LAYER_NORM_EPS,
                 name: str = "layer", **kwargs):
        super().__init__(name=name, **kwargs)
        self.hidden_size = hidden_size
        init = truncated_normal(initializer_range)
        policy = self.dtype_policy
        self.attention = MultiHeadAttention(hidden_size, num_heads, attention_dropout, initializer_range,
                                            name="attention", dtype=policy)
        self.attention_dropout = Dropout(hidden_dropout, dtype=policy)
        self.attention_layer_norm = LayerNormalization(
            epsilon=layer_norm_eps, name="attention_LayerNorm", dtype=policy)
        self.intermediate = Dense(intermediate_size, activation=get_activation(hidden_act),
                                                  kernel_initializer=init, name="intermediate", dtype=policy)
        self.output_dense = Dense(hidden_size, kernel_initializer=init, name="output_dense",
                                                  dtype=policy)
        self.output_dropout = Dropout(hidden_dropout, dtype=policy)
        self.output_layer_norm = LayerNormalization(
            epsilon=layer_norm_eps, name="output_LayerNorm", dtype=policy)

    def build(self, input_shape=None) -> None:
        # Explicit shapes: otherwise Keras 3 builds by tracing `call` symbolically first (seconds).
        hidden = (None, None, self.hidden_size)
        self.attention.build(hidden)
        for layer in (self.attention_layer_norm, self.intermediate, self.output_layer_norm):
            layer.build(hidden)
        self.output_dense.build((None, None, self.intermediate.units))
        self.built = True

    def call(self, x: tf.Tensor, attention_mask: tf.Tensor | None = None, training: bool = False) -> tf.Tensor:
        attended = self.attention(x, attention_mask=attention_mask, training=training)
        # LN(x + Dropout(sub-layer)): one fused loop each way on a training step's tensors.
        x = self.attention_layer_norm.residual(x, attended, self.attention_dropout, training)
        ffn = self.output_dense(self.intermediate(x))
        return self.output_layer_norm.residual(x, ffn, self.output_dropout, training)

    def tf1_variable_map(self, scope: str) -> dict[str, tf.Variable]:
        """Original names under `scope`, e.g. `bert/encoder/layer_3`."""
        att = self.attention
        names: dict[str, tf.Variable] = {}
        for part in ("query", "key", "value"):
            names.update(dense_variable_map(f"{scope}/attention/self/{part}", getattr(att, part)))
        names.update(dense_variable_map(f"{scope}/attention/output/dense", att.output_dense))
        names.update(layer_norm_variable_map(f"{scope}/attention/output/LayerNorm", self.attention_layer_norm))
        names.update(dense_variable_map(f"{scope}/intermediate/dense", self.intermediate))
        names.update(dense_variable_map(f"{scope}/output/dense", self.output_dense))
        names.update(layer_norm_variable_map(f"{scope}/output/LayerNorm", self.output_layer_norm))
        return names


class TransformerEncoder(tf.keras.layers.Layer):
    """ids `[B, L]` -> hidden states `[B, L, hidden]` (embeddings, optional projection, N blocks)."""

    def __init__(self, vocab_size: int, hidden_size: int = 768, num_layers: int = 12, num_heads: int = 12,
                 intermediate_size: int = 3072, hidden_act: str = "gelu", hidden_dropout: float = 0.1,
                 attention_dropout: float = 0.1, max_position_embeddings: int = 512, type_vocab_size: int = 2,
                 initializer_range: float = 0.02, embedding_size: int | None = None,
                 embeddings: TransformerEmbeddings | None = None, layer_norm_eps: float = LAYER_NORM_EPS,
                 name: str = "encoder", **kwargs):
        super().__init__(name=name, **kwargs)
        policy = self.dtype_policy
        self.hidden_size = hidden_size
        if embeddings is None:
            embeddings = TransformerEmbeddings(
                vocab_size, embedding_size or hidden_size, max_position_embeddings, type_vocab_size,
                initializer_range, hidden_dropout, layer_norm_eps, name="embeddings", dtype=policy)
        elif embedding_size is not None and embedding_size != embeddings.embedding_size:
            raise ValueError(f"embedding_size {embedding_size} disagrees with the shared embeddings' width "
                             f"{embeddings.embedding_size}")
        self.embeddings = embeddings
        self.embeddings_project = None
        if embeddings.embedding_size != hidden_size:
            self.embeddings_project = Dense(
                hidden_size, kernel_initializer=truncated_normal(initializer_range),
                name="embeddings_project", dtype=policy)
        self.blocks = [
            TransformerBlock(hidden_size, num_heads, intermediate_size, hidden_act, hidden_dropout,
                             attention_dropout, initializer_range, layer_norm_eps, name=f"layer_{i}", dtype=policy)
            for i in range(num_layers)]
        # Keras 3 keeps a list attribute in its own TrackedList, which tf.train.Checkpoint does not see:
        # without named attributes the blocks' weights were missing from the model's object graph (a
        # checkpoint held them only through the optimizer's variable list). One attribute per block.
        for block in self.blocks:
            setattr(self, block.name, block)

    @property
    def embedding_table(self) -> tf.Variable:
        return self.embeddings.embedding_table

    def build(self, input_shape=None) -> None:
        if not self.embeddings.built:  # a shared one may be built already
            self.embeddings.build(input_shape)
        if self.embeddings_project is not None:
            self.embeddings_project.build((None, None, self.embeddings.embedding_size))
        for block in self.blocks:
            block.build((None, None, self.hidden_size))
        self.built = True

    def call(self, input_ids: tf.Tensor, input_mask: tf.Tensor | None = None,
             segment_ids: tf.Tensor | None = None, training: bool = False,
             output_all_layers: bool = False):
        """`input_mask`: `[B, L]` 1 = real token, 0 = padding (or a `[B, L, L]` attention mask).
        Returns the last layer's states, or the list of every block's output when
        `output_all_layers` (embeddings excluded)."""
        if input_ids.shape.rank != 2:
            raise ValueError(f"input_ids must be [batch, length], got shape {input_ids.shape}")
        x = self.embeddings(input_ids, segment_ids, training=training)
        if self.embeddings_project is not None:
            x = self.embeddings_project(x)
        mask = None if input_mask is None else tf.cast(input_mask, tf.bool)
        outputs = []
        for block in self.blocks:
            x = block(x, attention_mask=mask, training=training)
            outputs.append(x)
        return outputs if output_all_layers else x

    def tf1_variable_map(self, scope: str, embeddings_scope: str | None = None,
                         include_embeddings: bool = True) -> dict[str, tf.Variable]:
        """Original names: `{embeddings_scope}/...` (default `{scope}/embeddings`),
        `{scope}/embeddings_project/...`, `{scope}/encoder/layer_N/...`."""
        names: dict[str, tf.Variable] = {}
        if include_embeddings:
            names.update(self.embeddings.tf1_variable_map(embeddings_scope or f"{scope}/embeddings"))
        if self.embeddings_project is not None:
            names.update(dense_variable_map(f"{scope}/embeddings_project", self.embeddings_project))
        for i, block in enumerate(self.blocks):
            names.update(block.tf1_variable_map(f"{scope}/encoder/layer_{i}"))
        return names
