"""textrain-avg-checkpoints: average the model weights of the last N checkpoints (tensor2tensor's t2t-avg-all).

    textrain-avg-checkpoints --model_dir=runs/t --num_last_checkpoints=5 --output_dir=runs/t/avg
    textrain-decode ... --checkpoint_path=runs/t/avg

Decisions:
- Works on the checkpoint files alone, like t2t-avg-all: no model is built, so no model flags are needed.
  The checkpoints are those the trainer's CheckpointManager lists in `{model_dir}/checkpoint` (oldest
  to newest); the last N are read.
- Every floating-point variable of the model is averaged: those the checkpoint's object graph reaches
  from its `model` root (found by walking the graph, not by key prefix: a variable is stored under its
  shortest path, which may run through the optimizer rather than `model/`) is averaged in float64 and stored in its own dtype; everything else (step, optimizer slots, the
  checkpoint's object graph) is copied from the newest checkpoint, so the output is a complete
  checkpoint that textrain-decode (and tf.train.Checkpoint) reads like any other. It is for decoding:
  resuming training from it would pair averaged weights with the newest optimizer state.
  Input-pipeline iterator state is not copied (it cannot be read back as a plain tensor).
- The checkpoints must hold the same variables with the same shapes; otherwise the error names the
  first that differs. Fewer checkpoints than asked is an error naming what is there (a silently smaller
  average would be a different model than the one asked for).
- Output: `{output_dir}/ckpt-{step of the newest}` plus a `checkpoint` state file, written under a
  temporary prefix and renamed, so an interrupted run leaves no half checkpoint.
"""
from __future__ import annotations

import os
import sys
import uuid

from absl import flags

FLAGS = flags.FLAGS

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"


def last_checkpoints(model_dir: str, n: int) -> list[str]:
    import tensorflow as tf

    from textrain.framework.errors import UserError

    state = tf.train.get_checkpoint_state(model_dir)
    paths = list(state.all_model_checkpoint_paths) if state else []
    paths = [p if os.path.isabs(p) or "://" in p else os.path.join(model_dir, p) for p in paths]
    if n < 1:
        raise UserError(f"--num_last_checkpoints must be >= 1, got {n}")
    if len(paths) < n:
        raise UserError(f"--model_dir={model_dir} has {len(paths)} checkpoint(s) "
                        f"({', '.join(os.path.basename(p) for p in paths) or 'none'}); "
                        f"--num_last_checkpoints={n} asks for more")
    return paths[-n:]


def model_variable_keys(reader) -> set[str]:
    """Checkpoint keys of every variable reachable from the root's `model` child in the object graph."""
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor(OBJECT_GRAPH_KEY))
    start = [c.node_id for c in graph.nodes[0].children if c.local_name == "model"]
    seen, todo, keys = set(start), list(start), set()
    while todo:
        node = graph.nodes[todo.pop()]
        keys.update(a.checkpoint_key for a in node.attributes if a.name == "VARIABLE_VALUE")
        for child in node.children:
            if child.node_id not in seen:
                seen.add(child.node_id)
                todo.append(child.node_id)
    return keys


def average_checkpoints(paths: list[str], output_dir: str) -> str:
    """Write the average of `paths` (model weights) to `output_dir`; returns the new checkpoint prefix."""
    import numpy as np
    import tensorflow as tf

    from textrain.framework.errors import UserError

    newest = tf.train.load_checkpoint(paths[-1])
    dtypes = newest.get_variable_to_dtype_map()
    shapes = newest.get_variable_to_shape_map()
    model_keys = model_variable_keys(newest)
    sums = {k: newest.get_tensor(k).astype(np.float64) for k, d in dtypes.items()
            if k in model_keys and d.is_floating}
    if not sums:
        raise UserError(f"{paths[-1]} holds no model weights (no variables under its `model` object)")
    for path in paths[:-1]:
        reader = tf.train.load_checkpoint(path)
        other = reader.get_variable_to_shape_map()
        for key in sums:
            if other.get(key) != shapes[key]:
                raise UserError(f"{path} and {paths[-1]} differ at {key}: shape {other.get(key)} vs "
                                f"{shapes[key]} (checkpoints of different models?)")
            sums[key] += reader.get_tensor(key)
    names, tensors = [], []
    for key in sorted(dtypes):
        if key in sums:
            value = (sums[key] / len(paths)).astype(dtypes[key].as_numpy_dtype)
        elif dtypes[key] == tf.variant:
            continue
        else:
            try:
                value = newest.get_tensor(key)
            except (tf.errors.OpError, ValueError, TypeError):
                continue  # e.g. iterator state: not a plain tensor
        names.append(key)
        tensors.append(tf.constant(value, dtype=dtypes[key]))
    step = int(paths[-1].rsplit("-", 1)[-1]) if paths[-1].rsplit("-", 1)[-1].isdigit() else 0
    tf.io.gfile.makedirs(output_dir)
    final = os.path.join(output_dir, f"ckpt-{step}")
    tmp = os.path.join(output_dir, f".incomplete-{uuid.uuid4().hex[:8]}")
    try:
        tf.raw_ops.SaveV2(prefix=tmp, tensor_names=names, shape_and_slices=[""] * len(names), tensors=tensors)
        for suffix in (".data-00000-of-00001", ".index"):  # the index last: it makes the checkpoint exist
            tf.io.gfile.rename(tmp + suffix, final + suffix, overwrite=True)
    finally:
        for leftover in tf.io.gfile.glob(tmp + "*"):
            tf.io.gfile.remove(leftover)
    tf.compat.v1.train.update_checkpoint_state(output_dir, final, all_model_checkpoint_paths=[final])
    return final


def main(argv: list[str]) -> None:
    del argv
    from absl import app

    missing = [f"--{n}" for n in ("model_dir", "output_dir") if not FLAGS[n].value]
    if missing:
        raise app.UsageError(f"missing required flag(s): {', '.join(missing)}")
    from textrain.framework.errors import UserError

    if os.path.abspath(FLAGS.output_dir) == os.path.abspath(FLAGS.model_dir):
        raise UserError("--output_dir must differ from --model_dir (the average would join the checkpoints "
                        "it averages, and the trainer would resume from it)")
    paths = last_checkpoints(FLAGS.model_dir, FLAGS.num_last_checkpoints)
    final = average_checkpoints(paths, FLAGS.output_dir)
    print(f"averaged {len(paths)} checkpoints ({', '.join(os.path.basename(p) for p in paths)}) into {final}",
          flush=True)


def define_flags() -> None:
    if "model_dir" not in FLAGS:
        flags.DEFINE_string("model_dir", None, "The training run's checkpoint directory.")
    flags.DEFINE_integer("num_last_checkpoints", 5, "Average this many of the newest checkpoints.")
    flags.DEFINE_string("output_dir", None, "Where the averaged checkpoint goes (not --model_dir).")


def run() -> None:
    """Console entry point `textrain-avg-checkpoints`."""
    from textrain.framework import lazy_tf

    lazy_tf.quiet_start(sys.argv)
    define_flags()
    from textrain.framework import cli

    cli.run_main("textrain-avg-checkpoints", main)


if __name__ == "__main__":
    run()
