"""The one place where a textrain console script turns a failure the user can fix into one line.

Every entry point (`textrain-datagen`, `textrain-train-gpu`, `textrain-train-tpu`, `textrain-finetune`,
`textrain-decode`, ...) runs its absl `main` through `run_main(prog, main)`. Code anywhere below it
raises `UserError` (or a subclass) for a failure the user can fix: a flag, a file, a setting. That
ends as `<prog>: error: <message>` on stderr and exit status 1, with no traceback; setting
`TEXTRAIN_VERBOSE=1` re-raises instead, so the traceback is there when a developer wants it.
"""
from __future__ import annotations

import os
import sys
from typing import Callable

from absl import app


class UserError(Exception):
    """A failure the user can fix; its message names the flag, file (and line/record) and what to do."""


def verbose() -> bool:
    return os.environ.get("TEXTRAIN_VERBOSE", "") not in ("", "0")


def fail(prog: str, message: str, status: int = 1) -> None:
    """Print the one line and exit."""
    print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
    sys.exit(status)


def run_main(prog: str, main: Callable[[list[str]], None]) -> None:
    """absl's app.run(main), with UserError ending as one line (see the module docstring)."""

    def guarded(argv: list[str]) -> None:
        try:
            main(argv)
        except UserError as e:
            if verbose():
                raise
            fail(prog, str(e))

    app.run(guarded)
