"""`tf`, imported on first use.

Why: importing TensorFlow costs ~2.4 CPU-seconds and ~540 MiB per process, and a datagen run on local files
needs none of it (its files go through framework/fileio.py, its records through framework/records.py). The
modules on the datagen path therefore say `from framework.lazy_tf import tf`: the first attribute read
(`tf.io`, `tf.data`, ...) imports TensorFlow, after which the proxy answers from the real module. Everything
else (trainers, models) imports TensorFlow directly.
"""
from __future__ import annotations

import importlib
import sys
import types


class _LazyModule(types.ModuleType):
    """A module object whose attributes come from `name`, imported at the first read."""

    def __getattr__(self, attr: str):
        module = sys.modules.get(self.__name__) or importlib.import_module(self.__name__)
        value = getattr(module, attr)
        if not attr.startswith("__"):
            setattr(self, attr, value)  # later reads skip __getattr__
        return value

    def __dir__(self):
        return dir(importlib.import_module(self.__name__))


def loaded() -> bool:
    """Whether TensorFlow has been imported in this process (by anyone)."""
    return "tensorflow" in sys.modules


tf = _LazyModule("tensorflow")
