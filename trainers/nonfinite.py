"""Truthful reports of non-finite training steps (used by trainers/core.py).

Decisions:
- A step is non-finite when its loss or its gradient norm is (a huge learning rate typically gives a
  finite loss and an infinite gradient norm): the message says which one, with its value.
- Skipped steps (`--nan_policy=skip`) never enter the loop's averages: the figures average over good
  steps only, and a loop whose steps were all skipped reports loss NaN, never 0.
- A run whose steps were mostly skipped (more than MAX_SKIPPED_FRACTION of the steps it ran) did not
  train: after its checkpoint is saved it ends with `NonFiniteError` (one line, non-zero exit).
"""
from __future__ import annotations

import math

from textrain.framework.errors import UserError

MAX_SKIPPED_FRACTION = 0.5


class NonFiniteError(UserError, FloatingPointError):
    """Training met non-finite values the run cannot go on with."""


def _fmt(value: float) -> str:
    return repr(float(value)) if not math.isfinite(value) else f"{value:.6g}"


def what_was_nonfinite(loss: float, grad_norm: float) -> str:
    """'loss nan (gradient norm 3.1)' / 'gradient norm inf (loss 9.1e+11)' / both."""
    loss_bad, grad_bad = not math.isfinite(loss), not math.isfinite(grad_norm)
    if loss_bad and grad_bad:
        return f"loss {_fmt(loss)} and gradient norm {_fmt(grad_norm)}"
    if loss_bad:
        return f"loss {_fmt(loss)} (gradient norm {_fmt(grad_norm)})"
    if grad_bad:
        return f"gradient norm {_fmt(grad_norm)} (loss {_fmt(loss)})"
    return f"loss {_fmt(loss)}, gradient norm {_fmt(grad_norm)}"


def raise_nonfinite(step: int, loss: float, grad_norm: float) -> None:
    """--nan_policy=raise: the step that stopped the run, and which value was non-finite."""
    raise NonFiniteError(
        f"non-finite {what_was_nonfinite(loss, grad_norm)} at step {step} (1-based; the update of that step "
        f"was not applied). Lower --learning_rate (or raise --num_warmup_steps / lower --clip_norm), check "
        f"the data, or pass --nan_policy=skip to skip such steps")


def check_mostly_skipped(skipped: int, steps: int, last_bad: tuple[float, float] | None,
                         checkpoint: str | None) -> None:
    """Refuse to call a run successful when most of its steps were skipped."""
    if steps <= 0 or skipped <= MAX_SKIPPED_FRACTION * steps:
        return
    cause = f" (the last: {what_was_nonfinite(*last_bad)})" if last_bad else ""
    raise NonFiniteError(
        f"{skipped} of the {steps} steps of this run were skipped as non-finite{cause}: the model did not "
        f"train. Lower --learning_rate (or raise --num_warmup_steps), check the data; the last checkpoint "
        f"is {checkpoint}")
