"""The one place where a textrain console script turns a failure the user can fix into one line.

Every entry point (`textrain-datagen`, `textrain-train-gpu`, `textrain-train-tpu`, `textrain-finetune`,
`textrain-decode`, ...) runs its absl `main` through `run_main(prog, main)`. Code anywhere below it
raises `framework.errors.UserError` (or a subclass: CorpusError, RecordError, EncoderError,
SettingsMismatchError, CheckpointMismatchError, ... are all UserErrors) for a failure the user can fix:
a flag, a file, a setting. That ends as `<prog>: error: <message>` on stderr and a non-zero exit
status, with no traceback.

Decisions:
- The place that knows the file raises the UserError naming it; `run_main` additionally turns the
  failure types that reach it from below without a name into one line (`explain`): TensorFlow's file
  errors (DataLossError is explained with the shard file and offset through
  `tf_errors.explain_data_loss` on the record files of the run, passed explicitly: `run_main`'s
  `record_files`, by default those of --data_dir/--problem; NotFound / PermissionDenied /
  ResourceExhausted), OSError with ENOSPC / EDQUOT / EFBIG / EACCES / EROFS / ENOENT, zlib.error /
  EOFError (corrupt compressed input). Anything else is a bug and keeps its traceback.
- Ctrl-C: the trainers save first (their SIGINT handler); a KeyboardInterrupt that still reaches here
  is one line and exit status 130 (128 + SIGINT), as a shell expects.
- `TEXTRAIN_VERBOSE=1` or `--verbose` re-raises instead, so the traceback is there when wanted.
- The one line is printed last and flushed, after everything TensorFlow logged, so it cannot be buried.
- `--help` lists every textrain flag under the CLI's own docstring: absl shows only the main module's key
  flags and doc, and a console script's main module is pip's generated wrapper (no flags, no doc), while
  under `python -m` most flags live in other textrain modules (trainers/trainer_flags.py, the problems' settings).
"""
from __future__ import annotations

import errno
import os
import re
import sys
import zlib
from typing import Callable, Iterable

from absl import app, flags

from textrain.framework.errors import UserError

INTERRUPTED_STATUS = 130  # 128 + SIGINT

_OS_ADVICE = {
    errno.ENOSPC: "the disk is full: free space or choose another directory",
    errno.EDQUOT: "the disk quota is exceeded: free space or choose another directory",
    errno.EFBIG: "the file size limit was reached (ulimit -f): raise the limit or write smaller shards",
    errno.EACCES: "permission denied: make the directory writable (or choose another one)",
    errno.EPERM: "operation not permitted: make the directory writable (or choose another one)",
    errno.EROFS: "the file system is read-only: choose a writable directory",
    errno.ENOENT: "no such file or directory: check the path",
}


_TF_OS_MESSAGES = (
    (r"No space left on device", "the disk is full: free space or choose another directory, then re-run"),
    (r"Disk quota exceeded", "the disk quota is exceeded: free space or choose another directory"),
    (r"File too large", "the file size limit was reached (ulimit -f): raise the limit or write smaller files"),
    (r"Read-only file system", "the file system is read-only: choose a writable directory"),
)


def verbose() -> bool:
    if os.environ.get("TEXTRAIN_VERBOSE", "") not in ("", "0"):
        return True
    return "verbose" in flags.FLAGS and bool(flags.FLAGS["verbose"].value)


def fail(prog: str, message: str, status: int = 1) -> None:
    """Print the one line and exit."""
    print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
    sys.exit(status)


def _without_temporary_suffix(text: str) -> str:
    """Name the file, not the temporary name it is written under (fileio.incomplete_path)."""
    return re.sub(r"\.[A-Za-z0-9_]+-\d+\.incomplete\b", "", text)


def _tf_error_message(e: Exception, record_files: Callable[[], Iterable[str]]) -> str | None:
    """One line for TensorFlow's file errors (imported lazily: not every CLI has loaded TF)."""
    tf = sys.modules.get("tensorflow")
    if tf is None or not isinstance(e, tf.errors.OpError):
        return None
    from textrain.framework import tf_errors  # imports TensorFlow, which is loaded already here

    message = tf_errors.tf_message(e) or type(e).__name__
    message = _without_temporary_suffix(message)
    for pattern, advice in _TF_OS_MESSAGES:  # the OS error is in the text, whatever the TF error type
        if re.search(pattern, message):
            return f"{message}; {advice}"
    if isinstance(e, tf.errors.DataLossError):
        return str(tf_errors.explain_data_loss(e, record_files()))
    if isinstance(e, tf.errors.NotFoundError):
        return f"not found: {message}; check the path (a flag naming a file or directory)"
    if isinstance(e, tf.errors.PermissionDeniedError):
        return f"permission denied: {message}; make the directory writable (or choose another one)"
    if isinstance(e, tf.errors.ResourceExhaustedError):
        if re.search(r"out of memory|OOM|allocat", message, re.I):
            return f"out of memory: {message}; lower the batch size or sequence length"
        return f"{message}; free disk space (or choose another directory) and re-run"
    return None


def explain(e: BaseException, record_files: Callable[[], Iterable[str]] = list) -> tuple[str, int] | None:
    """(one-line message, exit status) for a failure the user can act on; None for a bug.

    record_files: the TFRecord files the run read (called only for a DataLossError, whose damaged file is
    sought among them)."""
    if isinstance(e, UserError):
        return str(e), 1
    if isinstance(e, app.UsageError):
        return str(e), 1
    if isinstance(e, KeyboardInterrupt):
        return "interrupted (Ctrl-C)", INTERRUPTED_STATUS
    if isinstance(e, FileNotFoundError) and e.errno is None:  # raised by our code with a message for the user
        return str(e), 1
    if isinstance(e, OSError) and e.errno in _OS_ADVICE:
        where = _without_temporary_suffix(f" {e.filename}") if e.filename else ""
        return f"{_OS_ADVICE[e.errno]}{(' (' + where.strip() + ')') if where else ''}: {e.strerror or e}", 1
    if isinstance(e, (zlib.error, EOFError)):
        return (f"corrupt or truncated compressed input ({type(e).__name__}: {e}); re-download or "
                f"re-compress the file"), 1
    if isinstance(e, Exception):
        message = _tf_error_message(e, record_files)
        if message is not None:
            return message, 1
    return None


def flag_record_files() -> list[str]:
    """The record files of the problem that --data_dir and --problem name (empty without those flags)."""
    names = ("data_dir", "problem")
    if not all(n in flags.FLAGS and flags.FLAGS[n].value for n in names):
        return []
    from textrain.framework import fileio

    return fileio.glob(os.path.join(flags.FLAGS["data_dir"].value, flags.FLAGS["problem"].value, "*.tfrecord"))


def run_main(prog: str, main: Callable[[list[str]], None],
             record_files: Callable[[], Iterable[str]] = flag_record_files) -> None:
    """absl's app.run(main), with every failure `explain` knows ending as one line.

    record_files: the record files the run read (called for a DataLossError, which names no file)."""
    if "verbose" not in flags.FLAGS:
        flags.DEFINE_bool("verbose", False, "Show the traceback of a failure (also TEXTRAIN_VERBOSE=1).")

    def guarded(argv: list[str]) -> None:
        try:
            main(argv)
        except BaseException as e:  # noqa: BLE001 - SystemExit passes through below
            if isinstance(e, SystemExit) or verbose():
                raise
            known = explain(e, record_files)
            if known is None:
                raise
            fail(prog, known[0], known[1])

    def parse_flags(argv: list[str]) -> list[str]:
        try:
            return flags.FLAGS(argv)
        except flags.Error as e:  # an unknown or malformed flag: one line too
            fail(prog, f"{e} (see {prog} --helpfull)")
            raise  # unreachable

    _help_lists_textrain_flags(main)
    app.run(guarded, flags_parser=parse_flags)


def _help_lists_textrain_flags(main: Callable[[list[str]], None]) -> None:
    """Make textrain's flags key flags of the main module and give it the CLI's docstring (for `--help`)."""
    main_module = sys.modules.get("__main__")
    cli_module = sys.modules.get(getattr(main, "__module__", ""))
    if main_module is not None and not (main_module.__doc__ or "").strip() and cli_module is not None:
        main_module.__doc__ = cli_module.__doc__
    key = sys.argv[0]  # the name absl files the main module's flags under
    for module, defined in flags.FLAGS.flags_by_module_dict().items():
        if module == key or module.split(".")[0] == "textrain":
            for flag in defined:
                flags.FLAGS.register_key_flag_for_module(key, flag)
