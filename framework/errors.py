"""The exception types a user can act on: the bottom layer of textrain (standard library only).

A `UserError` (or a subclass) is a failure the user can fix, with a message naming the flag, file
(and line/record) and what to do; `framework.cli.run_main` prints it as one line. It lives here,
below everything, so that any module can raise it without importing the CLI runner (and absl).
"""
from __future__ import annotations


class UserError(Exception):
    """A failure the user can fix; its message names the flag, file (and line/record) and what to do."""
