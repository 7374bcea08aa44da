"""`tf`, imported on first use.

Why: importing TensorFlow costs ~2.4 CPU-seconds and ~540 MiB per process, and a datagen run on local files
needs none of it (its files go through framework/fileio.py, its records through framework/records.py). The
modules on the datagen path therefore say `from framework.lazy_tf import tf`: the first attribute read
(`tf.io`, `tf.data`, ...) imports TensorFlow, after which the proxy answers from the real module. Everything
else (trainers, models) imports TensorFlow directly.

Quiet start: TensorFlow 2.21 writes its C++ start-up lines (`I0000 ... oneDNN custom operations are on`, the
CPU-feature notice) through absl's C++ logging before that is initialised, which TF_CPP_MIN_LOG_LEVEL does not
reach (tensorflow#100442). So a CLI calls `quiet_start(argv)` first: unless `--verbose` (TEXTRAIN_VERBOSE) or the
user set TF_CPP_MIN_LOG_LEVEL, TensorFlow's first import runs with the stderr file descriptor passed through a
filter that drops those info lines and passes everything else.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import re
import sys
import threading
import types
from collections.abc import Iterator, Sequence

# TensorFlow's C++ info lines at import, and the line absl's C++ logging puts before them.
_STARTUP_LINE = re.compile(rb"^(I\d{4} [\d:.]+ +\d+ \S+\] |WARNING: All log messages before "
                           rb"absl::InitializeLog\(\) is called|To enable the following instructions: )")
_quiet = False  # set by quiet_start: TensorFlow's first import drops its start-up lines


class _LazyModule(types.ModuleType):
    """A module object whose attributes come from `name`, imported at the first read."""

    def __getattr__(self, attr: str):
        module = sys.modules.get(self.__name__) or _import(self.__name__)
        value = getattr(module, attr)
        if not attr.startswith("__"):
            setattr(self, attr, value)  # later reads skip __getattr__
        return value

    def __dir__(self):
        return dir(importlib.import_module(self.__name__))


def loaded() -> bool:
    """Whether TensorFlow has been imported in this process (by anyone)."""
    return "tensorflow" in sys.modules


def lazy_module(name: str) -> types.ModuleType:
    """Module `name`, imported at the first attribute read (a CLI module whose import must not bring in
    TensorFlow before its quiet start: textrain-convert's models/hf_format.py)."""
    return _LazyModule(name)


tf = _LazyModule("tensorflow")


def _import(name: str) -> types.ModuleType:
    if not _quiet or "tensorflow" in sys.modules:
        return importlib.import_module(name)
    with _stderr_without(_STARTUP_LINE):
        return importlib.import_module(name)


def _verbose_requested(argv: Sequence[str]) -> bool:
    if os.environ.get("TEXTRAIN_VERBOSE", "") not in ("", "0"):
        return True
    return any(a in ("--verbose", "--verbose=true", "--verbose=True", "--verbose=1") for a in argv)


def quiet_start(argv: Sequence[str], import_now: bool = True) -> None:
    """A CLI's first call, before anything imports TensorFlow: TF_CPP_MIN_LOG_LEVEL=2 unless the user set it, and
    TensorFlow imported without its C++ start-up lines (now, or at first use with `import_now=False`: datagen,
    which may need none) unless `--verbose` or the user's TF_CPP_MIN_LOG_LEVEL asks for them."""
    global _quiet
    user_level = "TF_CPP_MIN_LOG_LEVEL" in os.environ
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if user_level or _verbose_requested(argv):
        return
    _quiet = True
    if import_now:
        _import("tensorflow")


@contextlib.contextmanager
def _stderr_without(pattern: re.Pattern) -> Iterator[None]:
    """File descriptor 2 (C++ writes too) through a pipe; lines matching `pattern` dropped, the rest passed on."""
    sys.stderr.flush()
    saved = os.dup(2)
    read_end, write_end = os.pipe()

    def forward() -> None:
        pending = b""
        with os.fdopen(read_end, "rb", buffering=0) as source:
            while chunk := source.read(65536):
                *lines, pending = (pending + chunk).split(b"\n")
                kept = b"".join(line + b"\n" for line in lines if not pattern.match(line))
                if kept:
                    os.write(saved, kept)
        if pending and not pattern.match(pending):
            os.write(saved, pending)

    reader = threading.Thread(target=forward, daemon=True)
    reader.start()
    os.dup2(write_end, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(write_end)
        reader.join()
        os.close(saved)
