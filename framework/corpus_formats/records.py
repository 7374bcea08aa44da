"""Records of any format as the text they stand for: the readers by format (one interface: each format
module's `batches(path, fields, part)` and, where a file has parts, `count_parts(path)`), bad records per
file, documents, and a structured file opened as plain text."""
from __future__ import annotations

import io
import re
from typing import Any, Callable, Iterator

from textrain.framework import fileio, sentence_splitters
from textrain.framework.corpus_formats import arrow, delimited, jsonl, mediawiki, parquet
from textrain.framework.corpus_formats.base import (
    _MAX_UNITS,
    _TEXT_BYTES,
    LAYOUTS,
    Batch,
    CorpusFile,
    FormatError,
    Part,
    _key,
    _Missing,
    _Skips,
    _TooMany,
    too_many_error,
    warn_skipped,
)

READERS = {"jsonl": jsonl, "csv": delimited, "tsv": delimited, "parquet": parquet, "arrow": arrow,
           "mediawiki": mediawiki}  # a new format: one module, one entry here


def _batches(path: CorpusFile, fields: tuple[str, ...], part: Part = None) -> Iterator[Batch]:
    """The batches of a structured file (of `part` of it: Parquet row groups, Arrow file record batches)."""
    fmt = path.options.input_format
    if fmt == "csv":
        return delimited.csv_batches(path, fields, part)
    if fmt == "tsv":
        return delimited.tsv_batches(path, fields, part)
    if fmt not in READERS:
        raise ValueError(f"not a structured format: {fmt!r}")
    return READERS[fmt].batches(path, fields, part)


def parts_of(path: CorpusFile) -> list[tuple[int, int] | None]:
    """A file's parts: row groups (Parquet) or record batches (Arrow IPC file), at most _MAX_UNITS ranges of
    about equal count; any other file is one part."""
    reader = READERS.get(path.options.input_format) if isinstance(path, CorpusFile) else None
    count = reader.count_parts(path) if reader is not None else None
    if not count:
        return [None]
    k = min(count, _MAX_UNITS)
    bounds = [count * i // k for i in range(k + 1)]
    return list(zip(bounds, bounds[1:]))


def _good_columns(path: CorpusFile, part: Part, skips: _Skips) -> Iterator[list[list[Any]]]:
    """The columns of each batch less its bad records (a field missing; documents and lines: not a string)."""
    opts = path.options
    fields = opts.fields if opts.layout == "table" else (opts.text_field,)
    strings = opts.layout != "table"
    for where, columns in _batches(path, fields, part):
        bad: dict[int, str] = {}
        for field, column in zip(fields, columns):
            if strings:
                rows = [i for i, v in enumerate(column) if type(v) is not str]
            else:
                rows = [i for i, v in enumerate(column) if type(v) is _Missing]
            for i in rows:
                v = column[i]
                bad.setdefault(i, v.why if isinstance(v, _Missing) else
                               f"field {field!r} is {type(v).__name__}, not a string")
        if bad:
            for i in sorted(bad):
                skips.add(where(i), bad[i])
            columns = [[v for i, v in enumerate(column) if i not in bad] for column in columns]
        yield columns


# =============================================================================================== #
# Records as the text they stand for
# =============================================================================================== #
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")  # a line break, then blank lines (\s: \r too)


def _documents_of(texts: list[str], paragraphs: bool) -> list[str]:
    """The raw documents of records' texts: each that has any text, or each of its paragraphs."""
    if paragraphs:
        return [p for t in texts for p in _PARAGRAPH_BREAK.split(t) if p and not p.isspace()]
    return [t for t in texts if t and not t.isspace()]


def document_records(path: CorpusFile) -> Iterator[str]:
    """The raw text of each document of the "documents" layout, not yet cut into sentences: each record
    that has any text, or each of its paragraphs with `paragraphs_as_documents`."""
    budget = path.options.skip_bad_records
    skips = _Skips(budget)
    try:
        for (texts,) in _good_columns(path, None, skips):
            yield from _documents_of(texts, path.options.paragraphs_as_documents)
    except _TooMany:
        raise too_many_error(path, skips.places, budget) from None
    warn_skipped(path, skips.places, budget)


def part_documents(path: CorpusFile, part: Part) -> tuple[list[str], list[tuple[str, str]]]:
    """The documents (as `document_formatter` makes them) of one part of a structured file of the
    "documents" layout (Parquet row groups / Arrow record batches [start, stop), or None: the whole file),
    and its bad records. More bad records than --skip_bad_records in the part alone is the error naming
    the first past it (the file's count over all its parts: `check_bad_records`)."""
    budget = path.options.skip_bad_records
    skips = _Skips(budget)
    to_text = document_formatter(path)
    out: list[str] = []
    try:
        for (texts,) in _good_columns(path, part, skips):
            out.extend(map(to_text, _documents_of(texts, path.options.paragraphs_as_documents)))
    except _TooMany:
        raise too_many_error(path, skips.places, budget) from None
    return out, skips.places


def check_bad_records(files: list[tuple[CorpusFile, list[tuple[str, str]]]]) -> None:
    """After every part of a run is read: a file whose parts hold more bad records than its
    --skip_bad_records is the error naming the first past it; fewer are logged once per file."""
    by_file: dict[tuple, tuple[CorpusFile, list]] = {}
    for path, places in files:
        if isinstance(path, CorpusFile):
            by_file.setdefault(_key(path), (path, []))[1].extend(places)
    for path, places in by_file.values():
        budget = path.options.skip_bad_records
        if len(places) > budget:
            raise too_many_error(path, places, budget)
        warn_skipped(path, places, budget)


def document_formatter(path: CorpusFile) -> Callable[[str], str]:
    """raw record text -> the document's text: its non-blank lines, each cut into sentences, one a line."""
    name = path.options.sentence_splitter
    split = sentence_splitters.load(name)

    def lines_of(text: str) -> Iterator[str]:
        return filter(None, map(str.strip, (text.replace("\r", "\n") if "\r" in text else text).split("\n")))

    def to_text(text: str) -> str:
        if name == "none":  # the hot path of sentence-per-line records: no call per line
            return "\n".join(lines_of(text))
        return "\n".join(s for line in lines_of(text) for s in split(line))

    return to_text


def _clean_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return " ".join(str(value).replace("\t", " ").splitlines()) if not isinstance(value, str) or \
        any(c in value for c in "\t\r\n") else value


def _one_line(text: str) -> str:
    """A record of the "lines" layout as one line: its line breaks become spaces."""
    if "\n" not in text and "\r" not in text:
        return text.strip()
    return " ".join(text.replace("\r", "\n").split("\n")).strip()


def _text_pieces(path: CorpusFile, skips: _Skips) -> Iterator[str]:
    """The text of a structured file, a batch at a time (the table layout: its header line first)."""
    opts = path.options
    if opts.layout == "documents":
        to_text = document_formatter(path)
        for (texts,) in _good_columns(path, None, skips):
            documents = _documents_of(texts, opts.paragraphs_as_documents)
            if documents:
                yield "\n\n".join(map(to_text, documents)) + "\n\n"
    elif opts.layout == "lines":
        for (texts,) in _good_columns(path, None, skips):
            if texts:
                yield "\n".join(map(_one_line, texts)) + "\n"
    elif opts.layout == "table":
        yield "\t".join(opts.fields) + "\n"
        for columns in _good_columns(path, None, skips):
            yield "".join("\t".join(map(_clean_cell, row)) + "\n" for row in zip(*columns))
    else:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {opts.layout!r}")


def _whole_file_pieces(path: CorpusFile) -> Iterator[str]:
    budget = path.options.skip_bad_records
    skips = _Skips(budget)
    try:
        yield from _text_pieces(path, skips)
    except _TooMany:
        raise too_many_error(path, skips.places, budget) from None
    warn_skipped(path, skips.places, budget)


class _TextStream(io.RawIOBase):
    """The text of a structured file as a readable byte stream (what the text reader opens)."""

    def __init__(self, path: CorpusFile):
        self._pieces = _whole_file_pieces(path)
        self._buffer, self._at = b"", 0

    def readable(self) -> bool:
        return True

    def _fill(self) -> bool:
        parts, size = [], 0
        for piece in self._pieces:
            data = piece.encode("utf-8")
            parts.append(data)
            size += len(data)
            if size >= _TEXT_BYTES:
                break
        self._buffer, self._at = b"".join(parts), 0
        return bool(self._buffer)

    def readinto(self, b: Any) -> int:
        if self._at >= len(self._buffer) and not self._fill():
            return 0
        n = min(len(b), len(self._buffer) - self._at)
        b[:n] = self._buffer[self._at:self._at + n]
        self._at += n
        return n


def open_as_text(path: CorpusFile) -> io.BufferedIOBase:
    """A structured file opened as the UTF-8 text of its layout (see the module docstring)."""
    if not fileio.exists(path):
        raise FormatError(f"{path}: no such file")
    return io.BufferedReader(_TextStream(path), buffer_size=1 << 20)
