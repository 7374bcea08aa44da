"""Name -> class registries for problems and models.

Names are the snake_case of the class name unless given explicitly. Registering a name twice is an
error (two modules silently fighting over a name is worse than a crash at import). Looking up an
unknown name lists what is registered and says which import registers the built-ins.
"""
from __future__ import annotations

import re
from typing import TypeVar

from textrain.framework.errors import UnknownNameError

T = TypeVar("T")

_FIRST_CAP = re.compile(r"(.)([A-Z][a-z0-9]+)")
_ALL_CAP = re.compile(r"([a-z0-9])([A-Z])")


def snake_case(name: str) -> str:
    """`TranslateEnzhSub8k` -> `translate_enzh_sub8k`, `BertPretrain` -> `bert_pretrain`."""
    return _ALL_CAP.sub(r"\1_\2", _FIRST_CAP.sub(r"\1_\2", name)).lower()


class Registry:
    """One kind of registered thing (problems, models)."""

    def __init__(self, kind: str, builtin_module: str):
        self.kind = kind
        self.builtin_module = builtin_module
        self._items: dict[str, type] = {}

    def register(self, obj: type | None = None, *, name: str | None = None):
        """Decorator: `@register` or `@register(name="x")`."""

        def add(cls: type) -> type:
            key = name or snake_case(cls.__name__)
            if key in self._items and self._items[key] is not cls:
                prev = self._items[key]
                raise ValueError(
                    f"{self.kind} name {key!r} is already registered by "
                    f"{prev.__module__}.{prev.__qualname__}; cannot register "
                    f"{cls.__module__}.{cls.__qualname__} under the same name")
            self._items[key] = cls
            cls.registered_name = key
            return cls

        return add(obj) if obj is not None else add

    def get(self, name: str) -> type:
        if name not in self._items:
            known = ", ".join(sorted(self._items)) or "(none)"
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}. Registered {self.kind}s: {known}. "
                f"Built-in {self.kind}s are registered by `import {self.builtin_module}`; your own by "
                f"importing the module that defines them (datagen/trainers: --usr_dir).")
        return self._items[name]

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: str) -> bool:
        return name in self._items


problems = Registry("problem", "textrain.problems")
models = Registry("model", "textrain.models")


def register_problem(obj=None, *, name: str | None = None):
    return problems.register(obj, name=name)


def register_model(obj=None, *, name: str | None = None):
    return models.register(obj, name=name)


def problem(name: str, hparams=None):
    """An instance of the registered problem `name`."""
    return problems.get(name)(hparams)


def usr_dir_from_argv(argv: list[str]) -> str | None:
    """The --usr_dir value, read before flags are parsed (its problems' settings become flags)."""
    for i, arg in enumerate(argv):
        if arg.startswith("--usr_dir="):
            return arg.split("=", 1)[1]
        if arg == "--usr_dir" and i + 1 < len(argv):
            return argv[i + 1]
    return None


def import_builtins(models: bool = True) -> None:
    """Register the built-in problems and, unless `models=False`, models (their packages import every built-in
    module). Datagen needs no models: without them it runs without importing TensorFlow (framework/lazy_tf.py)."""
    import importlib

    importlib.import_module("textrain.problems")
    if models:
        importlib.import_module("textrain.models")


def import_usr_dir(path: str | None) -> None:
    """Import a user directory of problems/models (tensor2tensor's --t2t_usr_dir)."""
    if not path:
        return
    import importlib
    import os
    import sys

    path = os.path.abspath(os.path.expanduser(path))
    parent, module = os.path.split(path.rstrip("/"))
    sys.path.insert(0, parent)
    importlib.import_module(module)
