"""Greedy and beam search over a step function with a cache, batched, with fixed shapes.

`logits_fn(ids [N], i, cache) -> (logits [N, vocab], cache)` gives the next-token logits of N running
hypotheses at step `i` (0-based) from their last token, and the cache updated with that token (a nested
structure of tensors whose first dimension is N). Both searches return ids `[batch, (beam,) length]`
with 0 (padding) after the first EOS.

Decisions:
- tensor2tensor's beam search (`beam_search.py`), re-stated: each step takes the top 2*beam of
  beam*vocab extensions ranked by `log_prob / length_penalty`, with `length_penalty(len) =
  ((5 + len) / 6) ** alpha` (Wu et al. 2016; `len` counts the generated tokens, EOS included); the
  best `beam` of them that did not just emit EOS stay alive, those that did compete with the finished
  ones for the `beam` finished slots. It stops when no alive hypothesis can still beat the worst
  finished one (alive log-prob divided by the penalty of the longest length: log-probs only fall)
  or at `decode_length`. A batch entry with nothing finished returns its alive hypotheses (scored by
  their raw log-prob, as tensor2tensor does).
- Shapes are fixed: sequences are `[batch, beam, decode_length]` buffers written at step `i`, not
  tensors that grow, so one `tf.while_loop` serves every step and the same code compiles with XLA.
- "Minus infinity" is -1e7 as in tensor2tensor: a real -inf turns into NaN in `-inf * 0`.
"""
from __future__ import annotations

from typing import Any, Callable

import tensorflow as tf

NEG_INF = -1.0e7
EOS_ID = 1

LogitsFn = Callable[[tf.Tensor, tf.Tensor, Any], tuple[tf.Tensor, Any]]


def length_penalty(length, alpha: float) -> tf.Tensor:
    """tensor2tensor's (GNMT's) length penalty ((5 + length) / 6) ** alpha."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, tf.cast(alpha, tf.float32))


def expand_to_beam(tensor: tf.Tensor, beam_size: int) -> tf.Tensor:
    """`[B, ...]` -> `[B * beam, ...]`, each row repeated `beam` times (consecutively)."""
    return tf.repeat(tensor, beam_size, axis=0)


def _write(buffer: tf.Tensor, i: tf.Tensor, values: tf.Tensor) -> tf.Tensor:
    """Set position `i` of the last axis of a zero-at-`i` int buffer to `values`."""
    length = tf.shape(buffer)[-1]
    return buffer + tf.one_hot(i, length, dtype=buffer.dtype) * values[..., None]


def _after_eos_to_pad(ids: tf.Tensor, eos_id: int) -> tf.Tensor:
    """Zero every position after the first EOS (the EOS itself is kept)."""
    seen = tf.cumsum(tf.cast(tf.equal(ids, eos_id), tf.int32), axis=-1, exclusive=True)
    return tf.where(seen > 0, tf.zeros_like(ids), ids)


def greedy_search(logits_fn: LogitsFn, batch_size, decode_length, cache: Any,
                  eos_id: int = EOS_ID) -> tuple[tf.Tensor, tf.Tensor]:
    """Argmax decoding. Returns (ids `[B, decode_length]`, log-probs `[B]` of the chosen tokens up to EOS)."""
    ids = tf.zeros([batch_size, decode_length], tf.int32)
    last = tf.zeros([batch_size], tf.int32)
    done = tf.zeros([batch_size], tf.bool)
    score = tf.zeros([batch_size], tf.float32)

    def cond(i, ids, last, done, score, cache):
        return (i < decode_length) & tf.logical_not(tf.reduce_all(done))

    def body(i, ids, last, done, score, cache):
        logits, cache = logits_fn(last, i, cache)
        log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32))
        token = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
        token = tf.where(done, tf.zeros_like(token), token)
        picked = tf.gather(log_probs, token, batch_dims=1)
        score += tf.where(done, 0.0, picked)
        ids = _write(ids, i, token)
        done = done | tf.equal(token, eos_id)
        return i + 1, ids, token, done, score, cache

    _, ids, _, _, score, _ = tf.while_loop(cond, body, (tf.constant(0), ids, last, done, score, cache))
    return ids, score


def beam_search(logits_fn: LogitsFn, batch_size, beam_size: int, decode_length, vocab_size: int,
                alpha: float, cache: Any, eos_id: int = EOS_ID) -> tuple[tf.Tensor, tf.Tensor]:
    """Beam search (see the module docstring). `cache` is per sentence (`[B, ...]`); it is expanded to
    the beam here. Returns (ids `[B, beam, decode_length]`, scores `[B, beam]`), best first."""
    B, K, V, T = batch_size, beam_size, vocab_size, decode_length
    cache = tf.nest.map_structure(lambda t: expand_to_beam(t, K), cache)
    alive_seq = tf.zeros([B, K, T], tf.int32)
    alive_log_probs = tf.tile(tf.constant([[0.0] + [NEG_INF] * (K - 1)]), [B, 1])
    finished_seq = tf.zeros([B, K, T], tf.int32)
    finished_scores = tf.fill([B, K], NEG_INF)
    finished_flags = tf.zeros([B, K], tf.bool)
    last = tf.zeros([B * K], tf.int32)
    batch_offsets = tf.range(B)[:, None] * K  # beam b of sentence s is row s*K + b of the cache

    def gather(t, idx):
        return tf.gather(t, idx, batch_dims=1)

    def body(i, last, alive_seq, alive_log_probs, finished_seq, finished_scores, finished_flags, cache):
        logits, cache = logits_fn(last, i, cache)
        log_probs = tf.reshape(tf.nn.log_softmax(tf.cast(logits, tf.float32)), [B, K, V])
        log_probs += alive_log_probs[:, :, None]
        penalty = length_penalty(i + 1, alpha)
        flat_scores = tf.reshape(log_probs / penalty, [B, K * V])
        topk_scores, topk_index = tf.math.top_k(flat_scores, k=2 * K)
        topk_log_probs = topk_scores * penalty
        topk_beam, topk_token = topk_index // V, topk_index % V
        topk_seq = _write(gather(alive_seq, topk_beam), i, topk_token)  # [B, 2K, T]
        just_finished = tf.equal(topk_token, eos_id)

        # The best K that did not emit EOS stay alive (their cache rows follow them).
        _, keep = tf.math.top_k(topk_log_probs + tf.cast(just_finished, tf.float32) * NEG_INF, k=K)
        alive_seq = gather(topk_seq, keep)
        alive_log_probs = gather(topk_log_probs, keep)
        rows = tf.reshape(gather(topk_beam, keep) + batch_offsets, [-1])
        cache = tf.nest.map_structure(lambda t: tf.gather(t, rows), cache)
        last = tf.reshape(gather(topk_token, keep), [-1])

        # Those that emitted EOS compete with the finished ones.
        candidate_scores = topk_scores + (1.0 - tf.cast(just_finished, tf.float32)) * NEG_INF
        all_seq = tf.concat([finished_seq, topk_seq], axis=1)
        all_scores = tf.concat([finished_scores, candidate_scores], axis=1)
        all_flags = tf.concat([finished_flags, just_finished], axis=1)
        _, best = tf.math.top_k(all_scores, k=K)
        return (i + 1, last, alive_seq, alive_log_probs, gather(all_seq, best), gather(all_scores, best),
                gather(all_flags, best), cache)

    def cond(i, last, alive_seq, alive_log_probs, finished_seq, finished_scores, finished_flags, cache):
        best_alive = alive_log_probs[:, 0] / length_penalty(T, alpha)
        worst_finished = tf.reduce_min(finished_scores * tf.cast(finished_flags, tf.float32), axis=1)
        worst_finished += (1.0 - tf.cast(tf.reduce_any(finished_flags, axis=1), tf.float32)) * NEG_INF
        bound_met = tf.reduce_all(worst_finished > best_alive)
        return (i < T) & tf.logical_not(bound_met)

    state = (tf.constant(0), last, alive_seq, alive_log_probs, finished_seq, finished_scores, finished_flags,
             cache)
    _, _, alive_seq, alive_log_probs, finished_seq, finished_scores, finished_flags, _ = tf.while_loop(
        cond, body, state)
    any_finished = tf.reduce_any(finished_flags, axis=1)
    seqs = tf.where(any_finished[:, None, None], finished_seq, alive_seq)
    scores = tf.where(any_finished[:, None], finished_scores, alive_log_probs)
    return _after_eos_to_pad(seqs, eos_id), scores
