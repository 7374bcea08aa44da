"""What every format reader shares: settings and the path that carries them, file names, compression
(zstd frames included) and detection, the batch shape, and the bad-record budget."""
from __future__ import annotations

import bz2
import dataclasses
import gzip
import io
import json
import json.scanner
import os
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
_TEXT_BYTES = 1 << 20  # a structured file's text handed to the reader at a time
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

    def reader_settings(self) -> dict[str, Any]:
        """The ReadOptions fields these settings decide (each subclass adds those it declares)."""
        return {"input_format": self.input_format, "skip_bad_records": self.skip_bad_records}


@dataclasses.dataclass
class TextFieldSettings(RecordSettings):
    text_field: str = dataclasses.field(default="text", metadata=help_text(
        "Structured corpora: the field or column holding the text (JSON Lines: a dotted path for "
        "nested keys, e.g. meta.body)."))

    def reader_settings(self) -> dict[str, Any]:
        return dict(super().reader_settings(), text_field=self.text_field)


@dataclasses.dataclass
class DocumentSettings(TextFieldSettings):
    sentence_splitter: str = dataclasses.field(default=sentence_splitters.DEFAULT, metadata=help_text(
        "Structured corpora: how a record's lines are cut into sentences: "
        f"{' | '.join(sentence_splitters.NAMES)} (none: each line is a sentence). Plain text is never cut.",
        choices=sentence_splitters.NAMES))
    paragraphs_as_documents: bool = dataclasses.field(default=False, metadata=help_text(
        "Structured corpora: a blank line inside a record (a paragraph break) ends a document; "
        "default: a record is one document."))

    def reader_settings(self) -> dict[str, Any]:
        return dict(super().reader_settings(), sentence_splitter=self.sentence_splitter,
                    paragraphs_as_documents=self.paragraphs_as_documents)


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
    def of(cls, settings: RecordSettings, layout: str = "documents", fields: tuple[str, ...] = ()) -> "ReadOptions":
        """From a problem's settings: those its RecordSettings (sub)class declares (`reader_settings`)."""
        return cls(layout=layout, fields=tuple(fields), **settings.reader_settings())


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
        resolved = dataclasses.replace(options, input_format=fmt)
        out.append(CorpusFile(path, resolved))
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


def _key(path: CorpusFile) -> tuple[str, ReadOptions]:
    return str(path), path.options
