"""A --usr_dir package for tests/test_resume_examples.py: usr_toy's problem, and its model with a test hook that
logs which training examples each replica consumed at each of its steps (not part of any user path).

`TRACE_EXAMPLES_DIR=<dir>`: every training step of every replica appends one line to
`<dir>/worker_<task>.log`: `replica counter hash hash ...`, where `counter` is the replica's own step count
(per-replica state, so it is checkpointed with the run and restored on resume, or starts again from 0 when the
run resumes on another topology) and each hash identifies one example of the replica's batch (its features)."""
import os

import tensorflow as tf
from usr_toy import UsrToyModel  # noqa: F401  (also registers usr_toy_problem)

from textrain.framework.registry import register_model


@register_model
class UsrTracedModel(UsrToyModel):
    def initial_state(self, batch_size):
        return {"count": tf.zeros([], tf.int64)}

    def step_output(self, f, state, training):
        out = super().step_output(f, state, training)
        count = state["count"]
        trace = os.environ.get("TRACE_EXAMPLES_DIR")
        if training:
            count = count + 1
            if trace:
                task = os.environ.get("TRACE_TASK", "0")
                ctx = tf.distribute.get_replica_context()
                replica = ctx.replica_id_in_sync_group if ctx is not None else 0
                text = tf.strings.reduce_join(tf.strings.as_string(f["x"], precision=6), axis=-1, separator=",")
                ids = tf.strings.to_hash_bucket_fast(text, 2**62)
                tf.print(replica, count, ids, summarize=-1,
                         output_stream=f"file://{os.path.join(trace, f'worker_{task}.log')}")
        return out._replace(state={"count": count})
