"""One writer per directory: a lock file created atomically, holding the writer's host and pid.

    lock = acquire_dir_lock(problem_dir, "textrain-datagen")   # LockedError if another writer holds it
    ...
    lock.release()                                           # also at process exit

Decisions:
- Local paths: the lock file is created with O_CREAT|O_EXCL, which is atomic, so of two writers
  starting together exactly one gets it; the other stops at once with a message naming the lock file
  and the holder (host, pid, program, start time).
- A lock is stale when its holder is gone: same host and that pid is not alive (or alive but started
  at another time than recorded: a reused pid). A stale lock is taken over with a warning. A lock of
  another host is never taken over (we cannot see its processes): the message says to delete the file
  if that writer is known to be gone.
- The same process asking again (several Trainers in one process, a test) gets the lock it holds.
- gs:// (and other non-local file systems): tf.io.gfile has no create-if-absent, so the lock is best
  effort there: check, then write, then read back that it is ours. Two writers starting within the
  same second may both proceed; the unique `.incomplete` names (framework/fileio.py) still keep them
  from mixing bytes in one file.
"""
from __future__ import annotations

import atexit
import json
import os
import socket
import time

from absl import logging

from textrain.framework import fileio
from textrain.framework.errors import UserError

HOST = socket.gethostname()


class LockedError(UserError):
    """Another live writer holds the directory's lock."""


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state first), or None (no such file: gone,
    or not Linux)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _process_start(pid: int) -> str | None:
    """The process' start time in clock ticks since boot (Linux), to tell a reused pid apart."""
    fields = _proc_stat(pid)
    return fields[19] if fields and len(fields) > 19 else None


def process_running(pid: int) -> bool:
    """Whether `pid` is a live process of this machine. A zombie is not: a killed writer whose parent died is
    reparented to pid 1, and in a container without an init that reaps, it stays a zombie that `kill(pid, 0)`
    still finds."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    fields = _proc_stat(pid)
    return fields is None or fields[0] not in ("Z", "X")  # no /proc (not Linux): kill() found it


def _alive(pid: int, start: str | None) -> bool:
    if not process_running(pid):
        return False
    now = _process_start(pid)
    return start is None or now is None or now == start


class DirLock:
    """A held lock; `release()` removes the file if it is still ours (idempotent)."""

    def __init__(self, path: str, owner: bool):
        self.path, self.owner = path, owner
        if owner:
            atexit.register(self.release)

    def release(self) -> None:
        if not self.owner:
            return
        self.owner = False
        try:
            holder = _read(self.path)
            if holder and holder.get("host") == HOST and holder.get("pid") == os.getpid():
                fileio.remove(self.path)
        except fileio.file_errors():
            pass


def _read(path: str) -> dict | None:
    try:
        with fileio.open_file(path) as f:
            return json.loads(f.read() or "null")
    except fileio.not_found_errors():
        return None
    except (ValueError, *fileio.file_errors()):
        return {}


def _describe(holder: dict) -> str:
    started = holder.get("started")
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)) if started else "an unknown time"
    return (f"{holder.get('program', 'a textrain program')} (pid {holder.get('pid', '?')} on "
            f"{holder.get('host', '?')}, since {since})")


def create_file(path: str, content: str) -> bool:
    """Create `path` holding `content` if it does not exist; False when it exists."""
    if fileio.is_local(path):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        except PermissionError as e:
            raise UserError(f"cannot create the lock file {path}: permission denied; the directory "
                            f"{os.path.dirname(path)} must be writable (or choose another one)") from e
        with os.fdopen(fd, "w") as f:
            f.write(content)
        return True
    if fileio.exists(path):  # best effort (see the module docstring)
        return False
    with fileio.open_file(path, "w") as f:
        f.write(content)
    holder = _read(path)
    return bool(holder) and holder.get("pid") == os.getpid() and holder.get("host") == HOST


def acquire_dir_lock(directory: str, program: str, name: str = ".textrain.lock") -> DirLock:
    """Take `{directory}/{name}` for this process, or raise LockedError naming the holder."""
    fileio.makedirs(directory)
    path = os.path.join(directory, name)
    me = {"host": HOST, "pid": os.getpid(), "program": program, "started": time.time(),
          "process_start": _process_start(os.getpid())}
    for _ in range(3):
        if create_file(path, json.dumps(me)):
            return DirLock(path, owner=True)
        holder = _read(path)
        if holder is None:  # released meanwhile
            continue
        if holder.get("host") == HOST and holder.get("pid") == os.getpid():
            return DirLock(path, owner=False)  # this process holds it already
        if not holder:  # empty/unreadable: a writer died between creating and filling it, or is doing so now
            age = time.time() - fileio.stat(path).mtime_nsec / 1e9
            if age < 10:
                time.sleep(0.5)
                continue
            stale = True
        else:
            stale = holder.get("host") == HOST and not _alive(int(holder.get("pid", -1)),
                                                             holder.get("process_start"))
        if not stale:
            raise LockedError(
                f"{directory} is in use by {_describe(holder)}: lock file {path}. Wait for it to finish "
                f"or use another directory; if that process is gone (e.g. on another machine), delete "
                f"{path}")
        logging.warning("taking over the stale lock %s of %s, which is no longer running", path,
                        _describe(holder) if holder else "an unknown writer")
        try:
            fileio.remove(path)
        except fileio.not_found_errors():
            pass
    raise LockedError(f"could not take the lock {path}: another writer keeps taking it; retry")


def remove_stale_incomplete(directory: str) -> list[str]:
    """Remove the `.incomplete` files in `directory` whose writer is gone (this host, pid not alive;
    untagged ones from older versions too). Files of live writers and of other hosts are left alone.
    Returns the removed paths."""
    removed = []
    for path in fileio.glob(os.path.join(directory, "*.incomplete")):
        writer = fileio.incomplete_writer(path)
        if writer and (writer[0] != fileio.HOST_TAG or process_running(writer[1])):
            continue
        fileio.remove_if_exists(path)
        removed.append(path)
    return removed
