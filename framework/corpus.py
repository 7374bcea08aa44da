"""Reading raw corpora.

The input format of the BERT, ELECTRA and XLNet data scripts: one sentence per line, a blank line
between documents. `<eop>` paragraph marks are left in the text for the problems that use them.

Decisions:
- Files are read through `tf.io.gfile`, so `gs://` paths work; `.gz` and `.bz2` are decompressed
  transparently (by extension), as tensor2tensor does.
- Bytes that are not UTF-8 are an error naming the file and line by default. `on_bad_utf8="replace"`
  substitutes U+FFFD, `"skip"` drops the line; both count what they did and log it once per file.
- A document never continues into the next file, and empty documents are never yielded.
"""
from __future__ import annotations

import bz2
import gzip
import io
import zlib
from typing import Iterable, Iterator, Sequence

import tensorflow as tf
from absl import logging

from framework.cli import UserError

BAD_UTF8_POLICIES = ("error", "replace", "skip")


class CorpusError(UserError, ValueError):
    """Bad or missing input text; the message names the file (and line)."""


def expand_paths(pattern: str) -> list[str]:
    """Comma-separated paths or globs -> sorted, de-duplicated file list; no match is an error."""
    if not pattern or not pattern.strip():
        raise CorpusError("no input files given (empty --input_file)")
    paths: list[str] = []
    for part in (p.strip() for p in pattern.split(",")):
        if not part:
            continue
        matches = tf.io.gfile.glob(part)
        if not matches:
            raise CorpusError(f"no file matches {part!r}")
        paths.extend(m for m in sorted(matches) if not tf.io.gfile.isdir(m))
    return sorted(dict.fromkeys(paths))


def _open_binary(path: str) -> io.BufferedIOBase:
    if not tf.io.gfile.exists(path):
        raise CorpusError(f"{path}: no such file")
    raw = tf.io.gfile.GFile(path, "rb")
    if path.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw)
    if path.endswith(".bz2"):
        return bz2.BZ2File(raw)
    return raw


def iter_lines(path: str, on_bad_utf8: str = "error") -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, line without its newline) of a text file."""
    if on_bad_utf8 not in BAD_UTF8_POLICIES:
        raise ValueError(f"on_bad_utf8 must be one of {BAD_UTF8_POLICIES}, got {on_bad_utf8!r}")
    bad = 0
    with _open_binary(path) as f:
        try:
            for lineno, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    if on_bad_utf8 == "error":
                        raise CorpusError(
                            f"{path}:{lineno}: bytes that are not UTF-8 at column {e.start + 1} "
                            f"({raw[e.start:e.start + 4]!r}); fix the file or pass "
                            f"--on_bad_utf8=replace|skip") from None
                    bad += 1
                    if on_bad_utf8 == "skip":
                        continue
                    line = raw.decode("utf-8", errors="replace")
                yield lineno, line.rstrip("\r\n")
        except (OSError, EOFError, zlib.error) as e:  # truncated/corrupt .gz or .bz2
            raise CorpusError(f"{path}: cannot read ({type(e).__name__}: {e}); the compressed file is "
                              f"corrupt or truncated: re-download or re-compress it") from None
    if bad:
        verb = "skipped" if on_bad_utf8 == "skip" else "replaced bad bytes in"
        logging.warning("%s: %s %d line(s) that were not UTF-8", path, verb, bad)


def read_documents(paths: Sequence[str] | str, on_bad_utf8: str = "error") -> Iterator[list[str]]:
    """Documents as lists of stripped, non-empty lines; a blank line or a new file ends a document."""
    if isinstance(paths, str):
        paths = expand_paths(paths)
    for path in paths:
        doc: list[str] = []
        for _, line in iter_lines(path, on_bad_utf8):
            line = line.strip()
            if line:
                doc.append(line)
            elif doc:
                yield doc
                doc = []
        if doc:
            yield doc


def count_nonempty(docs: Iterable[list[str]]) -> int:
    return sum(1 for d in docs if d)
