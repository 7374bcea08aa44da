"""JSON Lines: ~1 MB of lines at a time (orjson where installed, else the json module)."""
from __future__ import annotations

import functools
import json
import json.scanner
from typing import Any, Iterator

from textrain.framework.corpus_formats.base import (
    Batch,
    FormatError,
    Part,
    _corrupt,
    _lookup,
    _Missing,
    open_binary,
    read_errors,
)


def _line_blocks(path: str) -> Iterator[tuple[int, list[str]]]:
    """(number of the first line, the lines) of a (decompressed) UTF-8 text file, about 1 MB of whole lines at
    a time; errors name the line (bytes that are not UTF-8) or the offset (a corrupt compressed file)."""
    lineno = 1
    with open_binary(path) as f:
        pending = b""
        try:
            while True:
                data = f.read(1 << 20)
                if data:
                    data = pending + data if pending else data
                    cut = data.rfind(b"\n") + 1
                    if not cut:
                        pending = data
                        continue
                    block, pending = data[:cut], data[cut:]
                else:
                    block, pending = pending, b""
                if block:
                    try:
                        text = block.decode("utf-8")
                    except UnicodeDecodeError as e:
                        line = lineno + block.count(b"\n", 0, e.start)
                        raise FormatError(f"{path}:{line}: bytes that are not UTF-8 at byte {e.start} of its "
                                          f"block ({block[e.start:e.start + 4]!r})") from None
                    lines = text.split("\n")
                    if text.endswith("\n"):
                        lines.pop()
                    yield lineno, lines
                    lineno += len(lines)
                if not data:
                    return
        except read_errors() as e:
            offset = getattr(f, "compressed_offset", lambda: None)()
            raise _corrupt(path, f"after line {lineno - 1}" + (f" (byte {offset})" if offset else ""), e) from None


_SCAN = json.scanner.make_scanner(json.JSONDecoder())  # json.loads less its per-call layers (C when built)


def _jsonl_batches(path: str, fields: tuple[str, ...], part: Part) -> Iterator[Batch]:
    for first, lines in _line_blocks(path):
        numbers = None
        try:
            records = _json_block(lines)
        except (StopIteration, ValueError):  # a blank, padded or bad line: line by line, as json.loads sees it
            records, numbers = _jsonl_lines(lines)
        columns = [_jsonl_column(records, field) for field in fields]
        yield ((lambda j, first=first: f"line {first + j}") if numbers is None else
               (lambda j, first=first, numbers=numbers: f"line {first + numbers[j]}")), columns


def _json_block(lines: list[str]) -> list[Any]:
    """Every line parsed as one JSON value, or an error. orjson where installed (~4x faster than the json
    module here); what it refuses (NaN, integers past 64 bits, lone surrogates, ...) the json module parses,
    and where orjson accepts a text both give the same value."""
    orjson = _orjson()
    if orjson is not None:
        try:
            return list(map(orjson.loads, lines))
        except ValueError:
            pass
    scanned = [_SCAN(line, 0) for line in lines]
    if any(end != len(line) for (_, end), line in zip(scanned, lines)):
        raise ValueError("something after a value")
    return [record for record, _ in scanned]


@functools.cache
def _orjson() -> Any:
    try:
        import orjson
    except ImportError:
        return None
    return orjson


def _jsonl_lines(lines: list[str]) -> tuple[list[Any], list[int]]:
    """Each non-blank line parsed on its own (a line that is not JSON: a _Missing saying why), and its index."""
    records, numbers = [], []
    for i, line in enumerate(lines):
        try:
            records.append(json.loads(line))
        except ValueError as e:
            if not line or line.isspace():
                continue
            records.append(_Missing(f"not JSON ({e})"))
        numbers.append(i)
    return records, numbers


def _jsonl_column(records: list[Any], field: str) -> list[Any]:
    try:  # the common case: every record an object with the field at its top level
        return [r[field] for r in records]
    except (KeyError, TypeError, IndexError):
        return [_lookup(r, field) for r in records]




def batches(path: str, fields: tuple[str, ...], part: Part) -> Iterator[Batch]:
    return _jsonl_batches(path, fields, part)


def count_parts(path: str) -> None:
    """One part: the file is read whole by one job (records have no index to start a part at)."""
    return None
