"""fp16 dynamic loss scaling for the one loop (trainers/core.py)."""
from __future__ import annotations

import tensorflow as tf


class DynamicLossScale(tf.Module):
    """fp16 loss scale: x2 after `period` finite steps, /2 (not below 1) on a non-finite gradient."""

    def __init__(self, initial: float = 2.0 ** 15, period: int = 2000):
        super().__init__()
        self.scale = tf.Variable(initial, trainable=False, dtype=tf.float32)
        self.good_steps = tf.Variable(0, trainable=False, dtype=tf.int64)
        self.period = period

    def value(self) -> tf.Tensor:
        return tf.identity(self.scale)

    def update(self, finite: tf.Tensor):
        def apply(strategy, finite):
            # `finite` may be per-replica: each device computes the (identical) new values from its own copy.
            def new_scale(scale, good, ok):
                grow = ok & (good + 1 >= self.period)
                return scale.assign(tf.where(ok, tf.where(grow, scale * 2.0, scale), tf.maximum(scale / 2.0, 1.0)))

            def new_good(good, scale, ok):
                grow = ok & (good + 1 >= self.period)
                return good.assign(tf.where(ok & ~grow, good + 1, tf.constant(0, tf.int64)))

            # good_steps first is read by new_scale, so compute the scale from the old count before updating it.
            old_good = tf.identity(self.good_steps)
            done = strategy.extended.update(self.scale, new_scale, args=(old_good, finite), group=True)
            with tf.control_dependencies([done]):
                return strategy.extended.update(self.good_steps, new_good, args=(self.scale, finite), group=True)

        return tf.distribute.get_replica_context().merge_call(apply, args=(finite,))
