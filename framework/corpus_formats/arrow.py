"""Arrow IPC files and streams (and `datasets` save_to_disk files): a record batch at a time; parts are
record batches (of a file; a stream is one part)."""
from __future__ import annotations

import itertools
from typing import Any, Iterator

from textrain.framework import fileio
from textrain.framework.corpus_formats.base import (
    Batch,
    Part,
    _arrow_errors,
    _columns_of,
    _corrupt,
    _field_values,
    _refuse_compressed,
    _require,
)


def _arrow_source(path: str) -> tuple[Any, Any]:
    _refuse_compressed(path, "Arrow")
    pa = _require("pyarrow", path)
    return pa, (pa.memory_map(path) if fileio.is_local(path) else pa.PythonFile(fileio.open_file(path, "rb")))


def _arrow_batches(path: str, fields: tuple[str, ...], part: Part) -> Iterator[Batch]:
    """Record batch by record batch (an IPC file: those of `part`; a stream: all, in order)."""
    pa, source = _arrow_source(path)
    errors = _arrow_errors(pa)
    with source:
        try:
            if source.read(6) == b"ARROW1":
                source.seek(0)
                reader = pa.ipc.open_file(source)
                start, stop = part or (0, reader.num_record_batches)
                numbers = range(start, stop)
                batches = (reader.get_batch(i) for i in numbers)
            else:
                source.seek(0)
                reader = pa.ipc.open_stream(source)
                batches, numbers = iter(reader), itertools.count()
        except errors as e:
            raise _corrupt(path, "its schema", e) from None
        _columns_of(path, reader.schema.names, fields)
        for number in numbers:
            try:
                batch = next(batches, None)
            except errors as e:
                raise _corrupt(path, f"record batch {number}", e) from None
            if batch is None:
                return
            yield (lambda i, n=number: f"record batch {n}, row {i}"), _field_values(batch, fields)


def _arrow_file_batches(path: str) -> int | None:
    """The record batches of an Arrow IPC file (None: a stream, read whole)."""
    pa, source = _arrow_source(path)
    with source:
        if source.read(6) != b"ARROW1":
            return None
        source.seek(0)
        try:
            return pa.ipc.open_file(source).num_record_batches
        except _arrow_errors(pa) as e:
            raise _corrupt(path, "its footer", e) from None




def batches(path: str, fields: tuple[str, ...], part: Part) -> Iterator[Batch]:
    return _arrow_batches(path, fields, part)


def count_parts(path: str) -> int | None:
    return _arrow_file_batches(path)
