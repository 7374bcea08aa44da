"""CSV and TSV: pyarrow's streaming reader, Python's csv module where it stops (exact line numbers)."""
from __future__ import annotations

import csv
import io
from typing import Any, Iterator

from textrain.framework.corpus_formats.base import (
    _BATCH_ROWS,
    Batch,
    FormatError,
    Part,
    _corrupt,
    _Missing,
    open_binary,
    read_errors,
)


def _csv_batches(path: str, fields: tuple[str, ...], part: Part, delimiter: str) -> Iterator[Batch]:
    """CSV/TSV records. pyarrow's streaming CSV reader (when installed) parses ~5x faster than the csv module;
    whatever it stops at (a row of another width, bytes that are not UTF-8, a broken quote, a corrupt
    compressed file) the csv module reads from that record on, and names the line or makes it a bad record,
    as it does without pyarrow. Both give the same values of well-formed rows (tests/test_corpus_formats.py)."""
    header = _csv_header(path, delimiter)
    try:
        import pyarrow as pa
        import pyarrow.csv as pcsv
    except ImportError:
        pa = None
    if header is None or pa is None or any(f not in header for f in fields):
        yield from _csv_python_batches(path, fields, delimiter)
        return
    done = 0
    try:
        with open_binary(path) as raw:
            reader = pcsv.open_csv(
                raw, read_options=pcsv.ReadOptions(use_threads=False, block_size=1 << 20),
                parse_options=pcsv.ParseOptions(delimiter=delimiter, quote_char=False if delimiter == "\t" else '"',
                                                newlines_in_values=delimiter != "\t"),
                convert_options=pcsv.ConvertOptions(column_types={f: pa.string() for f in fields},
                                                    include_columns=list(dict.fromkeys(fields))))
            for batch in reader:
                names = batch.schema.names
                columns = [batch.column(names.index(f)).to_pylist() for f in fields]
                yield (lambda j, n=done: f"record {n + j + 1}"), columns
                done += batch.num_rows
    except FormatError:
        raise
    except Exception:  # noqa: BLE001 -- any stop of pyarrow's reader: the csv module goes on (see above)
        yield from _csv_python_batches(path, fields, delimiter, skip=done)


def _csv_header(path: str, delimiter: str) -> list[str] | None:
    """The first row's names (a BOM removed); None for an empty file or one the csv module must read."""
    try:
        with io.TextIOWrapper(open_binary(path), encoding="utf-8", newline="") as text:
            row = next(csv.reader(text, delimiter=delimiter,
                                  quoting=csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL), None)
    except Exception:  # noqa: BLE001 -- the csv module's reader reports it, naming the line
        return None
    return None if row is None else [h.lstrip("\ufeff") for h in row]


def _csv_python_batches(path: str, fields: tuple[str, ...], delimiter: str, skip: int = 0) -> Iterator[Batch]:
    """CSV/TSV by Python's csv module, naming each record by its line; the first `skip` records left out
    (those pyarrow's reader gave before it stopped: see _csv_batches)."""
    csv.field_size_limit(1 << 30)
    with io.TextIOWrapper(open_binary(path), encoding="utf-8", newline="") as text:
        reader = csv.reader(text, delimiter=delimiter,
                            quoting=csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL)
        try:
            header = next(reader, None)
            if header is None:
                return
            header = [h.lstrip("\ufeff") for h in header]
            missing = [f for f in fields if f.split(".")[0] not in header]
            if missing:
                raise FormatError(f"{path}: no column {missing[0]!r} (its header: {', '.join(header)})")
            # A dotted name that is not a column names a nested field, which CSV cells never hold.
            index = [header.index(f) if f in header else -1 for f in fields]
            width, direct = max(index) + 1, -1 not in index
            lines: list[int] = []
            columns: list[list[Any]] = [[] for _ in fields]
            for row in reader:
                if len(row) > len(header):  # an unquoted delimiter in a cell: its fields would shift
                    extra = _Missing(f"{len(row)} fields where the header has {len(header)} "
                                     f"(a delimiter inside a value that is not quoted?)")
                    for column in columns:
                        column.append(extra)
                elif direct and len(row) >= width:
                    for column, k in zip(columns, index):
                        column.append(row[k])
                elif not row:
                    continue
                else:
                    for column, k, field in zip(columns, index, fields):
                        column.append(row[k] if 0 <= k < len(row) else _Missing(f"no field {field!r}"))
                lines.append(reader.line_num)
                if skip:
                    skip -= 1
                    lines, columns = [], [[] for _ in fields]
                    continue
                if len(lines) >= _BATCH_ROWS:
                    yield (lambda j, lines=lines: f"line {lines[j]}"), columns
                    lines, columns = [], [[] for _ in fields]
            if lines:
                yield (lambda j, lines=lines: f"line {lines[j]}"), columns
        except UnicodeDecodeError:
            raise FormatError(f"{path}: bytes that are not UTF-8 after line {reader.line_num}") from None
        except csv.Error as e:
            raise FormatError(f"{path}:{reader.line_num}: {e}") from None
        except read_errors() as e:
            raise _corrupt(path, f"after line {reader.line_num}", e) from None




def csv_batches(path: str, fields: tuple[str, ...], part: Part) -> Iterator[Batch]:
    return _csv_batches(path, fields, part, ",")


def tsv_batches(path: str, fields: tuple[str, ...], part: Part) -> Iterator[Batch]:
    return _csv_batches(path, fields, part, "\t")


def count_parts(path: str) -> None:
    """One part: a CSV/TSV file is read whole by one job (a quoted field may hold newlines)."""
    return None
