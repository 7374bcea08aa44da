"""The exception types a user can act on: the bottom layer of textrain (standard library only).

A `UserError` (or a subclass) is a failure the user can fix, with a message naming the flag, file
(and line/record) and what to do; `framework.cli.run_main` prints it as one line. They live here,
below everything, so that any module can raise them without importing the CLI runner (and absl) or
the module that happens to detect them first.
"""
from __future__ import annotations


class UserError(Exception):
    """A failure the user can fix; its message names the flag, file (and line/record) and what to do."""


class SettingsError(UserError, ValueError):
    """A problem setting outside its declared range (or breaking a relation between settings)."""


class SettingsMismatchError(UserError, ValueError):
    """Settings (flags, a run's layout) that disagree with the ones the data was made with."""


class MissingDataError(UserError, FileNotFoundError):
    """A split that was never (completely) generated; the message says which datagen command makes it."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class RecordError(UserError, ValueError):
    """A record that cannot be written or read; the message names the feature or the file."""


class UnknownNameError(UserError, KeyError):
    """An unregistered problem/model name (a KeyError, as before; a UserError: one line from any CLI)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""
