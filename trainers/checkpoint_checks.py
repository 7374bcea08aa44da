"""Checks around a trainer's checkpoints: the model_dir lock, stale temporary folders, and whether a
checkpoint fits the model before anything is restored.

Called from trainers/core.py (`Trainer`), so every entry point built on it gets them.

Decisions:
- A textrain (object-based) checkpoint names each variable by its path in the object graph
  (`model/bert/encoder/...`), and a variable reachable along several paths (the model and the
  optimizer's list of variables) is stored once, under the shortest. So both sides are compared by ALL
  their paths below `model/`: the checkpoint's from its `_CHECKPOINTABLE_OBJECT_GRAPH` proto, the
  model's by walking its trackable children. A model variable found under none of its paths is
  missing, a checkpoint variable that no model path reaches is unexpected, a pair of different shapes
  is mis-shaped; any of these (outside the allow-lists) is a CheckpointMismatchError listing them all,
  raised before any value is assigned (so no partial restore and none of TF's warnings about unused
  values).
- Allow-lists (regexes on the path below `model/`): a pretrainer's heads may stay unused when a
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
import logging
import os
import re
from typing import Any, Iterable

import tensorflow as tf

from framework import locks
from framework.cli import UserError
from models.checkpoints import CheckpointMismatchError, backing_variable

log = logging.getLogger("textrain.trainer")

# Paths below model/ of a textrain pretrainer that a fine-tuning model may leave unused.
DEFAULT_ALLOW_UNEXPECTED = (r"^masked_lm/", r"^next_sentence/", r"^generator", r"^discriminator_head/",
                            r"^lm_loss/", r"^bert/pooler/")
# Paths below model/ of a fine-tuning model's new head, absent from a pretraining checkpoint.
DEFAULT_ALLOW_MISSING = (r"^classifier/", r"^qa_", r"^head/", r"_head/", r"^logits/", r"^answer_class/")
_MAX_LISTED = 20
_MAX_DEPTH = 64


# ----------------------------------------------------------------------------------- model_dir
def prepare_model_dir(model_dir: str, is_chief: bool, program: str = "textrain trainer") -> locks.DirLock | None:
    """The chief takes the model_dir lock (a second trainer on it stops at once, naming the holder)
    and removes the temporary folders of interrupted saves. Other workers share the chief's directory."""
    if not is_chief:
        return None
    lock = locks.acquire_dir_lock(model_dir, program, ".trainer.lock")
    for path in sorted(tf.io.gfile.glob(os.path.join(model_dir, "ckpt-*_temp*"))):
        log.warning("removing %s, left by a checkpoint save that was interrupted", path)
        if tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)
        else:
            tf.io.gfile.remove(path)
    return lock


# ------------------------------------------------------------------------------------ paths
def _escape(name: str) -> str:
    return name.replace(".", "..").replace("/", ".S")


def _all_paths(root_children, is_leaf, children) -> dict[Any, set[str]]:
    """Every acyclic path (up to _MAX_DEPTH) from the roots to each leaf: leaf key -> set of paths."""
    found: dict[Any, set[str]] = collections.defaultdict(set)
    stack = [(node, name, (node_key,)) for name, node, node_key in root_children]
    while stack:
        node, path, on_path = stack.pop()
        key = on_path[-1]
        if is_leaf(node):
            found[key].add(path)
            continue
        if len(on_path) > _MAX_DEPTH:
            continue
        for name, child, child_key in children(node):
            if child_key not in on_path:
                stack.append((child, f"{path}/{name}", on_path + (child_key,)))
    return found


def model_variable_paths(model: tf.Module) -> dict[int, tuple[set[str], tuple[int, ...], str]]:
    """id(variable) -> (its paths below the model, its shape, a display name)."""
    def children(obj):
        try:
            items = tf.train.TrackableView(obj).children(obj).items()
        except Exception:  # noqa: BLE001 - an object TF cannot list has no variables for us
            return []
        return [(_escape(n), c, id(c)) for n, c in items]

    def is_leaf(obj):
        return isinstance(obj, (tf.Variable, tf.keras.Variable))

    paths = _all_paths(children(model), is_leaf, children)
    variables = {}
    for obj in _walk(model, children):
        if is_leaf(obj) and id(obj) in paths:
            variables[id(obj)] = (paths[id(obj)], tuple(backing_variable(obj).shape), min(paths[id(obj)], key=len))
    return variables


def _walk(root, children) -> Iterable[Any]:
    seen, queue = {id(root)}, collections.deque([root])
    while queue:
        obj = queue.popleft()
        yield obj
        for _, child, key in children(obj):
            if key not in seen:
                seen.add(key)
                queue.append(child)


def checkpoint_variable_paths(path: str, prefix: str = "model") -> dict[str, tuple[set[str], tuple[int, ...]]]:
    """checkpoint key -> (its paths below `prefix/` in the object graph, its shape), for every variable
    reachable from the checkpoint root's `prefix` child."""
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    reader = tf.train.load_checkpoint(path)
    shapes = reader.get_variable_to_shape_map()
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    nodes = graph.nodes

    def key_of(node_id):
        for attr in nodes[node_id].attributes:
            if attr.name == "VARIABLE_VALUE":
                return attr.checkpoint_key
        return None

    def children(node_id):
        return [(_escape(c.local_name), c.node_id, c.node_id) for c in nodes[node_id].children]

    roots = [c for c in children(0) if c[0] == prefix]
    if not roots:
        return {}
    found = _all_paths(children(roots[0][1]), lambda n: key_of(n) is not None, children)
    return {key_of(n): (p, tuple(shapes.get(key_of(n), ()))) for n, p in found.items()}


def compare(model: tf.Module, path: str, allow_unexpected: Iterable[str] = (),
            allow_missing: Iterable[str] = ()) -> tuple[list[str], list[str], list[str]]:
    """(missing, unexpected, mis-shaped) between a textrain checkpoint's model and `model`."""
    ckpt = checkpoint_variable_paths(path)
    ckpt_by_path = {p: key for key, (ps, _) in ckpt.items() for p in ps}
    unexpected_ok = [re.compile(p) for p in allow_unexpected]
    missing_ok = [re.compile(p) for p in allow_missing]
    matched_keys = set()
    missing, mis_shaped = [], []
    for paths, shape, name in model_variable_paths(model).values():
        key = next((ckpt_by_path[p] for p in sorted(paths) if p in ckpt_by_path), None)
        if key is None:
            if not any(r.search(p) for r in missing_ok for p in paths):
                missing.append(f"{name} {list(shape)}")
            continue
        matched_keys.add(key)
        if ckpt[key][1] != shape:
            mis_shaped.append(f"{name}: checkpoint {list(ckpt[key][1])} vs model {list(shape)}")
    unexpected = []
    for key, (paths, shape) in ckpt.items():
        if key in matched_keys or any(r.search(p) for r in unexpected_ok for p in paths):
            continue
        unexpected.append(f"{min(paths, key=len)} {list(shape)}")
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
        latest = tf.train.latest_checkpoint(path)
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


def is_textrain_checkpoint(path: str) -> bool:
    return "_CHECKPOINTABLE_OBJECT_GRAPH" in dict(tf.train.list_variables(path))


def check_init_checkpoint(path: str, model: tf.Module, allow_unexpected: Iterable[str] = (),
                          allow_missing: Iterable[str] = DEFAULT_ALLOW_MISSING) -> None:
    """Refuse a textrain checkpoint that does not fit `model`, listing every mismatch."""
    missing, unexpected, mis_shaped = compare(model, path, list(allow_unexpected) + list(DEFAULT_ALLOW_UNEXPECTED),
                                              allow_missing)
    if missing or unexpected or mis_shaped:
        raise CheckpointMismatchError(
            f"--init_checkpoint={path} does not fit the model: " + "; ".join(_parts(missing, unexpected, mis_shaped))
            + ". Use a checkpoint of the same architecture (layers, sizes, vocab) or change the model flags")


def check_model_dir_checkpoint(path: str, model: tf.Module, model_dir: str) -> None:
    """Refuse to resume from a checkpoint in --model_dir that belongs to a different model."""
    missing, unexpected, mis_shaped = compare(model, path)
    if missing or unexpected or mis_shaped:
        first = (mis_shaped + missing + unexpected)[:3]
        raise CheckpointMismatchError(
            f"--model_dir={model_dir} holds a checkpoint of a different model ({os.path.basename(path)}): "
            f"first mismatching variables: {'; '.join(first)} ({len(missing)} missing, {len(unexpected)} "
            f"unexpected, {len(mis_shaped)} mis-shaped). Use another --model_dir, or delete this one to start over")
