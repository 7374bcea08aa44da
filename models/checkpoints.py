"""Import of the originals' released TF1 checkpoints by variable name.

Each model lists `original name -> its variable` (`TrainableModel.tf1_variable_map`); this module
reads the checkpoint, checks that every name is present with the right shape and that the checkpoint
has nothing unaccounted for, and only then assigns. A mismatch raises one error listing every
missing, unexpected and mis-shaped name, so a wrong vocab or config is caught before any weight moves.
"""
from __future__ import annotations

import os
import re
from typing import Iterable

import numpy as np
import tensorflow as tf

from textrain.framework.errors import UserError
from textrain.models import hf_format

# Optimizer slots and bookkeeping that released checkpoints carry but a model never owns.
DEFAULT_IGNORE = (r"global_step$", r"/adam_[mv]$", r"/Adam(_1)?$", r"_power$", r"^good_steps$",
                  r"^loss_scale", r"/ExponentialMovingAverage$")


class CheckpointMismatchError(UserError, ValueError):
    pass


def backing_variable(var):
    """The tf.Variable (a MirroredVariable under a strategy) behind a Keras 3 variable; others as is."""
    return var.value if isinstance(var, tf.keras.Variable) else var


def checkpoint_variables(path: str) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every variable in a TF1 (or TF2 name-based) checkpoint at `path`."""
    return {name: tuple(shape) for name, shape in tf.train.list_variables(path)}


_FAMILY_NAMES = {"bert": "BERT", "electra": "ELECTRA", "xlnet": "XLNet"}


def _refuse_other_family(path: str, variable_map: dict, error: CheckpointMismatchError) -> None:
    """An HF directory of another model family (ELECTRA into BERT) fails on every variable: say that in a
    short line; the full listing is the cause, shown with --verbose."""
    architecture = hf_format.architecture_of(hf_format.read_config(path), os.path.join(path, hf_format.CONFIG))
    family = hf_format.ARCHITECTURES[architecture][0]
    scopes = {name.split("/", 1)[0] for name in variable_map}
    if family in ("bert", "electra") and family not in scopes:
        raise CheckpointMismatchError(
            f"{path} is a Hugging Face {_FAMILY_NAMES[family]} checkpoint ({architecture}), not one of this model's "
            f"family: use --model={family} (or its fine-tuning model); --verbose lists every variable") from error


def load_tf1_checkpoint(path: str, variable_map: dict[str, tf.Variable],
                        ignore: Iterable[str] = DEFAULT_IGNORE,
                        allow_unexpected: Iterable[str] = ()) -> list[str]:
    """Assign `variable_map`'s variables from the checkpoint at `path`; returns the names loaded.

    `path` is a TF1 checkpoint prefix or a Hugging Face directory (read under the same TF1 names,
    models/hf_format.py). `allow_unexpected`: regexes of checkpoint names that may stay unused (e.g. a
    pretraining head when fine-tuning). Everything else must match exactly, or nothing is assigned.
    """
    if hf_format.is_hf_directory(path):
        values = hf_directory_values(path)
        try:
            return assign_tf1_values(path, values, variable_map, ignore, allow_unexpected)
        except CheckpointMismatchError as e:
            _refuse_other_family(path, variable_map, e)
            raise
    reader = tf.train.load_checkpoint(path)
    values = {name: _Lazy(reader, name, shape) for name, shape in reader.get_variable_to_shape_map().items()}
    return assign_tf1_values(path, values, variable_map, ignore, allow_unexpected)


class _Lazy:
    """A checkpoint tensor read only when assigned (its shape is known up front)."""

    def __init__(self, reader, name: str, shape):
        self.reader, self.name, self.shape = reader, name, tuple(shape)

    def __array__(self, dtype=None, copy=None):
        value = np.asarray(self.reader.get_tensor(self.name))
        return value if dtype is None else value.astype(dtype)


def hf_directory_values(path: str) -> dict[str, np.ndarray]:
    """An HF directory's tensors under the originals' TF1 names, its vocabulary checked against them."""
    values = hf_format.tf1_values(hf_format.read_hf_directory(path))
    embedding = next((v for n, v in values.items() if n.endswith(("embeddings/word_embeddings", "word_embedding/lookup_table"))), None)
    if embedding is not None:
        hf_format.check_vocabulary(path, int(embedding.shape[0]))
    return values


def assign_tf1_values(source: str, values: dict, variable_map: dict[str, tf.Variable],
                      ignore: Iterable[str] = DEFAULT_IGNORE, allow_unexpected: Iterable[str] = ()) -> list[str]:
    """Check `values` (TF1 name -> array-like with `.shape`) against `variable_map`, then assign all."""
    shapes = {n: tuple(v.shape) for n, v in values.items()}
    skip = [re.compile(p) for p in list(ignore) + list(allow_unexpected)]
    missing = sorted(n for n in variable_map if n not in shapes)
    unexpected = sorted(n for n in shapes if n not in variable_map and not any(p.search(n) for p in skip))
    mis_shaped = sorted(
        f"{n}: checkpoint {tuple(shapes[n])} vs model {tuple(v.shape)}"
        for n, v in variable_map.items() if n in shapes and tuple(shapes[n]) != tuple(v.shape))
    if missing or unexpected or mis_shaped:
        parts = [f"{title} ({len(names)}): " + ", ".join(names)
                 for title, names in (("missing from checkpoint", missing), ("not used by the model", unexpected),
                                      ("shape mismatch", mis_shaped)) if names]
        raise CheckpointMismatchError(f"checkpoint {source} does not match the model: " + "; ".join(parts))
    for name, var in variable_map.items():
        var = backing_variable(var)
        var.assign(np.asarray(values[name]).astype(var.dtype.as_numpy_dtype))
    return sorted(variable_map)


def write_tf1_checkpoint(path: str, values: dict[str, np.ndarray]) -> str:
    """Write `values` as a checkpoint in the TF1 layout (plain names, as the originals' Saver does).

    Used by tests and by conversion tools; the result reads back with `tf.train.load_checkpoint`.
    """
    with tf.Graph().as_default():
        variables = [tf.compat.v1.Variable(v, name=n) for n, v in values.items()]
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            return saver.save(sess, path, write_meta_graph=False)
