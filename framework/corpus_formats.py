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
- Streamed a batch at a time: JSON Lines ~1 MB of lines (orjson where installed, else the json module), CSV/TSV pyarrow's streaming reader (Python's csv
  module where pyarrow is absent or stops: exact line numbers), XML an element at a time, Parquet a batch of
  a row group (only the asked columns), Arrow a record batch; memory does not grow with the file. A batch
  is a list per field: no Python object per record but its values.
- Datagen renders each structured or compressed file once to plain text, split into units (a file, or a
  range of Parquet row groups / Arrow record batches: `plan_units`, `render_unit`) that its workers or a
  Beam stage render in parallel; the shards then read a file's units one after another
  (`CorpusFile.rendered`), which is exactly the file's text (framework/generator.py says why). Parquet and Arrow are not compressed from outside (they
  compress their columns; a .parquet.gz would have to be held in memory): refused with what to do.
- A bad record (missing field, a value that is not a string, a line that is not JSON) is an error naming
  file and line/row; `skip_bad_records=N` leaves out up to N per file, logged with the first places.
  A corrupt file (zst/bz2/gz, Parquet, an XML dump cut short) is an error naming file and offset.
- pyarrow, zstandard and mwparserfromhell are imported only when a file needs them (the `corpora` extra).
"""
from __future__ import annotations

import bisect
import bz2
import contextlib
import csv
import dataclasses
import functools
import gzip
import hashlib
import io
import itertools
import json
import json.scanner
import os
import re
import zlib
from typing import Any, Callable, Iterable, Iterator

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
_MAX_UNITS = 256         # units of work per Parquet/Arrow file (row groups are grouped past that)


class FormatError(UserError, ValueError):
    """A structured corpus file that cannot be read; the message names the file and where."""


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
    """A corpus path that carries how it is read (`options`, its `input_format` resolved) and, in a datagen
    shard job, the files datagen rendered it to (`rendered`: read instead of the source)."""

    options: ReadOptions
    rendered: tuple[str, ...]

    def __new__(cls, path: str, options: ReadOptions, rendered: tuple[str, ...] = ()) -> "CorpusFile":
        self = super().__new__(cls, path)
        self.options, self.rendered = options, tuple(rendered)
        return self

    def __getnewargs__(self) -> tuple:  # pickled to Beam workers with its options
        return str(self), self.options, self.rendered

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
        resolved = dataclasses.replace(options, input_format=fmt)
        out.append(CorpusFile(path, resolved, _RENDERED.get((str(path), resolved), ())))
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
        self._dobj, self._in_frame = self._decompressor(), False
        self._out, self._at = b"", 0  # decompressed bytes not yet read, from _at on

    def _decompressor(self) -> Any:
        return self.zstd.ZstdDecompressor().decompressobj()

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
                    self._dobj = self._decompressor()
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
    said = " ".join(str(e).split())[:200]  # one line: pyarrow's messages hold line breaks
    return FormatError(f"{path}: cannot read {where} ({type(e).__name__}: {said}); the file is "
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
# Records of each format, a batch at a time
# =============================================================================================== #
# A batch is (where, columns): one list of values per asked field, and where(i) names record i's place
# (worked out for a bad record only). Why batches: a Python object per record (a dict, a tuple, a place
# string) used to cost more than the parse; now Parquet and Arrow convert a column per batch (to_pylist
# once), and JSON Lines / CSV append each record's values to the lists in a tight loop.
Batch = tuple[Callable[[int], str], list[list[Any]]]
Part = "tuple[int, int] | None"  # Parquet row groups / Arrow record batches [start, stop); None: all
_BATCH_ROWS = 4096


class _Missing:
    """The value of a field that a record does not give (no such key, a line that is not JSON)."""

    __slots__ = ("why",)

    def __init__(self, why: str):
        self.why = why


def _lookup(record: Any, dotted: str) -> Any:
    """`record[dotted]`, or the nested value of a dotted path; a _Missing when there is none."""
    if type(record) is dict and dotted in record:
        return record[dotted]
    if isinstance(record, _Missing):
        return record
    value = record
    for key in dotted.split("."):
        if not isinstance(value, dict) or key not in value:
            return _Missing(f"no field {dotted!r}")
        value = value[key]
    return value


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


def _arrow_errors(pa: Any) -> tuple[type[BaseException], ...]:
    """What pyarrow raises on a corrupt file: ArrowInvalid (a ValueError), ArrowIOError (an OSError), ..."""
    return (pa.ArrowException, OSError, ValueError)


def _field_values(batch: Any, fields: tuple[str, ...]) -> list[list[Any]]:
    """A record batch's values of each field: one to_pylist per column (a nested field: its struct's dicts)."""
    names = batch.schema.names
    out = []
    for field in fields:
        if field in names:
            out.append(batch.column(names.index(field)).to_pylist())
        else:
            top, _, rest = field.partition(".")
            values = batch.column(names.index(top)).to_pylist()
            out.append([_Missing(f"no field {field!r}") if isinstance(found, _Missing) else found
                        for found in (_lookup(v, rest) for v in values)])
    return out


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


def _mediawiki_records(path: str) -> Iterator[tuple[str, Any]]:
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


def _record_batches(records: Iterator[tuple[str, Any]], fields: tuple[str, ...], size: int = 64
                    ) -> Iterator[Batch]:
    """(where, record) pairs as batches."""
    wheres: list[str] = []
    columns: list[list[Any]] = [[] for _ in fields]
    for where, record in records:
        wheres.append(where)
        for column, field in zip(columns, fields):
            column.append(_lookup(record, field))
        if len(wheres) >= size:
            yield wheres.__getitem__, columns
            wheres, columns = [], [[] for _ in fields]
    if wheres:
        yield wheres.__getitem__, columns


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


def _batches(path: CorpusFile, fields: tuple[str, ...], part: Part = None) -> Iterator[Batch]:
    """The batches of a structured file (of `part` of it: Parquet row groups, Arrow file record batches)."""
    fmt = path.options.input_format
    if fmt == "jsonl":
        return _jsonl_batches(path, fields, part)
    if fmt in ("csv", "tsv"):
        return _csv_batches(path, fields, part, "," if fmt == "csv" else "\t")
    if fmt == "parquet":
        return _parquet_batches(path, fields, part)
    if fmt == "arrow":
        return _arrow_batches(path, fields, part)
    if fmt == "mediawiki":
        return _record_batches(_mediawiki_records(path), fields)
    raise ValueError(f"not a structured format: {fmt!r}")


# =============================================================================================== #
# Bad records: --skip_bad_records per file
# =============================================================================================== #
class _TooMany(Exception):
    """More bad records than --skip_bad_records allows."""


class _Skips:
    """The bad records met so far, (where, why) in file order; one past `budget` raises _TooMany."""

    def __init__(self, budget: int):
        self.budget, self.places = budget, []

    def add(self, where: str, why: str) -> None:
        self.places.append((where, why))
        if len(self.places) > self.budget:
            raise _TooMany()


def too_many_error(path: str, places: list[tuple[str, str]], budget: int) -> FormatError:
    """The error naming the first bad record past --skip_bad_records=budget."""
    where, why = places[budget]
    more = f"; {budget} bad record(s) skipped before it" if budget else ""
    return FormatError(f"{path}: {where}: {why}{more}; fix the file or pass --skip_bad_records=N")


def warn_skipped(path: str, places: list[tuple[str, str]], budget: int) -> None:
    if places:
        logging.warning("%s: skipped %d bad record(s) (--skip_bad_records=%d): %s%s", path, len(places), budget,
                        ", ".join(w for w, _ in places[:_SHOWN_BAD]), ", ..." if len(places) > _SHOWN_BAD else "")


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
    """The documents (as `document_renderer` makes them) of one part of a structured file of the
    "documents" layout (Parquet row groups / Arrow record batches [start, stop), or None: the whole file),
    and its bad records. More bad records than --skip_bad_records in the part alone is the error naming
    the first past it (the file's count over all its parts: `check_bad_records`)."""
    budget = path.options.skip_bad_records
    skips = _Skips(budget)
    render = document_renderer(path)
    out: list[str] = []
    try:
        for (texts,) in _good_columns(path, part, skips):
            out.extend(map(render, _documents_of(texts, path.options.paragraphs_as_documents)))
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


def _one_line(text: str) -> str:
    """A record of the "lines" layout as one line: its line breaks become spaces."""
    if "\n" not in text and "\r" not in text:
        return text.strip()
    return " ".join(text.replace("\r", "\n").split("\n")).strip()


def _rendered_pieces(path: CorpusFile, part: Part, header: bool, skips: _Skips) -> Iterator[str]:
    """The text of `part` of a structured file (all of it: None), a batch at a time; `header`: the table
    layout's header line first (a file's first unit only)."""
    opts = path.options
    if opts.layout == "documents":
        render = document_renderer(path)
        for (texts,) in _good_columns(path, part, skips):
            documents = _documents_of(texts, opts.paragraphs_as_documents)
            if documents:
                yield "\n\n".join(map(render, documents)) + "\n\n"
    elif opts.layout == "lines":
        for (texts,) in _good_columns(path, part, skips):
            if texts:
                yield "\n".join(map(_one_line, texts)) + "\n"
    elif opts.layout == "table":
        if header:
            yield "\t".join(opts.fields) + "\n"
        for columns in _good_columns(path, part, skips):
            yield "".join("\t".join(map(_clean_cell, row)) + "\n" for row in zip(*columns))
    else:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {opts.layout!r}")


def _whole_file_pieces(path: CorpusFile) -> Iterator[str]:
    budget = path.options.skip_bad_records
    skips = _Skips(budget)
    try:
        yield from _rendered_pieces(path, None, True, skips)
    except _TooMany:
        raise too_many_error(path, skips.places, budget) from None
    warn_skipped(path, skips.places, budget)


class _RenderedStream(io.RawIOBase):
    """The rendered text of a structured file as a readable byte stream (what the text reader opens)."""

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
    """A structured file opened as the UTF-8 text of its layout (see the module docstring); one that datagen
    rendered already (`path.rendered`): its rendered files."""
    if path.rendered:
        return io.BufferedReader(_Parts(path.rendered), buffer_size=1 << 20)
    if not fileio.exists(path):
        raise FormatError(f"{path}: no such file")
    return io.BufferedReader(_RenderedStream(path), buffer_size=1 << 20)


# =============================================================================================== #
# Rendering once per datagen: a file or row groups a unit, in parallel (framework/generator.py)
# =============================================================================================== #
@dataclasses.dataclass(frozen=True)
class RenderUnit:
    """A piece of a corpus file that one worker renders to plain text at `out`: the whole file, or (`part`)
    Parquet row groups / Arrow file record batches [start, stop). `number`: its place among its file's."""

    source: CorpusFile
    number: int
    part: tuple[int, int] | None
    out: str


def needs_rendering(path: str) -> bool:
    """A structured or compressed corpus file (datagen renders it once to plain text)."""
    return isinstance(path, CorpusFile) and (path.structured or bool(_compression(path)))


def _key(path: CorpusFile) -> tuple[str, ReadOptions]:
    return str(path), path.options


def parts_of(path: CorpusFile) -> list[tuple[int, int] | None]:
    """A file's units: row groups (Parquet) or record batches (Arrow IPC file), at most _MAX_UNITS ranges of
    about equal count; any other file is one unit."""
    fmt = path.options.input_format
    count = None
    if fmt == "parquet":
        f, pf, _ = _parquet_file(path)
        with f:
            count = pf.num_row_groups
    elif fmt == "arrow":
        count = _arrow_file_batches(path)
    if not count:
        return [None]
    k = min(count, _MAX_UNITS)
    bounds = [count * i // k for i in range(k + 1)]
    return list(zip(bounds, bounds[1:]))


def plan_units(paths: Iterable[str], directory: str) -> list[RenderUnit]:
    """The units of the files among `paths` that need rendering, in corpus order; their text goes to
    `directory` (one file per unit, named by the file, its read options and the unit's number)."""
    units: list[RenderUnit] = []
    seen = set()
    for path in paths:
        if not needs_rendering(path) or _key(path) in seen:
            continue
        seen.add(_key(path))
        name = hashlib.sha256(repr(_key(path)).encode()).hexdigest()[:16]
        for number, part in enumerate(parts_of(path)):
            units.append(RenderUnit(path, number, part, os.path.join(directory, f"{name}-{number:05d}.txt")))
    return units


def render_unit(unit: RenderUnit) -> list[tuple[str, str]]:
    """Write a unit's text to `unit.out` (as `.incomplete`, renamed when whole). Returns its bad records
    (where, why); past --skip_bad_records it stops there and writes nothing (`check_units` reports it)."""
    path = unit.source
    skips = _Skips(path.options.skip_bad_records)
    tmp = fileio.incomplete_path(unit.out)
    try:
        with fileio.open_file(tmp, "wb") as f:
            if path.structured:
                for piece in _rendered_pieces(path, unit.part, unit.number == 0, skips):
                    f.write(piece.encode("utf-8"))
            else:
                _copy_decompressed(path, f)
        fileio.rename(tmp, unit.out, overwrite=True)
    except _TooMany:
        fileio.remove_if_exists(tmp)
    except BaseException:
        fileio.remove_if_exists(tmp)
        raise
    return skips.places


def _copy_decompressed(path: str, out: Any) -> None:
    with open_binary(path) as f:
        try:
            while True:
                data = f.read(1 << 22)
                if not data:
                    return
                out.write(data)
        except read_errors() as e:
            offset = getattr(f, "compressed_offset", lambda: None)()
            raise _corrupt(path, "the compressed data" + (f" (byte {offset})" if offset else ""), e) from None


def check_units(units: list[RenderUnit], bad: list[list[tuple[str, str]]]) -> None:
    """After all units of a run are rendered: a file whose units hold more bad records than its
    --skip_bad_records is an error naming the first one past it (each unit lists up to budget + 1, so the
    file's first budget + 1 are among them, in order); fewer are logged."""
    by_file: dict[tuple, tuple[CorpusFile, list]] = {}
    for unit, places in zip(units, bad):
        by_file.setdefault(_key(unit.source), (unit.source, []))[1].extend(places)
    for path, places in by_file.values():
        budget = path.options.skip_bad_records
        if len(places) > budget:
            raise too_many_error(path, places, budget)
        warn_skipped(path, places, budget)


def renderings(units: list[RenderUnit]) -> dict[tuple[str, ReadOptions], tuple[str, ...]]:
    """{(path, read options): its units' files in order}: what `reading_rendered` takes."""
    out: dict[tuple[str, ReadOptions], list[str]] = {}
    for unit in units:
        out.setdefault(_key(unit.source), []).append(unit.out)
    return {k: tuple(v) for k, v in out.items()}


_RENDERED: dict[tuple[str, ReadOptions], tuple[str, ...]] = {}


@contextlib.contextmanager
def reading_rendered(rendered: dict[tuple[str, ReadOptions], tuple[str, ...]]) -> Iterator[None]:
    """Within it, `corpus_files` gives each file that datagen rendered its rendered files
    (`CorpusFile.rendered`): the readers read those, not the source (a shard job's setting)."""
    old = dict(_RENDERED)
    _RENDERED.clear()
    _RENDERED.update(rendered)
    try:
        yield
    finally:
        _RENDERED.clear()
        _RENDERED.update(old)


class _Parts(io.RawIOBase):
    """Files read one after another as one seekable stream: a corpus file's rendered units (each ends at
    a record's end, so their concatenation is the file's text)."""

    def __init__(self, paths: tuple[str, ...]):
        self._paths = paths
        sizes = [fileio.stat(p).length for p in paths]
        self._starts = [sum(sizes[:i]) for i in range(len(sizes) + 1)]
        self._pos, self._index, self._file = 0, -1, None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._starts[-1]}[whence]
        self._pos = max(0, base + offset)
        self._index = -1  # reposition the file at the next read
        return self._pos

    def readinto(self, b: Any) -> int:
        while self._pos < self._starts[-1]:
            i = bisect.bisect_right(self._starts, self._pos) - 1
            if i != self._index:
                if self._file is not None:
                    self._file.close()
                self._file = fileio.open_file(self._paths[i], "rb")
                self._file.seek(self._pos - self._starts[i])
                self._index = i
            data = self._file.read(min(len(b), self._starts[i + 1] - self._pos))
            if not data:
                raise FormatError(f"{self._paths[i]}: shorter than when datagen rendered it")
            b[:len(data)] = data
            self._pos += len(data)
            return len(data)
        return 0

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        super().close()


def _corpus_name(name: str) -> bool:
    """A file name a folder of corpus files may hold: a known format's extension, maybe compressed."""
    base = name[:-len(_compression(name))] if _compression(name) else name
    return not name.startswith(".") and any(base.endswith(e) for e in _EXTENSIONS)


def directory_files(path: str) -> list[str]:
    """The corpus files a directory stands for: a `datasets` save_to_disk directory's Arrow files in their
    order, or else the files of a folder of corpus files named by their format (sorted); anything else is
    the error saying what each of the two needs."""
    found = dataset_dir_files(path)
    if found is not None:
        return found
    names = sorted(n for n in fileio.listdir(path) if not fileio.isdir(os.path.join(path, n)))
    files = [os.path.join(path, n) for n in names if _corpus_name(n)]
    if files:
        return files
    shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "") if names else "no files"
    kinds = ", ".join(sorted({"*" + e for e in _EXTENSIONS}))
    raise FormatError(f"{path}: a directory that is not a corpus: neither a `datasets` save_to_disk directory "
                      f"(it needs state.json and the Arrow files it lists) nor a folder of corpus files (it "
                      f"needs files named {kinds}, maybe .gz/.bz2/.zst); it holds {shown}")


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
