"""XLNet's parse-time permutation: the original's `_local_perm` and `parser`, as tf ops on one record.

A record of problems/xlnet_pretrain.py (`input`, `target`, `seg_id`, `is_masked`, `label`) becomes the
model's features: `perm_mask`, `target_mapping`, `target`, `target_mask`, `input_k`, `input_q`,
`seg_id`, `label` (ints as int32, floats float32).

Decisions:
- Parse-time permutation: each record's factorisation order is drawn with stateless ops seeded by
  (seed, a hash of the record), so reading is deterministic (and an epoch sees the same orders again).
  With `DataParams.seed` None, `dataset()` draws the seed once (fresh each call, like the unseeded
  original) instead of using a stateful RandomShuffle: a stateful op in the map makes the input
  iterator unserialisable, and the trainer checkpoints it (`RandomShuffle is stateful.
  [Op:SerializeIterator]` at the first save of a seedless run). The trainers record the seed they
  use in the model_dir (trainers/launch.py `data_seed`), so a resumed run continues the same stream.
"""
from __future__ import annotations

import random

from textrain.framework.encoders import XLNET_SPECIAL_IDS
from textrain.framework.lazy_tf import tf

SEP_ID = XLNET_SPECIAL_IDS["<sep>"]
CLS_ID = XLNET_SPECIAL_IDS["<cls>"]


def draw_seed() -> int:
    """A fresh reading seed (OS entropy) for an unseeded pipeline."""
    return random.SystemRandom().randrange(2**31)


def example_seed(example: dict, seed: int) -> tf.Tensor:
    """A stateless seed [2] from the reading seed and a hash of the record's content."""
    content = tf.io.serialize_tensor(tf.stack([example["input"], example["is_masked"], example["seg_id"]]))
    h = tf.strings.to_hash_bucket_fast(content, 2**62)
    return tf.stack([tf.constant(int(seed) % 2**62, tf.int64), h])


def _shuffled_block_index(seq_len: int, perm_size: int, seed: tf.Tensor | None) -> tf.Tensor:
    """Positions in factorisation order: one random order of perm_size, applied to every block."""
    index = tf.transpose(tf.reshape(tf.range(seq_len, dtype=tf.int64), [-1, perm_size]))
    if seed is None:
        index = tf.random.shuffle(index)
    else:
        index = tf.gather(index, tf.argsort(tf.random.stateless_uniform([perm_size], seed)))
    return tf.reshape(tf.transpose(index), [-1])


def local_perm(inputs: tf.Tensor, targets: tf.Tensor, is_masked: tf.Tensor, perm_size: int,
               seq_len: int, seed: tf.Tensor | None = None) -> tuple[tf.Tensor, ...]:
    """(perm_mask [L, L], new_targets, target_mask, input_k, input_q), as the original.

    perm_mask[i, j] = 1: i may not attend to j. Unmasked ordinary tokens get order -1 (everyone sees
    them, they see no masked token); masked tokens and <sep>/<cls> follow the sampled order, and a
    masked token does not see itself in the query stream. Targets become the current token.
    """
    index = _shuffled_block_index(seq_len, perm_size, seed)
    non_func = tf.logical_not(tf.logical_or(tf.equal(inputs, SEP_ID), tf.equal(inputs, CLS_ID)))
    non_mask = tf.logical_and(tf.logical_not(is_masked), non_func)
    masked_or_func = tf.logical_not(non_mask)
    rev_index = tf.where(non_mask, -tf.ones([seq_len], tf.int64), index)
    target_tokens = tf.logical_and(masked_or_func, non_func)
    target_mask = tf.cast(target_tokens, tf.float32)
    self_rev_index = tf.where(target_tokens, rev_index, rev_index + 1)
    perm_mask = tf.logical_and(self_rev_index[:, None] <= rev_index[None, :], masked_or_func[None, :])
    new_targets = tf.concat([inputs[0:1], targets[:-1]], axis=0)
    return tf.cast(perm_mask, tf.float32), new_targets, target_mask, inputs, target_mask


def permutation_features(example: dict, seq_len: int, reuse_len: int, perm_size: int, num_predict: int,
                         seed: tf.Tensor | None = None) -> dict:
    """The original parser's output from one parsed record (ints as int32, floats float32)."""
    inputs = example["input"]
    target = example["target"]
    is_masked = tf.cast(example["is_masked"], tf.bool)
    non_reuse = seq_len - reuse_len
    seeds = [None, None] if seed is None else tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    pm0, t0, tm0, k0, q0 = local_perm(inputs[:reuse_len], target[:reuse_len], is_masked[:reuse_len],
                                      perm_size, reuse_len, seeds[0])
    pm1, t1, tm1, k1, q1 = local_perm(inputs[reuse_len:], target[reuse_len:], is_masked[reuse_len:],
                                      perm_size, non_reuse, seeds[1])
    # The reuse part never sees the rest; the rest sees all of the reuse part.
    perm_mask = tf.concat([tf.concat([pm0, tf.ones([reuse_len, non_reuse])], axis=1),
                           tf.concat([tf.zeros([non_reuse, reuse_len]), pm1], axis=1)], axis=0)
    target = tf.concat([t0, t1], axis=0)
    target_mask = tf.concat([tm0, tm1], axis=0)
    bool_target_mask = tf.cast(target_mask, tf.bool)
    indices = tf.boolean_mask(tf.range(seq_len, dtype=tf.int64), bool_target_mask)
    actual = tf.shape(indices)[0]
    pad = num_predict - actual  # <sep>/<cls> that were masked are not predicted
    target_mapping = tf.concat([tf.one_hot(indices, seq_len, dtype=tf.float32),
                                tf.zeros([pad, seq_len], tf.float32)], axis=0)
    targets = tf.concat([tf.boolean_mask(target, bool_target_mask), tf.zeros([pad], target.dtype)], axis=0)
    target_mask_out = tf.concat([tf.ones([actual], tf.float32), tf.zeros([pad], tf.float32)], axis=0)
    return {
        "perm_mask": tf.reshape(perm_mask, [seq_len, seq_len]),
        "target_mapping": tf.reshape(target_mapping, [num_predict, seq_len]),
        "target": tf.cast(tf.reshape(targets, [num_predict]), tf.int32),
        "target_mask": tf.reshape(target_mask_out, [num_predict]),
        "input_k": tf.cast(tf.reshape(tf.concat([k0, k1], 0), [seq_len]), tf.int32),
        "input_q": tf.reshape(tf.concat([q0, q1], 0), [seq_len]),
        "seg_id": tf.cast(example["seg_id"], tf.int32),
        "label": tf.cast(example["label"], tf.int32),
    }
