"""Reading raw corpora.

The input format of the BERT, ELECTRA and XLNet data scripts: one sentence per line, a blank line
between documents. `<eop>` paragraph marks are left in the text for the problems that use them.

Decisions:
- Files are read through `tf.io.gfile`, so `gs://` paths work; `.gz` and `.bz2` are decompressed
  transparently (by extension), as tensor2tensor does.
- Bytes that are not UTF-8 are an error naming the file and line by default. `on_bad_utf8="replace"`
  substitutes U+FFFD, `"skip"` drops the line; both count what they did and log it once per file.
- A document never continues into the next file, and empty documents are never yielded.
- Speed (issue #12): documents are read in blocks of `BLOCK_BYTES` (cut at line ends, decoded in one call),
  split at blank lines by one regex, and a document's lines are split only when someone wants them
  (`iter_document_texts` + `document_lines`): a datagen shard that scans the whole corpus to find its own
  round-robin documents then pays C-speed scanning for the others (tf.io.gfile's per-line `readline` cost
  ~7 us a line, most of electra_pretrain's time when 8 shards each read the corpus). A block with bytes
  that are not UTF-8 falls back to the per-line decoding of `iter_lines`, so messages, line numbers and the
  replace/skip policies are the same. Memory: one block plus the current document.
"""
from __future__ import annotations

import bz2
import gzip
import io
import re
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


BLOCK_BYTES = 1 << 22  # bytes read at a time by the block reader (a block is then extended to a line end)


def _decode_lines_of(block: bytes, path: str, first_lineno: int, on_bad_utf8: str) -> tuple[str, int]:
    """`block` (whole lines) decoded line by line as `iter_lines` does: the error names the line; 'skip'
    drops the line with its newline (it does not become a blank line). Returns the text and the number of
    bad lines."""
    out, bad = [], 0
    ends_line = block.endswith(b"\n")
    raws = (block[:-1] if ends_line else block).split(b"\n")
    for i, raw in enumerate(raws):
        end = "\n" if ends_line or i < len(raws) - 1 else ""
        try:
            out.append(raw.decode("utf-8") + end)
        except UnicodeDecodeError as e:
            if on_bad_utf8 == "error":
                shown = (raw + end.encode())[e.start:e.start + 4]
                raise CorpusError(f"{path}:{first_lineno + i}: bytes that are not UTF-8 at column {e.start + 1} "
                                  f"({shown!r}); fix the file or pass --on_bad_utf8=replace|skip") from None
            bad += 1
            if on_bad_utf8 == "replace":
                out.append(raw.decode("utf-8", errors="replace") + end)
    return "".join(out), bad


def iter_text_blocks(path: str, on_bad_utf8: str = "error") -> Iterator[str]:
    """The text of a file in blocks of about BLOCK_BYTES that end at a line end (the newline is kept; the
    last block may lack it). The lines of the concatenated blocks are exactly those of `iter_lines`."""
    if on_bad_utf8 not in BAD_UTF8_POLICIES:
        raise ValueError(f"on_bad_utf8 must be one of {BAD_UTF8_POLICIES}, got {on_bad_utf8!r}")
    lineno, bad = 1, 0
    # tf.io.gfile's readline (what iter_lines gets for an uncompressed file) drops every carriage return,
    # wherever it is in the line; gzip/bz2 lines keep theirs. Blocks do the same, before decoding.
    drop_cr = not path.endswith((".gz", ".bz2"))

    def decode(block: bytes) -> str:
        nonlocal lineno, bad
        if drop_cr:
            block = block.replace(b"\r", b"")
        try:
            text = block.decode("utf-8")
        except UnicodeDecodeError:
            text, n = _decode_lines_of(block, path, lineno, on_bad_utf8)
            bad += n
        lineno += block.count(b"\n")
        return text

    with _open_binary(path) as f:
        pending: list[bytes] = []  # bytes after the last newline seen (a line longer than a block grows here)
        try:
            while True:
                data = f.read(BLOCK_BYTES)
                if not data:
                    break
                cut = data.rfind(b"\n") + 1
                if not cut:
                    pending.append(data)
                    continue
                block = b"".join([*pending, data[:cut]]) if pending else data[:cut]
                pending = [data[cut:]] if cut < len(data) else []
                text = decode(block)
                if text:  # empty when every line of the block was skipped
                    yield text
            if pending and (text := decode(b"".join(pending))):
                yield text
        except (OSError, EOFError, zlib.error) as e:  # truncated/corrupt .gz or .bz2
            raise CorpusError(f"{path}: cannot read ({type(e).__name__}: {e}); the compressed file is "
                              f"corrupt or truncated: re-download or re-compress it") from None
    if bad:
        verb = "skipped" if on_bad_utf8 == "skip" else "replaced bad bytes in"
        logging.warning("%s: %s %d line(s) that were not UTF-8", path, verb, bad)


# One or more blank lines (only whitespace, as str.strip sees it: `\s` is str.isspace) after a line end.
_BLANK_LINES = re.compile(r"\n(?:[^\S\n]*\n)+")


def _is_blank(text: str) -> bool:
    return not text or text.isspace()


def iter_document_texts(paths: Sequence[str] | str, on_bad_utf8: str = "error") -> Iterator[str]:
    """The documents of `read_documents`, each as its raw text (lines joined by newlines, not yet stripped):
    `document_lines(text)` gives the lines. Cheap for documents nobody splits into lines."""
    if isinstance(paths, str):
        paths = expand_paths(paths)
    for path in paths:
        pending: list[str] = []  # pieces of the document that continues into the next block
        for block in iter_text_blocks(path, on_bad_utf8):
            # Framed by newlines so that every line of the block, first and last included, is seen whole.
            pieces = _BLANK_LINES.split("\n" + (block[:-1] if block.endswith("\n") else block) + "\n")
            if len(pieces) == 1:
                pending.append(pieces[0])
                continue
            first = "".join([*pending, pieces[0]]) if pending else pieces[0]
            for text in (first, *pieces[1:-1]):
                if not _is_blank(text):
                    yield text
            pending = [pieces[-1]]
        last = "".join(pending)
        if not _is_blank(last):
            yield last


def document_lines(text: str) -> list[str]:
    """The stripped, non-empty lines of a document's (or a file's) text."""
    return [s for s in map(str.strip, text.split("\n")) if s]


def read_text(path: str, on_bad_utf8: str = "error") -> str:
    """A whole file's text (one document when blank lines do not separate documents)."""
    return "".join(iter_text_blocks(path, on_bad_utf8))


def read_documents(paths: Sequence[str] | str, on_bad_utf8: str = "error") -> Iterator[list[str]]:
    """Documents as lists of stripped, non-empty lines; a blank line or a new file ends a document."""
    for text in iter_document_texts(paths, on_bad_utf8):
        yield document_lines(text)


def count_nonempty(docs: Iterable[list[str]]) -> int:
    return sum(1 for d in docs if d)
