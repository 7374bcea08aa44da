"""Reading raw corpora.

The input format of the BERT, ELECTRA and XLNet data scripts: one sentence per line, a blank line
between documents. `<eop>` paragraph marks are left in the text for the problems that use them.

Decisions:
- Files are read through `tf.io.gfile`, so `gs://` paths work; `.gz` and `.bz2` are decompressed
  transparently (by extension), as tensor2tensor does (`.zst` too, through corpus_formats).
- Other formats (JSON Lines, Parquet, Arrow, CSV/TSV, MediaWiki XML): `expand_paths(pattern, options)`
  gives `corpus_formats.CorpusFile`s, opened here as the text they stand for; documents of records are
  counted without being cut into sentences unless kept (see corpus_formats). A problem's own
  `generate_samples` reads its files whole in every shard job; a document corpus is read once, in
  partitions (framework/shuffle.py).
- Bytes that are not UTF-8 are an error naming the file and line by default. `on_bad_utf8="replace"`
  substitutes U+FFFD, `"skip"` drops the line; both count what they did and log it once per file.
- A document never continues into the next file, and empty documents are never yielded.
- Speed: files are read in blocks of `BLOCK_BYTES` cut at line ends. `iter_document_texts`
  finds documents in the raw bytes (blank lines = lines of UTF-8 whitespace only, exactly str.isspace) and,
  with `keep`, decodes and copies out only the documents asked for; `document_lines` splits one into lines.
  A reader that keeps some documents thus pays a C-speed byte scan for the others (tf.io.gfile's per-line
  `readline` costs ~7 us a line). `byte_range` reads one range of a plain file (a datagen partition:
  framework/shuffle.py). Bytes that are not UTF-8 fall back to the per-line decoding of
  `iter_lines` (same messages, line numbers, replace/skip); with `keep` they are reported by the reader
  that keeps their document (a shard fails on its own documents only). "skip", which can empty a document
  and so shift the indices after it, decodes every block first. As tf.io.gfile's readline does, carriage
  returns of uncompressed files are dropped wherever they are. Memory: one block plus the current document.
"""
from __future__ import annotations

import bz2
import gzip
import io
import itertools
import re
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
from absl import logging

from textrain.framework import corpus_formats, fileio
from textrain.framework.errors import UserError

BAD_UTF8_POLICIES = ("error", "replace", "skip")


class CorpusError(UserError, ValueError):
    """Bad or missing input text; the message names the file (and line)."""


def expand_paths(pattern: str, options: corpus_formats.ReadOptions | None = None) -> list[str]:
    """Comma-separated paths or globs -> sorted, de-duplicated file list; no match is an error.

    With `options` (a problem's reader settings) the paths are `corpus_formats.CorpusFile`s, each with
    its format, and a `datasets` save_to_disk directory stands for its Arrow files."""
    if not pattern or not pattern.strip():
        raise CorpusError("no input files given (empty --input_file)")
    paths: list[str] = []
    for part in (p.strip() for p in pattern.split(",")):
        if not part:
            continue
        matches = fileio.glob(part)
        if not matches:
            raise CorpusError(f"no file matches {part!r}")
        for m in sorted(matches):
            if not fileio.isdir(m):
                paths.append(m)
            elif options is not None:
                paths.extend(corpus_formats.directory_files(m))
    paths = sorted(dict.fromkeys(paths))
    return paths if options is None else corpus_formats.corpus_files(paths, options)


def is_compressed(path: str) -> bool:
    """A .gz/.bz2/.zst file, decompressed by the reader (whose lines keep their carriage returns)."""
    return path.endswith((".gz", ".bz2", ".zst"))


def _open_binary(path: str) -> io.BufferedIOBase:
    if corpus_formats.is_structured(path):  # the text its records stand for
        return corpus_formats.open_as_text(path)
    if path.endswith(".zst"):
        return corpus_formats.open_binary(path)
    if not fileio.exists(path):
        raise CorpusError(f"{path}: no such file")
    raw = fileio.open_file(path, "rb")
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
    # tf.io.gfile's readline drops every carriage return of an uncompressed file's line (see
    # _iter_byte_blocks); a local file read here does the same, so both routes give the same lines.
    drop_cr = not is_compressed(path)
    with _open_binary(path) as f:
        try:
            for lineno, raw in enumerate(f, start=1):
                if drop_cr:
                    raw = raw.replace(b"\r", b"")
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
        except corpus_formats.read_errors() as e:  # truncated/corrupt .gz, .bz2 or .zst
            raise CorpusError(f"{path}: cannot read ({type(e).__name__}: {e}); the compressed file is "
                              f"corrupt or truncated: re-download or re-compress it") from None
    if bad:
        verb = "skipped" if on_bad_utf8 == "skip" else "replaced bad bytes in"
        logging.warning("%s: %s %d line(s) that were not UTF-8", path, verb, bad)


def parallel_lines(source: str, target: str, on_bad_utf8: str = "error") -> Iterator[tuple[int, str, str]]:
    """(line number, source line, target line) of two line-aligned files; a length mismatch is an error."""
    n_src = n_tgt = 0
    for s, t in itertools.zip_longest(iter_lines(source, on_bad_utf8), iter_lines(target, on_bad_utf8)):
        n_src, n_tgt = n_src + (s is not None), n_tgt + (t is not None)
        if s is not None and t is not None:
            yield s[0], s[1].strip(), t[1].strip()
    if n_src != n_tgt:
        raise CorpusError(f"{source} and {target} are not line-aligned: {n_src} vs {n_tgt} lines")


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


ByteRange = tuple[int, int]  # [start, end) of an uncompressed file's bytes (a datagen partition)


def _iter_byte_blocks(path: str, byte_range: ByteRange | None = None) -> Iterator[bytes]:
    """The raw bytes of a file (or of its `byte_range` only) in blocks of about BLOCK_BYTES that end at a
    line end (the newline is kept; the last block may lack it). tf.io.gfile's readline (what iter_lines
    gets for an uncompressed file) drops every carriage return, wherever it is in the line; gzip/bz2 lines
    keep theirs: blocks do the same."""
    drop_cr = not is_compressed(path)
    left = None
    with _open_binary(path) as f:
        if byte_range is not None:
            f.seek(byte_range[0])
            left = byte_range[1] - byte_range[0]
        pending: list[bytes] = []  # bytes after the last newline seen (a line longer than a block grows here)
        try:
            while True:
                data = f.read(BLOCK_BYTES if left is None else min(BLOCK_BYTES, left))
                if left is not None:
                    left -= len(data)
                if not data:
                    break
                cut = data.rfind(b"\n") + 1
                if not cut:
                    pending.append(data)
                    continue
                block = b"".join([*pending, data[:cut]]) if pending else data[:cut]
                pending = [data[cut:]] if cut < len(data) else []
                yield block.replace(b"\r", b"") if drop_cr else block
            if pending:
                block = b"".join(pending)
                yield block.replace(b"\r", b"") if drop_cr else block
        except corpus_formats.read_errors() as e:  # truncated/corrupt .gz, .bz2 or .zst
            raise CorpusError(f"{path}: cannot read ({type(e).__name__}: {e}); the compressed file is "
                              f"corrupt or truncated: re-download or re-compress it") from None


def _check_policy(on_bad_utf8: str) -> None:
    if on_bad_utf8 not in BAD_UTF8_POLICIES:
        raise ValueError(f"on_bad_utf8 must be one of {BAD_UTF8_POLICIES}, got {on_bad_utf8!r}")


def _warn_bad(path: str, on_bad_utf8: str, bad: int) -> None:
    if bad:
        verb = "skipped" if on_bad_utf8 == "skip" else "replaced bad bytes in"
        logging.warning("%s: %s %d line(s) that were not UTF-8", path, verb, bad)


def _decode(block: bytes, path: str, lineno: int, on_bad_utf8: str) -> tuple[str, int]:
    """Whole lines decoded as iter_lines decodes each: (text, bad lines); `lineno` is the first line's."""
    try:
        return block.decode("utf-8"), 0
    except UnicodeDecodeError:
        return _decode_lines_of(block, path, lineno, on_bad_utf8)


def iter_text_blocks(path: str, on_bad_utf8: str = "error", byte_range: ByteRange | None = None
                     ) -> Iterator[str]:
    """The text of a file (or of its `byte_range`) in blocks of about BLOCK_BYTES that end at a line end
    (the newline is kept; the last block may lack it). The lines of the concatenated blocks are exactly
    those of `iter_lines`."""
    _check_policy(on_bad_utf8)
    lineno, bad = 1, 0
    for block in _iter_byte_blocks(path, byte_range):
        text, n = _decode(block, path, lineno, on_bad_utf8)
        bad += n
        lineno += block.count(b"\n")
        if text:  # empty when every line of the block was skipped
            yield text
    _warn_bad(path, on_bad_utf8, bad)


# One or more blank lines (only whitespace, as str.strip sees it: `\s` is str.isspace) after a line end.
_BLANK_LINES = re.compile(r"\n(?:[^\S\n]*\n)+")


def _is_blank(text: str) -> bool:
    return not text or text.isspace()


def _whitespace_chars() -> list[str]:
    """Every character str.isspace() accepts, in code point order. Found by str.split() (which splits at
    exactly those) of one string of every code point but the surrogates: the characters missing between
    its pieces. ~2x faster than testing each code point in Python (this runs at every import)."""
    every = (np.arange(0xD800, dtype="<u4").tobytes() + np.arange(0xE000, 0x110000, dtype="<u4").tobytes()
             ).decode("utf-32-le")
    out: list[str] = []
    end = 0
    for piece in every.split():
        cp = ord(piece[0])
        start = cp if cp < 0xD800 else cp - 0x800  # its index in `every` (no surrogates there)
        out.extend(every[end:start])
        end = start + len(piece)
    out.extend(every[end:])
    return out


def _utf8_whitespace() -> bytes:
    """A bytes regex of one whitespace character but the newline (str.isspace), in UTF-8; the multi-byte
    ones as a trie (first byte, then the rest), so a non-space byte fails after one test."""
    chars = [c for c in _whitespace_chars() if c != "\n"]
    single = b"".join(re.escape(c.encode()) for c in chars if ord(c) < 128)
    by_lead: dict[int, list[bytes]] = {}
    for c in chars:
        if ord(c) >= 128:
            code = c.encode("utf-8")
            by_lead.setdefault(code[0], []).append(code[1:])
    branches = [re.escape(bytes([lead])) + b"(?:" + b"|".join(re.escape(t) for t in tails) + b")"
                for lead, tails in sorted(by_lead.items())]
    return b"(?:[" + single + b"]|" + b"|".join(branches) + b")"


_WS = _utf8_whitespace()
_BLANK_LINES_BYTES = re.compile(b"\n(?:" + _WS + b"*\n)+")
_BLANK_BYTES = re.compile(b"(?:" + _WS + b"|\n)*")


def iter_document_texts(paths: Sequence[str] | str, on_bad_utf8: str = "error",
                        keep: Callable[[int], bool] | None = None, byte_range: ByteRange | None = None
                        ) -> Iterator[str]:
    """The documents of `read_documents`, each as its raw text (lines joined by newlines, not yet stripped):
    `document_lines(text)` gives the lines. With `keep`, only the documents whose index i (0-based, over
    all the files' non-empty documents, asked in order) has keep(i) true: the others are counted, never
    decoded nor copied out of their block (what a shard taking every n-th document wants).

    Documents are found in the raw bytes (blank lines = UTF-8 whitespace only) and only those kept are
    decoded, so bytes that are not UTF-8 are reported (error) or replaced by the reader of the document that
    holds them. With on_bad_utf8="skip" a skipped line can make a document empty and shift the indices of
    those after it: that policy decodes every block first (`_iter_document_texts_decoded`).

    `byte_range` (one plain file only): read only those bytes, which start and end at a document
    boundary (a datagen partition, framework/partitions.py); line numbers in errors count from its start."""
    _check_policy(on_bad_utf8)
    if on_bad_utf8 == "skip":
        yield from _iter_document_texts_decoded(paths, on_bad_utf8, keep, byte_range)
        return
    if isinstance(paths, str):
        paths = expand_paths(paths)
    index = -1
    for path in paths:
        if corpus_formats.is_structured(path) and path.options.layout == "documents":
            # A record is a document: the others are counted, never cut into sentences.
            to_text = corpus_formats.document_formatter(path)
            for raw in corpus_formats.document_records(path):
                index += 1
                if keep is None or keep(index):
                    yield to_text(raw)
            continue
        bad = 0

        def decode(piece: bytes, block: bytes, start: int, block_lineno: int) -> str:
            """A kept document's text; its first line's number is counted only when a line is bad."""
            nonlocal bad
            try:
                return piece.decode("utf-8")
            except UnicodeDecodeError:
                lineno = block_lineno + block.count(b"\n", 0, start)
                text, n = _decode_lines_of(piece, path, lineno, on_bad_utf8)
                bad += n
                return text

        # The document continuing from earlier blocks: its pieces, and where it starts (the framed block,
        # the position in it, the line number of that block's first line minus one) for error messages.
        pending: list[bytes] = []
        pending_at: tuple[bytes, int, int] = (b"", 0, 0)
        lineno, ended_line = 1, True  # the current block's first line; whether the last block ended one
        for block in _iter_byte_blocks(path, byte_range):
            # Framed by newlines so that every line of the block, first and last included, is seen whole;
            # framed position p is on line lineno - 1 + framed.count(b"\n", 0, p). A piece keeps the newline
            # ending its last line (decoding errors show the bytes iter_lines shows).
            framed = b"\n" + (block[:-1] if block.endswith(b"\n") else block) + b"\n"
            head = 1 if pending else 0  # a continuation: the previous part ended with the real newline
            if not pending:
                pending_at = (framed, 0, lineno - 1)
            start = None  # None: the piece before the first separator continues `pending`
            for m in _BLANK_LINES_BYTES.finditer(framed):
                end = m.start() + 1
                if start is None:
                    piece = b"".join([*pending, framed[head:end]])
                    pending = []
                    if _BLANK_BYTES.fullmatch(piece):
                        start = m.end()
                        continue
                    index += 1
                    if keep is None or keep(index):
                        yield decode(piece, *pending_at)
                else:
                    # Between two separators: never blank (the greedy separator took every blank line).
                    index += 1
                    if keep is None or keep(index):
                        yield decode(framed[start:end], framed, start, lineno - 1)
                start = m.end()
            if start is None:
                pending.append(framed[head:])
            else:
                pending = [framed[start:]]
                pending_at = (framed, start, lineno - 1)
            lineno += block.count(b"\n")
            ended_line = block.endswith(b"\n")
        piece = b"".join(pending)
        if piece and not ended_line:
            piece = piece[:-1]  # that framing newline stood for none
        if not _BLANK_BYTES.fullmatch(piece):
            index += 1
            if keep is None or keep(index):
                yield decode(piece, *pending_at)
        _warn_bad(path, on_bad_utf8, bad)


def _count_newlines(f: io.BufferedIOBase, end: int) -> int:
    """Newlines in the file's first `end` bytes (an error message's line number); leaves f positioned at end."""
    f.seek(0)
    count, left = 0, end
    while left > 0:
        data = f.read(min(left, BLOCK_BYTES))
        if not data:
            break
        count += data.count(b"\n")
        left -= len(data)
    return count


def _iter_document_texts_decoded(paths: Sequence[str] | str, on_bad_utf8: str,
                                 keep: Callable[[int], bool] | None,
                                 byte_range: ByteRange | None = None) -> Iterator[str]:
    """iter_document_texts on decoded blocks (every line decoded under the policy before documents are cut)."""
    if isinstance(paths, str):
        paths = expand_paths(paths)
    index = -1
    for path in paths:
        pending: list[str] = []
        for block in iter_text_blocks(path, on_bad_utf8, byte_range):
            framed = "\n" + (block[:-1] if block.endswith("\n") else block) + "\n"
            start = None
            for m in _BLANK_LINES.finditer(framed):
                if start is None:
                    text = "".join([*pending, framed[:m.start()]])
                    pending = []
                    if _is_blank(text):
                        start = m.end()
                        continue
                    index += 1
                    if keep is None or keep(index):
                        yield text
                else:
                    index += 1
                    if keep is None or keep(index):
                        yield framed[start:m.start()]
                start = m.end()
            pending.append(framed if start is None else framed[start:])
        text = "".join(pending)
        if not _is_blank(text):
            index += 1
            if keep is None or keep(index):
                yield text


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
