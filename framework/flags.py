"""Problem settings as absl flags, defined once.

Every field of every registered problem's `HParams` dataclass (framework/settings.py declares them)
becomes one absl flag of the same name (`--max_seq_length`, `--dupe_factor`, `--seq_len` ...), shared by
textrain-datagen and the trainers. A name used by several problems is one flag; its type must agree.
Flags default to None, so a problem's own default applies unless the user sets the flag:
`problem_hparams_from_flags` takes only flags that were given on the command line. Validation is
framework.settings.validate_settings (run by the Problem on construction).
"""
from __future__ import annotations

import dataclasses
import typing
from typing import Any

from absl import flags

from textrain.framework import registry, settings

FLAGS = flags.FLAGS

_DEFINERS = {bool: flags.DEFINE_bool, int: flags.DEFINE_integer, float: flags.DEFINE_float,
             str: flags.DEFINE_string}


def _base_type(tp: Any) -> type:
    if tp in _DEFINERS:
        return tp
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if len(args) == 1 and args[0] in _DEFINERS:
        return args[0]
    raise TypeError(f"problem setting type {tp!r} cannot be a flag; use bool, int, float or str")


def define_flag(name: str, tp: type, help_text: str, default: Any = None) -> None:
    """Define a flag unless one of that name exists (then its type must agree)."""
    if name in FLAGS:
        existing = FLAGS[name].value if FLAGS[name].value is not None else FLAGS[name].default
        if existing is not None and _base_type(type(existing)) is not tp and not (
                tp is float and isinstance(existing, int)):
            raise TypeError(f"flag --{name} is defined as {type(existing).__name__} and as {tp.__name__}")
        return
    _DEFINERS[tp](name, default, help_text)


def define_problem_flags() -> None:
    """One flag for every HParams field of every registered problem (idempotent)."""
    for name in registry.problems.names():
        cls = registry.problems.get(name).HParams
        hints = typing.get_type_hints(cls)
        for field in dataclasses.fields(cls):
            define_flag(field.name, _base_type(hints[field.name]), settings.field_help(field, cls))


def given_flags(names) -> dict[str, Any]:
    """The flags among `names` that were set on the command line."""
    return {n: FLAGS[n].value for n in names if n in FLAGS and FLAGS[n].present}


def problem_hparams_from_flags(problem_cls: type) -> Any:
    """The problem's HParams: its defaults, overridden by the flags given on the command line."""
    cls = problem_cls.HParams
    return cls(**given_flags(f.name for f in dataclasses.fields(cls)))
