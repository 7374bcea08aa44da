"""Declared problem settings: the one description of each setting and the one validation of them.

Every field of a problem's `HParams` dataclass is a setting. Its metadata (`help_text(..., low=, high=,
choices=)`) says what it means and which values it accepts; `validate_settings` checks those, then the
HParams' own `validate()` for relations between fields (e.g. BERT's max_predictions_per_seq vs
max_seq_length). A violation is a `SettingsError` naming the flag, the allowed range and the value given.

Decisions:
- A leaf: standard library only (no absl, no registry), so the Problem contract can validate its settings
  without importing the CLI layer. framework/flags.py turns these declarations into absl flags.
- framework.problem.Problem calls `validate_settings` on construction, so datagen, the trainers and every
  other entry point get it before any work.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from textrain.framework.errors import SettingsError


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


def field_help(field: dataclasses.Field, cls: type) -> str:
    """The flag help of a settings field: its text, its range and its choices."""
    text = field.metadata.get("help") or f"{cls.__qualname__}.{field.name} (default {field.default!r})"
    if "range" in field.metadata:
        text += f" ({_range_text(*field.metadata['range'])})"
    if "choices" in field.metadata:
        text += f" (one of {', '.join(map(str, field.metadata['choices']))})"
    return text
