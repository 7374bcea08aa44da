"""Parquet: a batch of a row group at a time, only the asked columns; parts are row groups."""
from __future__ import annotations

from typing import Any, Iterator

from textrain.framework import fileio
from textrain.framework.corpus_formats.base import (
    _BATCH_ROWS,
    Batch,
    Part,
    _arrow_errors,
    _columns_of,
    _corrupt,
    _field_values,
    _refuse_compressed,
    _require,
)


def _parquet_file(path: str) -> tuple[Any, Any, tuple]:
    _refuse_compressed(path, "Parquet")
    errors = _arrow_errors(_require("pyarrow", path))
    import pyarrow.parquet as pq
    f = fileio.open_file(path, "rb")
    try:
        return f, pq.ParquetFile(f), errors
    except errors as e:
        f.close()
        raise _corrupt(path, "its footer", e) from None


def _parquet_batches(path: str, fields: tuple[str, ...], part: Part) -> Iterator[Batch]:
    """Row group by row group, a batch of rows at a time, only the asked columns."""
    f, pf, errors = _parquet_file(path)
    with f:
        columns = _columns_of(path, pf.schema_arrow.names, fields)
        start, stop = part or (0, pf.num_row_groups)
        for group in range(start, stop):
            offset = 0
            try:
                for batch in pf.iter_batches(batch_size=_BATCH_ROWS, row_groups=[group], columns=columns,
                                             use_threads=False):
                    values = _field_values(batch, fields)
                    yield (lambda i, g=group, o=offset: f"row group {g}, row {o + i}"), values
                    offset += batch.num_rows
            except errors as e:
                raise _corrupt(path, f"row group {group}", e) from None




def batches(path: str, fields: tuple[str, ...], part: Part) -> Iterator[Batch]:
    return _parquet_batches(path, fields, part)


def count_parts(path: str) -> int:
    f, pf, _ = _parquet_file(path)
    with f:
        return pf.num_row_groups
