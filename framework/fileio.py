"""File access for the data side: local paths through Python's own file calls, every other path (gs://, hdfs://,
s3://, file://...) through `tf.io.gfile`.

Why two routes: `tf.io.gfile` is what makes `gs://` work, but reaching it imports TensorFlow (~2.4 CPU-seconds and
~540 MiB per process), which a datagen job on local files never needs otherwise. The functions here keep
gfile's names and behaviour (makedirs is `exist_ok`, text is UTF-8 without newline translation, glob sees hidden
files, a missing file is FileNotFoundError on both routes) so callers do not care which route a path takes.

Atomic writes: a file is written under a temporary name unique to this writer (`incomplete_path`:
`<name>.<host>-<pid>.incomplete`) and renamed when whole, so a half-written file never has the final name and two
writers never mix bytes under one name (framework/locks.py removes the temporary files of dead writers).

TFRecords: a local file is framed here (length, masked CRC32C of the length, data, masked CRC32C of the data: the
format `tf.io.TFRecordWriter` writes, byte for byte; tests/test_fileio.py proves it) with `google-crc32c`'s C code;
without that C extension, or for a remote path, `tf.io.TFRecordWriter` does it.
"""
from __future__ import annotations

import glob as _glob
import json
import os
import re
import shutil
import socket
import struct
from typing import IO, Any, Iterator

from textrain.framework import lazy_tf
from textrain.framework.lazy_tf import tf

try:
    import google_crc32c as _crc32c

    _FAST_CRC = _crc32c.implementation == "c"
except ImportError:  # pragma: no cover - a dependency; without it TensorFlow frames the records
    _crc32c, _FAST_CRC = None, False


def not_found_errors() -> tuple[type[BaseException], ...]:
    """What a missing file raises: FileNotFoundError, and gfile's NotFoundError once TensorFlow is loaded
    (before that no TensorFlow error can have been raised). For `except fileio.not_found_errors():`."""
    return (FileNotFoundError, tf.errors.NotFoundError) if lazy_tf.loaded() else (FileNotFoundError,)


def file_errors() -> tuple[type[BaseException], ...]:
    """Any file-system error of either route: OSError, and TensorFlow's OpError once it is loaded."""
    return (OSError, tf.errors.OpError) if lazy_tf.loaded() else (OSError,)


def is_local(path: str) -> bool:
    """A path of this machine's file system (no `scheme://`)."""
    return "://" not in path


def exists(path: str) -> bool:
    return os.path.exists(path) if is_local(path) else tf.io.gfile.exists(path)


def isdir(path: str) -> bool:
    return os.path.isdir(path) if is_local(path) else tf.io.gfile.isdir(path)


def makedirs(path: str) -> None:
    """Create `path` and its parents; no error if it exists (as gfile.makedirs)."""
    if is_local(path):
        os.makedirs(path, exist_ok=True)
    else:
        tf.io.gfile.makedirs(path)


def glob(pattern: str) -> list[str]:
    """Paths matching `pattern` (hidden files included, as gfile's glob)."""
    if is_local(pattern):
        return _glob.glob(pattern, include_hidden=True)
    return tf.io.gfile.glob(pattern)


def listdir(path: str) -> list[str]:
    return os.listdir(path) if is_local(path) else tf.io.gfile.listdir(path)


def remove(path: str) -> None:
    """Delete a file; FileNotFoundError if absent (gfile's NotFoundError is turned into it)."""
    if is_local(path):
        os.remove(path)
        return
    try:
        tf.io.gfile.remove(path)
    except tf.errors.NotFoundError as e:
        raise FileNotFoundError(str(e)) from None


def rmtree(path: str) -> None:
    if is_local(path):
        shutil.rmtree(path)
    else:
        tf.io.gfile.rmtree(path)


def rename(src: str, dst: str, overwrite: bool = False) -> None:
    """Move `src` to `dst` (atomic on a local file system); FileExistsError if `dst` exists and not `overwrite`."""
    if is_local(src) and is_local(dst):
        if not overwrite and os.path.exists(dst):
            raise FileExistsError(f"{dst} exists")
        os.replace(src, dst)
    else:
        tf.io.gfile.rename(src, dst, overwrite=overwrite)


class Stat:
    """The two figures callers use from gfile.stat."""

    def __init__(self, length: int, mtime_nsec: int):
        self.length, self.mtime_nsec = length, mtime_nsec


def stat(path: str) -> Stat:
    if is_local(path):
        st = os.stat(path)
        return Stat(st.st_size, st.st_mtime_ns)
    try:
        st = tf.io.gfile.stat(path)
    except tf.errors.NotFoundError as e:
        raise FileNotFoundError(str(e)) from None
    return Stat(st.length, st.mtime_nsec)


def open_file(path: str, mode: str = "r") -> IO:
    """A file object as `tf.io.gfile.GFile(path, mode)` gives: text is UTF-8, newlines untranslated."""
    if not is_local(path):
        return tf.io.gfile.GFile(path, mode)
    if "b" in mode:
        return open(path, mode)
    return open(path, mode, encoding="utf-8", newline="")


# ----------------------------------------------------------------------------------------------- #
# TFRecords
# ----------------------------------------------------------------------------------------------- #
_MASK_DELTA = 0xA282EAD8


def _masked_crc(data: bytes) -> bytes:
    """TFRecord's CRC: CRC32C rotated right by 15 bits plus a constant (so CRCs of CRCs stay useful)."""
    crc = _crc32c.value(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF)


def frame_records(records: list[bytes]) -> bytes:
    """`records` in TFRecord framing, concatenated."""
    parts = []
    for record in records:
        length = struct.pack("<Q", len(record))
        parts += (length, _masked_crc(length), record, _masked_crc(record))
    return b"".join(parts)


class TFRecordWriter:
    """`tf.io.TFRecordWriter`'s interface (write, flush, close, a context manager); local files are framed here.
    A failed local write (disk full, file size limit) raises OSError naming the file, as TensorFlow's does."""

    def __init__(self, path: str):
        self._path = path
        self._local = is_local(path) and _FAST_CRC
        self._file = open(path, "wb", buffering=1 << 20) if self._local else tf.io.TFRecordWriter(path)

    def _named(self, e: OSError) -> OSError:
        return e if e.filename else OSError(e.errno, e.strerror, self._path)

    def write(self, record: bytes) -> None:
        self.write_many([record])

    def write_many(self, records: list[bytes]) -> None:
        if not self._local:
            for record in records:
                self._file.write(record)
            return
        try:
            self._file.write(frame_records(records))
        except OSError as e:
            raise self._named(e) from None

    def flush(self) -> None:
        try:
            self._file.flush()
        except OSError as e:
            raise self._named(e) from None

    def close(self) -> None:
        try:
            self._file.close()
        except OSError as e:
            raise self._named(e) from None

    def __enter__(self) -> "TFRecordWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def iter_tfrecords(path: str) -> Iterator[bytes]:
    """The records of a TFRecord file, CRCs checked (a local file read here, others through tf.data)."""
    if not (is_local(path) and _FAST_CRC):
        for record in tf.data.TFRecordDataset(path):
            yield record.numpy()
        return
    with open(path, "rb") as f:
        offset = 0
        while True:
            header = f.read(12)
            if not header:
                return
            record = f.read(struct.unpack("<Q", header[:8])[0]) if len(header) == 12 else b""
            footer = f.read(4)
            if (len(header) < 12 or _masked_crc(header[:8]) != header[8:] or len(footer) < 4
                    or _masked_crc(record) != footer):
                raise ValueError(f"{path}: corrupted record at byte {offset}")
            offset += 16 + len(record)
            yield record


# ----------------------------------------------------------------------------------------------- #
# atomic writes
# ----------------------------------------------------------------------------------------------- #
HOST_TAG = re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname()) or "host"
_TAGGED = re.compile(r"\.([A-Za-z0-9_]+)-(\d+)\.incomplete$")


def incomplete_path(path: str, part: str = "") -> str:
    """The temporary name of `path` while this process writes it: unique per host and pid."""
    return f"{path}{'.' + part if part else ''}.{HOST_TAG}-{os.getpid()}.incomplete"


def incomplete_writer(path: str) -> tuple[str, int] | None:
    """(host tag, pid) of the writer of a temporary `path` (`incomplete_path`); None when untagged."""
    m = _TAGGED.search(path)
    return (m.group(1), int(m.group(2))) if m else None


def remove_if_exists(path: str) -> None:
    if exists(path):
        remove(path)


def _write_atomic(path: str, data: str | bytes, mode: str) -> None:
    tmp = incomplete_path(path)
    try:
        with open_file(tmp, mode) as f:
            f.write(data)
        rename(tmp, path, overwrite=True)
    except BaseException:
        remove_if_exists(tmp)
        raise


def write_text_atomic(path: str, text: str) -> None:
    """Write `text` (UTF-8) under a temporary name, then rename it to `path`."""
    _write_atomic(path, text, "w")


def write_bytes_atomic(path: str, data: bytes) -> None:
    """Write `data` under a temporary name, then rename it to `path`."""
    _write_atomic(path, data, "wb")


def write_json_atomic(path: str, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=1, sort_keys=True) + "\n")


def read_json(path: str) -> Any:
    with open_file(path) as f:
        return json.load(f)
