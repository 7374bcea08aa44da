"""Checks around a trainer's checkpoints: the model_dir lock, stale temporary folders, and whether a
checkpoint fits the model before anything is restored.

Called from trainers/core.py (`Trainer`), so every entry point built on it gets them.

Decisions:
- A textrain (object-based) checkpoint stores each variable once, under its shortest path in the object
  graph, which for most of a Keras 3 model's variables runs through the optimizer's variable list, not
  the model (Keras' own list tracking is invisible to TF's). So variables are matched by their Keras
  path (`bert_pretrainer/bert/encoder/layer_0/...`, recorded as each node's full name in the
  `_CHECKPOINTABLE_OBJECT_GRAPH` proto) with the model's own name dropped, so a fine-tuning model matches
  its pretrainer. A model variable absent from the checkpoint is missing, a checkpoint model variable
  absent from the model is unexpected, a pair of different shapes is mis-shaped; any of these (outside
  the allow-lists) is a CheckpointMismatchError listing them all, raised before any value is assigned
  (so no partial restore and none of TF's warnings about unused values). Initialisation then assigns
  by path (`load_init_checkpoint`).
- Allow-lists (regexes on the path without the model's name): a pretrainer's heads may stay unused when a
  fine-tuning model starts from it (`DEFAULT_ALLOW_UNEXPECTED`), and a fine-tuning model's new head is
  expected to be missing from a pretraining checkpoint (`DEFAULT_ALLOW_MISSING`). Owners of new models
  extend these.
- `--model_dir` holding a checkpoint of another model is refused the same way, saying that the
  directory belongs to a different model and naming the first mismatching variables.
- A `ckpt-N_temp*` folder is what a save killed half-way leaves; the chief removes them at start
  (under the model_dir lock, so no live save is touched).
"""
from __future__ import annotations

import collections
import os
import re
from typing import Any, Iterable

import tensorflow as tf
from absl import logging

from textrain.framework import locks
from textrain.framework.errors import UserError
from textrain.models.checkpoints import CheckpointMismatchError, backing_variable

# Paths below model/ of a textrain pretrainer that a fine-tuning model may leave unused.
DEFAULT_ALLOW_UNEXPECTED = (r"^predictions/", r"^seq_relationship/", r"^generator", r"discriminator_predictions/",
                            r"lm_loss/", r"seed_generator")
# Paths below model/ of a fine-tuning model's new head, absent from a pretraining checkpoint.
DEFAULT_ALLOW_MISSING = (r"^classifier/", r"^qa_", r"^head/", r"_head/", r"^logits/", r"^answer_class/",
                         r"seed_generator")
_MAX_LISTED = 20


# ----------------------------------------------------------------------------------- model_dir
def prepare_model_dir(model_dir: str, is_chief: bool, program: str = "textrain trainer") -> locks.DirLock | None:
    """The chief takes the model_dir lock (a second trainer on it stops at once, naming the holder)
    and removes the temporary folders of interrupted saves. Other workers share the chief's directory."""
    if not is_chief:
        return None
    lock = locks.acquire_dir_lock(model_dir, program, ".trainer.lock")
    for path in sorted(tf.io.gfile.glob(os.path.join(model_dir, "ckpt-*_temp*"))):
        logging.warning("removing %s, left by a checkpoint save that was interrupted", path)
        if tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)
        else:
            tf.io.gfile.remove(path)
    return lock


# ------------------------------------------------------------------------------------ names
def _clean(name: str) -> str:
    return name[:-2] if name.endswith(":0") else name


def _common_root(names: Iterable[str]) -> str | None:
    """The first path component shared by all `names` (the model's own name when its layers were built
    inside its call), else None."""
    firsts = {n.split("/", 1)[0] if "/" in n else None for n in names}
    return firsts.pop() if len(firsts) == 1 else None


def _strip(name: str, root: str | None) -> str:
    return name[len(root) + 1:] if root and name.startswith(root + "/") else name


_NOT_WEIGHTS = re.compile(r"seed_generator")  # dropout RNG state: per process, named by a global counter


def model_variables(model: tf.Module) -> dict[str, Any]:
    """Path (without the model's own name) -> variable, for every variable of the model but RNG state."""
    named = {_clean(getattr(v, "path", None) or v.name): v for v in model.variables}
    named = {n: v for n, v in named.items() if not _NOT_WEIGHTS.search(n)}
    root = _common_root(named)
    return {_strip(n, root): v for n, v in named.items()}


def checkpoint_model_variables(path: str, prefix: str = "model") -> dict[str, tuple[str, tuple[int, ...]]]:
    """Path (without the model's own name) -> (checkpoint key, shape), for every variable of the
    checkpoint's model.

    Each variable's node in the checkpoint's object graph records its full name (the Keras path). When
    the variables reachable from the root's `prefix` child share a first component (the model's name),
    every variable node whose full name starts with it belongs to the model, wherever the graph stored
    it (the optimizer's list of variables is often the shortest path, so that is where most of them
    live); otherwise the reachable ones are the model's."""
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    reader = tf.train.load_checkpoint(path)
    shapes = reader.get_variable_to_shape_map()
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    nodes = graph.nodes

    def variable_attr(node_id: int):
        return next((a for a in nodes[node_id].attributes if a.name == "VARIABLE_VALUE"), None)

    start = [c.node_id for c in nodes[0].children if c.local_name == prefix]
    reachable, seen, queue = {}, set(start), collections.deque(start)
    while queue:
        node_id = queue.popleft()
        attr = variable_attr(node_id)
        if attr is not None:
            reachable[_clean(attr.full_name)] = attr.checkpoint_key
        for child in nodes[node_id].children:
            if child.node_id not in seen:
                seen.add(child.node_id)
                queue.append(child.node_id)
    reachable = {n: k for n, k in reachable.items() if not _NOT_WEIGHTS.search(n)}
    root = _common_root(reachable)
    if root:
        for node_id in range(len(nodes)):
            attr = variable_attr(node_id)
            name = _clean(attr.full_name) if attr is not None else ""
            if name.startswith(root + "/") and not _NOT_WEIGHTS.search(name):
                reachable[name] = attr.checkpoint_key
    return {_strip(n, root): (k, tuple(shapes.get(k, ()))) for n, k in reachable.items()}


def compare(model: tf.Module, path: str, allow_unexpected: Iterable[str] = (),
            allow_missing: Iterable[str] = ()) -> tuple[list[str], list[str], list[str]]:
    """(missing, unexpected, mis-shaped) between a textrain checkpoint's model and `model`."""
    ckpt = checkpoint_model_variables(path)
    mine = model_variables(model)
    unexpected_ok = [re.compile(p) for p in allow_unexpected]
    missing_ok = [re.compile(p) for p in allow_missing]
    missing = [f"{n} {list(backing_variable(v).shape)}" for n, v in mine.items()
               if n not in ckpt and not any(r.search(n) for r in missing_ok)]
    unexpected = [f"{n} {list(shape)}" for n, (_, shape) in ckpt.items()
                  if n not in mine and not any(r.search(n) for r in unexpected_ok)]
    mis_shaped = [f"{n}: checkpoint {list(ckpt[n][1])} vs model {list(backing_variable(v).shape)}"
                  for n, v in mine.items() if n in ckpt and ckpt[n][1] != tuple(backing_variable(v).shape)]
    return sorted(missing), sorted(unexpected), sorted(mis_shaped)


def _listing(title: str, names: list[str]) -> str:
    shown = ", ".join(names[:_MAX_LISTED]) + (f", ... ({len(names) - _MAX_LISTED} more)" if len(names) > _MAX_LISTED else "")
    return f"{title} ({len(names)}): {shown}"


def _parts(missing, unexpected, mis_shaped) -> list[str]:
    return [_listing(t, n) for t, n in (("missing from the checkpoint", missing),
                                        ("in the checkpoint but not in the model", unexpected),
                                        ("shape mismatch", mis_shaped)) if n]


# ------------------------------------------------------------------------------ the two checks
def resolve_checkpoint(path: str, flag: str = "--init_checkpoint") -> str:
    """A checkpoint prefix from a prefix or a directory; a missing one is an error naming the path."""
    if tf.io.gfile.isdir(path):
        latest = tf.train.latest_checkpoint(path) or _newest_prefix(path)
        if not latest:
            raise UserError(f"{flag}={path} is a directory without a checkpoint in it (no 'checkpoint' "
                            f"file or ckpt-N.index); pass a checkpoint prefix such as {path}/ckpt-1000")
        return latest
    if not tf.io.gfile.exists(path + ".index") and not tf.io.gfile.exists(path):
        parent = os.path.dirname(path) or "."
        hint = ""
        if tf.io.gfile.isdir(parent):
            found = sorted(p[:-len(".index")] for p in tf.io.gfile.glob(os.path.join(parent, "*.index")))
            hint = f"; checkpoints in {parent}: {', '.join(found[:5])}" if found else f"; {parent} holds no checkpoint"
        raise UserError(f"{flag}={path}: no such checkpoint (no {path}.index){hint}")
    return path


def _newest_prefix(directory: str) -> str | None:
    """The highest-numbered ckpt-N of a directory without a `checkpoint` state file (a best/ written before
    best/ had one, or checkpoints copied without it)."""
    numbered = []
    for index in tf.io.gfile.glob(os.path.join(directory, "ckpt-*.index")):
        number = index[:-len(".index")].rsplit("-", 1)[-1]
        if number.isdigit():
            numbered.append((int(number), index[:-len(".index")]))
    return max(numbered)[1] if numbered else None


def is_textrain_checkpoint(path: str) -> bool:
    return "_CHECKPOINTABLE_OBJECT_GRAPH" in dict(tf.train.list_variables(path))


def load_init_checkpoint(path: str, model: tf.Module, allow_unexpected: Iterable[str] = (),
                         allow_missing: Iterable[str] = DEFAULT_ALLOW_MISSING) -> list[str]:
    """Initialise `model` from a textrain checkpoint, by variable path; returns the paths loaded.

    Every variable must be accounted for (see the module docstring) or nothing is assigned and a
    CheckpointMismatchError lists every missing, unexpected and mis-shaped variable. (A model-only
    `tf.train.Checkpoint(model=...).read()` would restore only the variables whose shortest path in the
    saved graph runs through the model, silently leaving the rest at their initial values.)"""
    paths = [getattr(v, "path", None) or v.name for v in model.variables if not _NOT_WEIGHTS.search(
        getattr(v, "path", None) or v.name)]
    if len(set(paths)) != len(paths):
        return _load_by_object_graph(path, model)
    missing, unexpected, mis_shaped = compare(model, path, list(allow_unexpected) + list(DEFAULT_ALLOW_UNEXPECTED),
                                              allow_missing)
    if missing or unexpected or mis_shaped:
        raise CheckpointMismatchError(
            f"--init_checkpoint={path} does not fit the model: " + "; ".join(_parts(missing, unexpected, mis_shaped))
            + ". Use a checkpoint of the same architecture (layers, sizes, vocab) or change the model flags")
    ckpt = checkpoint_model_variables(path)
    reader = tf.train.load_checkpoint(path)
    loaded = []
    for name, var in model_variables(model).items():
        if name in ckpt:
            target = backing_variable(var)
            target.assign(tf.cast(reader.get_tensor(ckpt[name][0]), target.dtype))
            loaded.append(name)
    return loaded


def _load_by_object_graph(path: str, model: tf.Module) -> list[str]:
    """Where two of the model's variables share a Keras path (XLNet's LayerNorms, created outside their
    parent's name scope, are all `LayerNorm/gamma`), a path cannot say which is which: restore through the
    checkpoint's object graph instead, which tells them apart, and require every model variable to be matched
    (a silent partial load is the failure this module exists to prevent)."""
    status = tf.train.Checkpoint(model=model).read(path)
    status.expect_partial()  # the optimizer's slots and other runs' objects stay in the file
    try:
        status.assert_existing_objects_matched()
    except AssertionError as e:
        raise CheckpointMismatchError(f"--init_checkpoint={path} does not fit the model: "
                                      f"{' '.join(str(e).split())[:400]}") from None
    return [getattr(v, "path", None) or v.name for v in model.variables]


def check_model_dir_checkpoint(path: str, model: tf.Module, model_dir: str) -> None:
    """Refuse to resume from a checkpoint in --model_dir that belongs to a different model."""
    missing, unexpected, mis_shaped = compare(model, path)
    if missing or unexpected or mis_shaped:
        first = (mis_shaped + missing + unexpected)[:3]
        raise CheckpointMismatchError(
            f"--model_dir={model_dir} holds a checkpoint of a different model ({os.path.basename(path)}): "
            f"first mismatching variables: {'; '.join(first)} ({len(missing)} missing, {len(unexpected)} "
            f"unexpected, {len(mis_shaped)} mis-shaped). Use another --model_dir, or delete this one to start over")
