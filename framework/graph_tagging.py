"""A tagger's raw-text serving input in the graph: sentences -> whitespace words -> WordPiece windows.

    windows = word_windows(tokenizer, tf.constant(["Emma met Mr. Knightley ."]), doc_stride=64)
    # windows.features: {input_ids, input_mask, segment_ids} int32 [num_windows, width], BERT's single-text
    #                   layout ([CLS] window [SEP], right padding)
    # windows.pick:     int32 [num_words, 2], (window row, column) of each word's scoring position
    # windows.words:    the words, tf.RaggedTensor [B, (words)]

The same windows as problems/tagging.py writes into the records, so the served tags equal the trainer's
predictions: each word tokenised alone (`GraphWordpieceTokenizer.encode`; a word with no sub-token gets
[UNK]), windows of `max_seq_length - 2` sub-tokens starting every `doc_stride` (problems/squad.doc_windows),
and each word read from the window where its first sub-token has the most context (min of left and right
context + 0.01 x window length, the first such window on a tie: problems/squad.is_max_context).

Words are split at ASCII whitespace (`tf.strings.split`); the batch's windows are one model call.
"""
from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from textrain.framework.graph_wordpiece import GraphWordpieceTokenizer


class WordWindows(NamedTuple):
    features: dict[str, tf.Tensor]
    pick: tf.Tensor
    words: tf.RaggedTensor


def _word_pieces(tokenizer: GraphWordpieceTokenizer, words: tf.Tensor) -> tf.RaggedTensor:
    """Sub-token ids of each word [N] -> ragged [N, (ids)]; an empty row becomes [UNK]."""
    pieces = tokenizer.encode(words)
    empty = tf.equal(pieces.row_lengths(), 0)
    unk = tf.RaggedTensor.from_row_lengths(
        tf.fill([tf.reduce_sum(tf.cast(empty, tf.int64))], tf.cast(tokenizer.unk_id, tf.int64)),
        tf.cast(empty, tf.int64))
    return tf.concat([pieces, unk], axis=1)


def word_windows(tokenizer: GraphWordpieceTokenizer, text: tf.Tensor, doc_stride: int) -> WordWindows:
    """The windows and per-word scoring positions of a batch of sentences (see the module docstring)."""
    max_tokens = tokenizer.max_seq_length - 2
    words = tf.strings.split(text).with_row_splits_dtype(tf.int64)                     # [B, (W)]
    pieces = _word_pieces(tokenizer, words.flat_values)                                # [N, (P)]
    tokens = words.with_flat_values(pieces).merge_dims(1, 2)                           # [B, (T)]
    num_tokens = tokens.row_lengths()                                                  # [B]
    stride = tf.constant(doc_stride, tf.int64)
    extra = tf.maximum(num_tokens - max_tokens, 0)
    num_windows = 1 + (extra + stride - 1) // stride                                   # [B]
    # Window r: sentence b_r, k_r-th of it, start k * stride, length min(max_tokens, T - start).
    window_sentence = tf.repeat(tf.range(tf.size(num_windows, out_type=tf.int64)), num_windows)
    window_k = tf.ragged.range(num_windows).flat_values
    start = window_k * stride
    length = tf.minimum(tf.cast(max_tokens, tf.int64), tf.gather(num_tokens, window_sentence) - start)
    flat_start = tf.gather(tokens.row_starts(), window_sentence) + start
    ids = tf.gather(tokens.flat_values, tf.ragged.range(flat_start, flat_start + length))  # [R, (len)]
    rows = tf.shape(ids.row_lengths(), out_type=tf.int64)[0]
    cls = tf.fill([rows, 1], tf.cast(tokenizer.cls_id, tf.int64))
    sep = tf.fill([rows, 1], tf.cast(tokenizer.sep_id, tf.int64))
    laid = tf.concat([tf.RaggedTensor.from_tensor(cls), ids, tf.RaggedTensor.from_tensor(sep)], axis=1)
    input_ids = laid.to_tensor()
    input_mask = tf.ones_like(laid).to_tensor()
    features = {"input_ids": tf.cast(input_ids, tf.int32), "input_mask": tf.cast(input_mask, tf.int32),
                "segment_ids": tf.zeros_like(input_ids, tf.int32)}
    # Each word's first sub-token position p within its sentence, and its best window.
    word_sentence = words.value_rowids()                                               # [N]
    piece_counts = pieces.row_lengths()
    within = tf.cumsum(piece_counts, exclusive=True) - tf.gather(
        tf.cumsum(piece_counts, exclusive=True), tf.gather(words.row_starts(), word_sentence))
    p = within[:, None]                                                                # [N, 1]
    w_start, w_end = start[None, :], (start + length - 1)[None, :]                     # [1, R]
    score = tf.cast(tf.minimum(p - w_start, w_end - p), tf.float64) + 0.01 * tf.cast(length, tf.float64)[None, :]
    score -= 1e-6 * tf.cast(window_k, tf.float64)[None, :]  # the first window of a tie (argmax's order is not promised)
    inside = (tf.equal(word_sentence[:, None], window_sentence[None, :]) & (p >= w_start) & (p <= w_end))
    best = tf.argmax(tf.where(inside, score, tf.constant(-1e18, tf.float64)), axis=1)  # [N]
    column = within - tf.gather(start, best) + 1                                       # +1: the [CLS]
    pick = tf.cast(tf.stack([best, column], axis=1), tf.int32)
    return WordWindows(features, pick, words)
