"""Problem settings as absl flags, defined once.

Every field of every registered problem's `HParams` dataclass becomes one absl flag of the same name
(`--max_seq_length`, `--dupe_factor`, `--seq_len` ...), shared by textrain-datagen and the trainers. A
name used by several problems is one flag; its type must agree. Flags default to None, so a problem's
own default applies unless the user sets the flag: `problem_hparams_from_flags` takes only flags that
were given on the command line.

Settings are validated in ONE place, `validate_settings`, before any work (framework.problem.Problem
calls it on construction, so datagen, the trainers and every other entry point get it): each field's
declared range / choices (`help_text(..., low=, high=, choices=)` in the field's metadata), then the
HParams' own `validate()` for relations between fields (e.g. BERT's max_predictions_per_seq vs
max_seq_length). A violation is a `SettingsError` (a UserError and a ValueError) naming the flag,
the allowed range and the value given.
"""
from __future__ import annotations

import dataclasses
import typing
from typing import Any

from absl import flags

from textrain.framework import registry
from textrain.framework.errors import UserError

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


class SettingsError(UserError, ValueError):
    """A problem setting outside its declared range (or breaking a relation between settings)."""


def help_text(text: str, *, low: float | None = None, high: float | None = None, low_open: bool = False,
              high_open: bool = False, choices: tuple | None = None) -> dict:
    """`metadata` for an HParams field: its flag's help text and the values it accepts.

    low/high: inclusive bounds unless low_open/high_open (an open end: `(0, 1]` is low=0, low_open=True,
    high=1); choices: the allowed values. The range is appended to the help text."""
    meta: dict[str, Any] = {"help": text}
    if low is not None or high is not None:
        meta["range"] = (low, high, low_open, high_open)
    if choices is not None:
        meta["choices"] = tuple(choices)
    return meta


def _range_text(low, high, low_open: bool, high_open: bool) -> str:
    if high is None:
        return f"{'>' if low_open else '>='} {low}"
    if low is None:
        return f"{'<' if high_open else '<='} {high}"
    return f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"


def check_field(name: str, value: Any, metadata: Any) -> str | None:
    """Why `value` is outside the declared range/choices of field `name` (None when it is fine)."""
    if value is None:
        return None
    choices = metadata.get("choices")
    if choices is not None and value not in choices:
        return f"--{name} must be one of {', '.join(map(str, choices))}; got {value!r}"
    if "range" in metadata:
        low, high, low_open, high_open = metadata["range"]
        bad = ((low is not None and (value < low or (low_open and value == low))) or
               (high is not None and (value > high or (high_open and value == high))) or value != value)
        if bad:
            return f"--{name} must be {_range_text(low, high, low_open, high_open)}; got {value!r}"
    return None


def validate_settings(hparams: Any) -> None:
    """The one validation of a problem's settings: declared ranges, then `hparams.validate()`."""
    if not dataclasses.is_dataclass(hparams):
        return
    errors = [e for f in dataclasses.fields(hparams)
              if (e := check_field(f.name, getattr(hparams, f.name), f.metadata))]
    if errors:
        raise SettingsError("; ".join(errors))
    validate = getattr(hparams, "validate", None)
    if callable(validate):
        try:
            validate()
        except SettingsError:
            raise
        except ValueError as e:
            raise SettingsError(str(e)) from None


def _field_help(field: dataclasses.Field, cls: type) -> str:
    text = field.metadata.get("help") or f"{cls.__qualname__}.{field.name} (default {field.default!r})"
    if "range" in field.metadata:
        text += f" ({_range_text(*field.metadata['range'])})"
    if "choices" in field.metadata:
        text += f" (one of {', '.join(map(str, field.metadata['choices']))})"
    return text


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
            define_flag(field.name, _base_type(hints[field.name]), _field_help(field, cls))


def given_flags(names) -> dict[str, Any]:
    """The flags among `names` that were set on the command line."""
    return {n: FLAGS[n].value for n in names if n in FLAGS and FLAGS[n].present}


def problem_hparams_from_flags(problem_cls: type) -> Any:
    """The problem's HParams: its defaults, overridden by the flags given on the command line."""
    cls = problem_cls.HParams
    return cls(**given_flags(f.name for f in dataclasses.fields(cls)))
