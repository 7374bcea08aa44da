"""Corpora in the formats users keep them: JSON Lines, Parquet, Arrow (and `datasets` save_to_disk
directories), CSV/TSV columns and MediaWiki XML dumps, each optionally .gz/.bz2/.zst, local or gs://.

How they reach the problems: `corpus.expand_paths(pattern, options)` returns `CorpusFile`s (a path that
knows how to read it), and the corpus reader opens a structured file as the plain text it stands for
(`open_rendered`), so every problem, runner and worker split reads it as it reads a text file:
- layout "documents" (pretraining): a record is a document, its lines (cut into sentences by the
  settings' `sentence_splitter`) its sentences; a blank line follows each record. Blank lines inside a
  record (paragraph breaks) do not split it, unless `paragraphs_as_documents`: then each paragraph
  is a document (for NSP and document boundaries drawn at paragraphs, as sentence-per-line corpora
  made from Wikipedia often are).
- layout "lines" (translation): a record is one line (its line breaks become spaces); a blank record
  stays a blank line, so two files of pairs stay aligned.
- layout "table" (classification): a header of the asked columns, then a tab-separated row per record
  (tabs and line breaks in values become spaces; numbers as text).
So the same text in any format gives the same documents, lines and rows, hence byte-identical shards.

Decisions:
- Streamed: JSON Lines / CSV / XML a line or element at a time, Parquet a row group, Arrow a record
  batch; memory does not grow with the file. Parquet and Arrow are not compressed from outside (they
  compress their columns; a .parquet.gz would have to be held in memory): refused with what to do.
- A bad record (missing field, a value that is not a string, a line that is not JSON) is an error naming
  file and line/row; `skip_bad_records=N` leaves out up to N per file, logged with the first places.
  A corrupt file (zst/bz2/gz, Parquet, an XML dump cut short) is an error naming file and offset.
- pyarrow, zstandard and mwparserfromhell are imported only when a file needs them (the `corpora` extra).
"""
from __future__ import annotations

import bz2
import codecs
import csv
import dataclasses
import gzip
import io
import json
import os
import re
import zlib
from typing import Any, Callable, Iterator

from absl import logging

from textrain.framework import fileio, sentence_splitters
from textrain.framework.errors import UserError
from textrain.framework.settings import help_text

FORMATS = ("auto", "text", "jsonl", "parquet", "arrow", "csv", "tsv", "mediawiki")
LAYOUTS = ("documents", "lines", "table")
COMPRESSIONS = (".gz", ".bz2", ".zst")
_EXTENSIONS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".parquet": "parquet",
               ".arrow": "arrow", ".feather": "arrow", ".ipc": "arrow", ".csv": "csv", ".tsv": "tsv",
               ".xml": "mediawiki", ".txt": "text", ".text": "text"}
_RENDER_BYTES = 1 << 20  # rendered text handed to the reader at a time
_SHOWN_BAD = 5           # bad records named in the warning


class FormatError(UserError, ValueError):
    """A structured corpus file that cannot be read; the message names the file and where."""


class _BadRecord(Exception):
    """One record that does not give text (missing field, wrong type, bad JSON): skippable."""

    def __init__(self, where: str, why: str):
        super().__init__(f"{where}: {why}")
        self.where, self.why = where, why


# =============================================================================================== #
# Settings and the path that carries them
# =============================================================================================== #
@dataclasses.dataclass
class RecordSettings:
    """How structured corpus files are read (a problem's HParams inherit these; each becomes a flag)."""

    input_format: str = dataclasses.field(default="auto", metadata=help_text(
        "Corpus file format: auto (from the name, else the content) | text | jsonl | parquet | arrow "
        "(also a `datasets` save_to_disk dir) | csv | tsv | mediawiki (XML dump); .gz/.bz2/.zst ok.",
        choices=FORMATS))
    skip_bad_records: int = dataclasses.field(default=0, metadata=help_text(
        "Structured corpora: leave out up to N bad records per file (missing field, not a string, "
        "not JSON), reported in the log; more is an error.", low=0))


@dataclasses.dataclass
class TextFieldSettings(RecordSettings):
    text_field: str = dataclasses.field(default="text", metadata=help_text(
        "Structured corpora: the field or column holding the text (JSON Lines: a dotted path for "
        "nested keys, e.g. meta.body)."))


@dataclasses.dataclass
class DocumentSettings(TextFieldSettings):
    sentence_splitter: str = dataclasses.field(default=sentence_splitters.DEFAULT, metadata=help_text(
        "Structured corpora: how a record's lines are cut into sentences: "
        f"{' | '.join(sentence_splitters.NAMES)} (none: each line is a sentence). Plain text is never cut.",
        choices=sentence_splitters.NAMES))
    paragraphs_as_documents: bool = dataclasses.field(default=False, metadata=help_text(
        "Structured corpora: a blank line inside a record (a paragraph break) ends a document; "
        "default: a record is one document."))


SETTING_NAMES = tuple(f.name for f in dataclasses.fields(DocumentSettings))
_SETTING_DEFAULTS = {f.name: f.default for f in dataclasses.fields(DocumentSettings)}


def without_default_settings(settings: dict) -> dict:
    """A manifest's settings less the reader settings left at their defaults (old data dirs stay valid)."""
    return {k: v for k, v in settings.items() if k not in _SETTING_DEFAULTS or v != _SETTING_DEFAULTS[k]}


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """How to read one file: its format, layout and fields (`fields`: the table layout's columns)."""

    input_format: str = "auto"
    layout: str = "documents"
    text_field: str = "text"
    fields: tuple[str, ...] = ()
    skip_bad_records: int = 0
    sentence_splitter: str = "none"
    paragraphs_as_documents: bool = False

    @classmethod
    def of(cls, settings: Any, layout: str = "documents", fields: tuple[str, ...] = ()) -> "ReadOptions":
        """From a problem's settings (RecordSettings and, where declared, text_field / sentence_splitter)."""
        return cls(input_format=settings.input_format, layout=layout,
                   text_field=getattr(settings, "text_field", "text"), fields=tuple(fields),
                   skip_bad_records=settings.skip_bad_records,
                   sentence_splitter=getattr(settings, "sentence_splitter", "none"),
                   paragraphs_as_documents=getattr(settings, "paragraphs_as_documents", False))


class CorpusFile(str):
    """A corpus path that carries how it is read (`options`, its `input_format` resolved)."""

    options: ReadOptions

    def __new__(cls, path: str, options: ReadOptions) -> "CorpusFile":
        self = super().__new__(cls, path)
        self.options = options
        return self

    def __getnewargs__(self) -> tuple:  # pickled to Beam workers with its options
        return str(self), self.options

    @property
    def structured(self) -> bool:
        return self.options.input_format != "text"


def corpus_files(paths: list[str], options: ReadOptions) -> list[str]:
    """`paths` (already expanded) as CorpusFiles with the format of each resolved."""
    if options.input_format not in FORMATS:
        raise UserError(f"--input_format={options.input_format!r}: use one of {', '.join(FORMATS)}")
    out = []
    for path in paths:
        fmt = options.input_format if options.input_format != "auto" else detect_format(path)
        if fmt == "tsv" and options.layout == "table" and options.input_format == "auto":
            fmt = "text"  # a .tsv of classification rows: the problem's own TSV reader reads it as it is
        out.append(CorpusFile(path, dataclasses.replace(options, input_format=fmt)))
    return out


def file_suffixes() -> tuple[str, ...]:
    """The endings a corpus file of a fixed name may have (plain text's first): `name + suffix`."""
    streamed = [e for e, f in _EXTENSIONS.items() if f not in ("parquet", "arrow", "text")]
    return ("", *COMPRESSIONS, *(e + c for e in streamed for c in ("", *COMPRESSIONS)),
            *(e for e, f in _EXTENSIONS.items() if f in ("parquet", "arrow")))


def is_structured(path: str) -> bool:
    return isinstance(path, CorpusFile) and path.structured


# =============================================================================================== #
# Files: names, compression, detection
# =============================================================================================== #
def _compression(path: str) -> str:
    return next((c for c in COMPRESSIONS if path.endswith(c)), "")


def detect_format(path: str) -> str:
    """From the name (less .gz/.bz2/.zst), else from the first bytes; plain text when nothing fits."""
    stem = path[:-len(_compression(path))] if _compression(path) else path
    ext = os.path.splitext(stem)[1].lower()
    if ext in _EXTENSIONS:
        return _EXTENSIONS[ext]
    with open_binary(path) as f:
        head = f.read(4096)
    if head.startswith(b"PAR1"):
        return "parquet"
    if head.startswith((b"ARROW1", b"\xff\xff\xff\xff")):  # IPC file; IPC stream (continuation marker)
        return "arrow"
    text = head.lstrip().lstrip(b"\xef\xbb\xbf")
    if text.startswith(b"<mediawiki") or (text.startswith(b"<?xml") and b"<mediawiki" in text):
        return "mediawiki"
    if text.startswith(b"{"):
        first, newline, _ = text.partition(b"\n")
        if not newline:  # a first line longer than what was read: an object, not prose
            return "jsonl"
        try:
            json.loads(first)
            return "jsonl"
        except ValueError:
            pass
    return "text"


def open_binary(path: str) -> io.BufferedIOBase:
    """The file's bytes, .gz/.bz2/.zst decompressed (zstandard imported only for .zst)."""
    if not fileio.exists(path):
        raise FormatError(f"{path}: no such file")
    raw = fileio.open_file(path, "rb")
    kind = _compression(path)
    if kind == ".gz":
        return gzip.GzipFile(fileobj=raw)
    if kind == ".bz2":
        return bz2.BZ2File(raw)
    if kind == ".zst":
        return _Decompressed(_ZstdFrames(raw, _require("zstandard", path)))
    return raw


class _ZstdFrames(io.RawIOBase):
    """Zstandard frames one after another, decompressed; a file cut inside a frame is an error (the
    library's stream reader ends quietly there). `offset`: compressed bytes read so far."""

    def __init__(self, raw: Any, zstd: Any):
        self.raw, self.zstd, self.offset = raw, zstd, 0
        self._dobj, self._in_frame = zstd.ZstdDecompressor().decompressobj(), False
        self._out, self._at = b"", 0  # decompressed bytes not yet read, from _at on

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while self._at >= len(self._out):
            chunk = self.raw.read(1 << 20)
            if not chunk:
                if self._in_frame:
                    raise self.zstd.ZstdError(f"the data ends inside a frame at byte {self.offset}")
                return 0
            self.offset += len(chunk)
            parts = []
            while chunk:
                parts.append(self._dobj.decompress(chunk))
                self._in_frame = not self._dobj.eof
                chunk = self._dobj.unused_data if self._dobj.eof else b""
                if self._dobj.eof:
                    self._dobj = self.zstd.ZstdDecompressor().decompressobj()
            self._out, self._at = b"".join(parts), 0
        n = min(len(b), len(self._out) - self._at)
        b[:n] = memoryview(self._out)[self._at:self._at + n]
        self._at += n
        return n

    def close(self) -> None:
        self.raw.close()
        super().close()


class _Decompressed(io.BufferedReader):
    """A decompressing reader that knows how far into the compressed file it is (for error messages)."""

    def __init__(self, frames: _ZstdFrames):
        super().__init__(frames, buffer_size=1 << 20)
        self._frames = frames

    def compressed_offset(self) -> int:
        return self._frames.offset


def _require(module: str, path: str) -> Any:
    try:
        return __import__(module)
    except ImportError:
        raise FormatError(f"{path}: reading it needs the Python package {module}: "
                          f"pip install 'textrain[corpora]'") from None


def _corrupt(path: str, where: str, e: BaseException) -> FormatError:
    return FormatError(f"{path}: cannot read {where} ({type(e).__name__}: {str(e)[:200]}); the file is "
                       f"corrupt or truncated: re-download or re-make it")


def read_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [OSError, EOFError, zlib.error]
    try:
        import zstandard
        errors.append(zstandard.ZstdError)
    except ImportError:
        pass
    return tuple(errors)


# =============================================================================================== #
# Records of each format: (where, record as a mapping)
# =============================================================================================== #
def _text_lines(path: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of a (decompressed) UTF-8 text file, streamed; errors name the line or offset."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    lineno, pending = 0, ""
    with open_binary(path) as f:
        try:
            while True:
                data = f.read(1 << 20)
                try:
                    text = pending + decoder.decode(data, final=not data)
                except UnicodeDecodeError:
                    raise FormatError(f"{path}: bytes that are not UTF-8 after line {lineno}") from None
                lines = text.split("\n")
                pending = lines.pop()
                for line in lines:
                    lineno += 1
                    yield lineno, line
                if not data:
                    break
        except read_errors() as e:
            offset = getattr(f, "compressed_offset", lambda: None)()
            raise _corrupt(path, f"after line {lineno}" + (f" (byte {offset})" if offset else ""), e) from None
    if pending:
        yield lineno + 1, pending


def _jsonl_records(path: str, fields: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
    for lineno, line in _text_lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as e:
            yield f"line {lineno}", _BadRecord(f"line {lineno}", f"not JSON ({e})")
            continue
        yield f"line {lineno}", record


def _csv_records(path: str, fields: tuple[str, ...], delimiter: str) -> Iterator[tuple[str, Any]]:
    csv.field_size_limit(1 << 30)
    lines = _text_lines(path)
    reader = csv.reader((line + "\n" for _, line in lines), delimiter=delimiter,
                        quoting=csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL)
    try:
        header = next(reader)
    except StopIteration:
        return
    header = [h.lstrip("\ufeff") for h in header]
    missing = [f for f in fields if f.split(".")[0] not in header]
    if missing:
        raise FormatError(f"{path}: no column {missing[0]!r} (its header: {', '.join(header)})")
    try:
        for row in reader:
            if not row:
                continue
            yield f"line {reader.line_num}", dict(zip(header, row))
    except csv.Error as e:
        raise FormatError(f"{path}:{reader.line_num}: {e}") from None


def _columns_of(path: str, names: list[str], fields: tuple[str, ...]) -> list[str]:
    columns = sorted({f.split(".")[0] for f in fields})
    missing = [c for c in columns if c not in names]
    if missing:
        raise FormatError(f"{path}: no column {missing[0]!r} (its columns: {', '.join(names)}); "
                          f"name one with --text_field")
    return columns


def _refuse_compressed(path: str, fmt: str) -> None:
    if _compression(path):
        raise FormatError(f"{path}: a compressed {fmt} file cannot be read in parts; decompress it "
                          f"({fmt} compresses its own columns)")


def _parquet_records(path: str, fields: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
    _refuse_compressed(path, "Parquet")
    errors = _arrow_errors(_require("pyarrow", path))
    import pyarrow.parquet as pq
    with fileio.open_file(path, "rb") as f:
        try:
            pf = pq.ParquetFile(f)
        except errors as e:
            raise _corrupt(path, "its footer", e) from None
        columns = _columns_of(path, pf.schema_arrow.names, fields)
        for group in range(pf.num_row_groups):
            try:
                rows = _rows(pf.read_row_group(group, columns=columns), columns)
            except errors as e:
                raise _corrupt(path, f"row group {group}", e) from None
            for i, row in enumerate(rows):
                yield f"row group {group}, row {i}", row


def _arrow_errors(pa: Any) -> tuple[type[BaseException], ...]:
    """What pyarrow raises on a corrupt file: ArrowInvalid (a ValueError), ArrowIOError (an OSError), ..."""
    return (pa.ArrowException, OSError, ValueError)


def _rows(table: Any, columns: list[str]) -> list[dict]:
    """A table's or record batch's rows as dicts of the asked columns (column-wise conversion: ~2x faster
    than to_pylist's row-wise one)."""
    values = [table.column(c).to_pylist() for c in columns]
    return [dict(zip(columns, row)) for row in zip(*values)]


def _arrow_records(path: str, fields: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
    _refuse_compressed(path, "Arrow")
    pa = _require("pyarrow", path)
    errors = _arrow_errors(pa)
    source = pa.memory_map(path) if fileio.is_local(path) else pa.PythonFile(fileio.open_file(path, "rb"))
    with source:
        try:
            if source.read(6) == b"ARROW1":
                source.seek(0)
                reader = pa.ipc.open_file(source)
                batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
                names = reader.schema.names
            else:
                source.seek(0)
                reader = pa.ipc.open_stream(source)
                batches, names = iter(reader), reader.schema.names
        except errors as e:
            raise _corrupt(path, "its schema", e) from None
        columns = _columns_of(path, names, fields)
        number = 0
        while True:
            try:
                batch = next(batches, None)
            except errors as e:
                raise _corrupt(path, f"record batch {number}", e) from None
            if batch is None:
                return
            rows = _rows(batch, columns)
            for i, row in enumerate(rows):
                yield f"record batch {number}, row {i}", row
            number += 1


def _mediawiki_records(path: str, fields: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
    """Articles (namespace 0, not redirects) of a MediaWiki XML export: {"title", "text"}, the text with
    its markup removed by mwparserfromhell."""
    import xml.etree.ElementTree as ET
    mw = _require("mwparserfromhell", path)
    with open_binary(path) as f:
        pages = 0
        try:
            context = ET.iterparse(f, events=("end",))
            for _, elem in context:
                if not elem.tag.endswith("}page") and elem.tag != "page":
                    continue
                pages += 1
                ns = _child_text(elem, "ns")
                redirect = any(_local(c.tag) == "redirect" for c in elem)
                title = _child_text(elem, "title") or ""
                revision = next((c for c in elem if _local(c.tag) == "revision"), None)
                wikitext = _child_text(revision, "text") if revision is not None else None
                elem.clear()  # memory stays flat however long the dump
                if ns not in (None, "0") or redirect or wikitext is None:
                    continue
                text = _strip_markup(mw, wikitext)
                yield f"page {pages} ({title!r})", {"title": title, "text": text}
        except ET.ParseError as e:
            line, column = e.position
            raise FormatError(f"{path}:{line}: the XML ends or breaks at column {column} after {pages} "
                              f"pages ({e}); the dump is truncated or corrupt") from None
        except read_errors() as e:
            raise _corrupt(path, f"after {pages} pages", e) from None


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _child_text(elem: Any, name: str) -> str | None:
    for child in elem:
        if _local(child.tag) == name:
            return child.text or ""
    return None


def _strip_markup(mw: Any, wikitext: str) -> str:
    """Article text: templates, references, tables and link targets removed; paragraphs one per line."""
    code = mw.parse(wikitext)
    # Headings are titles, not sentences; references, tables and the like are not prose.
    unwanted = [*code.filter_headings(recursive=False),
                *(t for t in code.filter_tags(recursive=True)
                  if str(t.tag).lower() in ("ref", "table", "gallery", "math", "references"))]
    for node in unwanted:
        try:
            code.remove(node)
        except ValueError:  # inside a node removed already
            pass
    text = code.strip_code(normalize=True, collapse=True)
    # list bullets and indents are markup that strip_code leaves at the start of a line
    return "\n".join(line.strip().lstrip("*#:; ").strip() for line in text.split("\n"))


def iter_records(path: str, fmt: str, fields: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
    """(where, record) of a structured file; a record that could not be parsed is a _BadRecord."""
    if fmt == "jsonl":
        return _jsonl_records(path, fields)
    if fmt in ("csv", "tsv"):
        return _csv_records(path, fields, "," if fmt == "csv" else "\t")
    if fmt == "parquet":
        return _parquet_records(path, fields)
    if fmt == "arrow":
        return _arrow_records(path, fields)
    if fmt == "mediawiki":
        return _mediawiki_records(path, fields)
    raise ValueError(f"not a structured format: {fmt!r}")


def _lookup(record: Any, dotted: str, where: str) -> Any:
    if type(record) is dict and dotted in record:  # the common case: a top-level field
        return record[dotted]
    value = record
    for key in dotted.split("."):
        if not isinstance(value, dict) or key not in value:
            raise _BadRecord(where, f"no field {dotted!r}")
        value = value[key]
    return value


def _values(path: CorpusFile) -> Iterator[tuple[str, tuple]]:
    """(where, values of the asked fields) of each good record; bad ones up to skip_bad_records."""
    opts = path.options
    fields = opts.fields if opts.layout == "table" else (opts.text_field,)
    skipped: list[str] = []
    for where, record in iter_records(path, opts.input_format, fields):
        try:
            if isinstance(record, _BadRecord):
                raise record
            values = tuple(_lookup(record, f, where) for f in fields)
            if opts.layout != "table" and not isinstance(values[0], str):
                raise _BadRecord(where, f"field {fields[0]!r} is {type(values[0]).__name__}, not a string")
        except _BadRecord as bad:
            skipped.append(bad.where)
            if len(skipped) > opts.skip_bad_records:
                more = (f"; {len(skipped) - 1} bad record(s) skipped before it"
                        if opts.skip_bad_records else "")
                raise FormatError(f"{path}: {bad}{more}; fix the file or pass --skip_bad_records=N"
                                  ) from None
            continue
        yield where, values
    if skipped:
        logging.warning("%s: skipped %d bad record(s) (--skip_bad_records=%d): %s%s", path, len(skipped),
                        opts.skip_bad_records, ", ".join(skipped[:_SHOWN_BAD]),
                        ", ..." if len(skipped) > _SHOWN_BAD else "")


# =============================================================================================== #
# Records as the text they stand for
# =============================================================================================== #
def document_records(path: CorpusFile) -> Iterator[str]:
    """The raw text of each document of the "documents" layout, not yet cut into sentences: each record
    that has any text, or each of its paragraphs with `paragraphs_as_documents`."""
    paragraphs = path.options.paragraphs_as_documents
    for _, (text,) in _values(path):
        for piece in _PARAGRAPH_BREAK.split(text) if paragraphs else (text,):
            if piece and not piece.isspace():
                yield piece


_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")  # a line break, then blank lines (\s: \r too)


def document_renderer(path: CorpusFile) -> Callable[[str], str]:
    """raw record text -> the document's text: its non-blank lines, each cut into sentences, one a line."""
    name = path.options.sentence_splitter
    split = sentence_splitters.load(name)

    def lines_of(text: str) -> Iterator[str]:
        return filter(None, map(str.strip, (text.replace("\r", "\n") if "\r" in text else text).split("\n")))

    def render(text: str) -> str:
        if name == "none":  # the hot path of sentence-per-line records: no call per line
            return "\n".join(lines_of(text))
        return "\n".join(s for line in lines_of(text) for s in split(line))

    return render


def _clean_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return " ".join(str(value).replace("\t", " ").splitlines()) if not isinstance(value, str) or \
        any(c in value for c in "\t\r\n") else value


def _rendered_pieces(path: CorpusFile) -> Iterator[str]:
    opts = path.options
    if opts.layout == "documents":
        render = document_renderer(path)
        for text in document_records(path):
            yield render(text) + "\n\n"
    elif opts.layout == "lines":
        for _, (text,) in _values(path):
            yield " ".join(text.replace("\r", "\n").split("\n")).strip() + "\n"
    elif opts.layout == "table":
        yield "\t".join(opts.fields) + "\n"
        for _, values in _values(path):
            yield "\t".join(map(_clean_cell, values)) + "\n"
    else:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {opts.layout!r}")


class _RenderedStream(io.RawIOBase):
    """The rendered text of a structured file as a readable byte stream (what the text reader opens)."""

    def __init__(self, path: CorpusFile):
        self._pieces = _rendered_pieces(path)
        self._buffer, self._at = b"", 0

    def readable(self) -> bool:
        return True

    def _fill(self) -> bool:
        parts, size = [], 0
        for piece in self._pieces:
            data = piece.encode("utf-8")
            parts.append(data)
            size += len(data)
            if size >= _RENDER_BYTES:
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


def open_rendered(path: CorpusFile) -> io.BufferedIOBase:
    """A structured file opened as the UTF-8 text of its layout (see the module docstring)."""
    if not fileio.exists(path):
        raise FormatError(f"{path}: no such file")
    return io.BufferedReader(_RenderedStream(path), buffer_size=1 << 20)


def dataset_dir_files(path: str) -> list[str] | None:
    """The Arrow files of a `datasets` save_to_disk directory in their order (None: not such a directory)."""
    state = os.path.join(path, "state.json")
    if not fileio.exists(state):
        if fileio.exists(os.path.join(path, "dataset_dict.json")):
            raise FormatError(f"{path}: a DatasetDict directory; name one split's directory "
                              f"(e.g. {os.path.join(path, 'train')})")
        return None
    with fileio.open_file(state, "r") as f:
        files = [d["filename"] for d in json.load(f).get("_data_files", [])]
    if not files:
        raise FormatError(f"{path}/state.json lists no data files")
    return [os.path.join(path, name) for name in files]
