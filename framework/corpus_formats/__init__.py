"""Corpora in the formats users keep them: JSON Lines, Parquet, Arrow (and `datasets` save_to_disk
directories), CSV/TSV columns and MediaWiki XML dumps, each optionally .gz/.bz2/.zst, local or gs://.

How they reach the problems: `corpus.expand_paths(pattern, options)` returns `CorpusFile`s (a path that
knows how to read it), and the corpus reader opens a structured file as the plain text it stands for
(`open_as_text`), so every problem, runner and worker split reads it as it reads a text file:
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
- Datagen reads a problem's document corpus once, a partition per job (framework/shuffle.py): a Parquet
  file's row groups / an Arrow file's record batches are cut into at most 256 parts (`parts_of`), each read
  alone (`part_documents`). Parquet and Arrow are not compressed from outside (they compress their
  columns; a .parquet.gz would have to be held in memory): refused with what to do.
- A bad record (missing field, a value that is not a string, a line that is not JSON) is an error naming
  file and line/row; `skip_bad_records=N` leaves out up to N per file, logged with the first places.
  A corrupt file (zst/bz2/gz, Parquet, an XML dump cut short) is an error naming file and offset.
- pyarrow, zstandard and mwparserfromhell are imported only when a file needs them (the `corpora` extra).

Layout: one module per format behind one reader interface (`batches(path, fields, part)`, and
`count_parts(path)`: None for a file read whole): jsonl, delimited (CSV/TSV), parquet, arrow, mediawiki;
`base` (settings, names, compression, detection, bad records), `records` (the readers by format, documents,
a structured file opened as text), `directories`.
"""
from __future__ import annotations

from textrain.framework.corpus_formats import arrow, delimited, jsonl, mediawiki, parquet
from textrain.framework.corpus_formats.base import (
    COMPRESSIONS,
    FORMATS,
    LAYOUTS,
    SETTING_NAMES,
    Batch,
    CorpusFile,
    DocumentSettings,
    FormatError,
    Part,
    ReadOptions,
    RecordSettings,
    TextFieldSettings,
    corpus_files,
    detect_format,
    file_suffixes,
    is_structured,
    open_binary,
    read_errors,
    too_many_error,
    warn_skipped,
    without_default_settings,
)
from textrain.framework.corpus_formats.directories import dataset_dir_files, directory_files
from textrain.framework.corpus_formats.records import (
    READERS,
    check_bad_records,
    document_formatter,
    document_records,
    open_as_text,
    part_documents,
    parts_of,
)

__all__ = ['Batch', 'COMPRESSIONS', 'CorpusFile', 'DocumentSettings', 'FORMATS', 'FormatError', 'LAYOUTS', 'Part', 'READERS', 'ReadOptions', 'RecordSettings', 'SETTING_NAMES', 'TextFieldSettings', 'check_bad_records', 'corpus_files', 'dataset_dir_files', 'detect_format', 'directory_files', 'document_formatter', 'document_records', 'file_suffixes', 'is_structured', 'open_as_text', 'open_binary', 'part_documents', 'parts_of', 'read_errors', 'too_many_error', 'warn_skipped', 'without_default_settings', 'arrow', 'delimited', 'jsonl', 'mediawiki', 'parquet']
