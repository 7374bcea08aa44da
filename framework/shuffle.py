"""Datagen's corpus shuffle: the corpus cut into partitions that are each read once, every document sent to
its (split, shard) by a hash of its text, and each shard job reading only its own documents.

Decisions:
- Partitions (`plan_partitions`, cheap: a stat per file and a few KB read near each cut): a local or
  remote plain uncompressed file is cut into byte ranges of about `partition_bytes`, each cut moved to
  the end of the next run of blank lines, so a range starts and ends at a document boundary and its
  job reads only its own bytes (as Beam's text source splits). A compressed file, a structured file
  (its records are parsed by one job), and a file whose whole text is one document are one partition.
- Assignment (`assign`): a document's key is its stripped non-empty lines joined by newlines, the same
  for the same text in any format; blake2b-64 of the key decides the split (dev when its top 53 bits,
  as a fraction, fall below dev_fraction: an expected, not exact, share) and the shard (the hash mod
  the split's shard count). It depends on the text alone: not on the partitioning, workers or tasks.
  A corpus may name files of its own dev split (`dev_paths`): their documents are dev, their shard the hash's.
- Line pairs (translation: two line-aligned files): a unit is line n of each; both files are cut at the
  same line numbers, found by a count pass over both in the planner (which also checks their line
  counts), so planning reads the pair once more; a pair's split is its line number's (n % dev_every),
  its shard the hash of its text.
- Table rows (the classification tasks' tab-separated files, `tables`): a unit is a data row, carried
  as "file index, line, row index, the line"; a plain file is cut at line ends (a count pass as for line
  pairs) and a pass over every file in the planner finds each partition's first line, first row index
  (a split's rows are numbered across its files) and the file's column count, and stops on a bad row
  (naming file:line) before any work. A row keeps the originals' rule: its shard is its index mod the
  split's shard count, dev (with dev_fraction) exactly every 1/f-th row of the train files
  (`is_dev_document`): not a hash, so a task's shards keep the row order it always had.
- Order: a shard's documents come in corpus order (partition order, then order within the partition,
  which is file order then byte/record order), so cutting the corpus differently gives the same shard.
- Spill files (local runner, --num_tasks): one per partition, `<spill dir>/part-NNNNN.spill`: the
  partition's documents grouped by (split, shard), each group a run of length-prefixed UTF-8 texts,
  then a JSON index {"split/shard": [offset, bytes, count]} and its 8-byte length. Written as
  `.incomplete` and renamed when whole, so a re-run after a kill keeps the finished ones (when the
  plan, recorded in `plan.json`, is the same). Memory: one partition's documents.
- Claims: tasks sharing a data_dir take a partition by creating its claim file; the claimer renews the
  claim's mtime while it reads (`heartbeat`). A claim of a dead process of this machine, or one not renewed
  for the claim timeout (a task of another machine that died or hangs; the timeout must exceed the
  machines' clock skew), is taken over.
- A shard job (`shard_texts`) reads its group of every spill file in partition order. Without an
  active spill directory (a problem's generate_encoded_samples, tests) it reads every partition and
  keeps its own documents: the same texts, in the same order.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import json
import os
import re
import struct
import threading
import time
from typing import Iterable, Iterator

from absl import logging

from textrain.framework import corpus, corpus_formats, fileio, locks
from textrain.framework.errors import UserError

DEFAULT_PARTITION_MB = 64
_PROBE_BYTES = 1 << 16  # read at a time when moving a cut to the next document boundary
_FOOTER = struct.Struct("<Q")
_LENGTH = struct.Struct("<I")
SPLIT_TRAIN, SPLIT_EVAL = "train", "dev"


@dataclasses.dataclass(frozen=True)
class DocumentCorpus:
    """What a problem declares to read its documents through the shuffle (Problem.document_corpus)."""

    paths: tuple[str, ...]
    on_bad_utf8: str = "error"
    dev_fraction: float = 0.0
    whole_files: bool = False  # a file's whole text is one document (no blank-line separation)
    dev_paths: tuple[str, ...] = ()  # a dev split of its own files (then dev_fraction is 0)
    # Line pairs: `paths` are two line-aligned files (source, target); a unit is the pair of line n of
    # each, its text "source\ntarget"; it is dev when n % dev_every == 0 (a position, as the files number it).
    pairs: bool = False
    dev_every: int = 0
    # Table rows: `paths` are the tables' paths; dev_fraction then holds out exactly every 1/f-th row of
    # the train tables (`is_dev_document`), not a hash's share.
    tables: tuple["TableFile", ...] = ()
    on_bad_row: str = "error"  # a row with a wrong column count: error | skip

    def files(self) -> list[tuple[str, str | None]]:
        """(path, the split its documents all go to; None: by their hash), in corpus order."""
        return [(p, None) for p in self.paths] + [(p, SPLIT_EVAL) for p in self.dev_paths]


@dataclasses.dataclass(frozen=True)
class TableFile:
    """A tab-separated file read as rows: the split its rows go to, whether its first non-blank line is
    a header, its column count (0: the header's or the first row's) and whether more columns are bad."""

    path: str
    split: str
    header: bool
    columns: int = 0
    exact: bool = True


@dataclasses.dataclass(frozen=True)
class Partition:
    """One job's share of the corpus: a file, or the byte range [start, end) of a plain file."""

    index: int
    file_index: int
    path: str
    start: int = 0
    end: int | None = None  # None: the whole file
    part: tuple[int, int] | None = None  # Parquet row groups / Arrow record batches [start, stop)
    split: str | None = None  # the split of a dev file's documents (None: by their hash)
    target_range: tuple[int, int] | None = None  # line pairs: the target file's bytes of these lines
    first_line: int = 1  # line pairs, tables: the (1-based) number of the range's first line
    first_row: int = 0  # tables: the index of the range's first data row (within its split)
    columns: int = 0  # tables: the file's column count
    header_line: int = 0  # tables: the file's first non-blank line (the header or the first row)

    @property
    def byte_range(self) -> tuple[int, int] | None:
        return None if self.end is None else (self.start, self.end)


def _record_parts(path: str, whole_files: bool) -> bool:
    """A structured file whose records are documents: read by parts (row groups, record batches)."""
    return (not whole_files and corpus_formats.is_structured(path)
            and path.options.layout == "documents")  # type: ignore[attr-defined]


def _splittable(path: str, whole_files: bool) -> bool:
    return not (whole_files or corpus.is_compressed(path) or corpus_formats.is_structured(path))


_SEPARATOR = re.compile(b"\n(?:[ \t\r\f\v]*\n)+")  # blank lines: a cut never needs the rare Unicode spaces


def _next_boundary(f, cut: int, size: int) -> int:
    """The first document boundary at or after `cut`: the end of a run of blank lines (or the file's end).
    Reads only a few KB from cut - 1 on. A run of blank lines cut by the probe window ends the range
    early; the rest are blank lines at the next range's start, which hold no document."""
    pos = max(cut - 1, 0)
    while pos < size:
        f.seek(pos)
        window = f.read(_PROBE_BYTES + 1)
        m = _SEPARATOR.search(window)
        if m is not None:
            return min(pos + m.end(), size)
        if len(window) <= _PROBE_BYTES:
            break
        pos += _PROBE_BYTES  # the window's last byte is looked at again with the next window
    return size


def plan_partitions(corpus_spec: DocumentCorpus, partition_bytes: int) -> list[Partition]:
    """The corpus's partitions, in corpus order (see the module docstring)."""
    if corpus_spec.pairs:
        return _pair_partitions(corpus_spec, partition_bytes)
    if corpus_spec.tables:
        return _table_partitions(corpus_spec, partition_bytes)
    out: list[Partition] = []
    for file_index, (path, split) in enumerate(corpus_spec.files()):
        if _record_parts(path, corpus_spec.whole_files):
            base = len(out)
            out.extend(Partition(base + i, file_index, path, part=part, split=split)
                       for i, part in enumerate(corpus_formats.parts_of(path)))
            continue
        size = fileio.stat(path).length if _splittable(path, corpus_spec.whole_files) else 0
        if size <= partition_bytes:
            out.append(Partition(len(out), file_index, path, split=split))
            continue
        with fileio.open_file(path, "rb") as f:
            start = 0
            while start < size:
                end = size if size - start <= partition_bytes else _next_boundary(f, start + partition_bytes, size)
                out.append(Partition(len(out), file_index, path, start, end, split=split))
                start = end
    return out


def _pair_partitions(corpus_spec: DocumentCorpus, partition_bytes: int) -> list[Partition]:
    """Two line-aligned files cut at the same line numbers: a count pass over both finds the byte offsets
    (and checks the line counts before any work). A compressed, structured or small pair: one partition."""
    source, target = corpus_spec.paths
    if not all(_splittable(p, False) for p in (source, target)) or fileio.stat(source).length <= partition_bytes:
        return [Partition(0, 0, source)]
    cuts, source_lines, source_size = _line_cuts(source, partition_bytes)
    offsets, target_lines, target_size = _line_offsets(target, [lines for lines, _ in cuts])
    if source_lines != target_lines:
        raise corpus.CorpusError(f"{source} and {target} are not line-aligned: {source_lines} vs {target_lines} lines")
    bounds = [(0, 0, 0)] + [(lines, at, t) for (lines, at), t in zip(cuts, offsets, strict=True)]
    bounds.append((source_lines, source_size, target_size))
    return [Partition(i, 0, source, a[1], b[1], target_range=(a[2], b[2]), first_line=a[0] + 1)
            for i, (a, b) in enumerate(itertools.pairwise(bounds)) if b[1] > a[1]]


def is_dev_document(index: int, dev_fraction: float) -> bool:
    """Exactly floor(N * f) of N rows, spread evenly, go to the dev split (table rows; documents of a
    document corpus are assigned by a hash of their text)."""
    return dev_fraction > 0 and int((index + 1) * dev_fraction) > int(index * dev_fraction)


def bad_row_message(where: str, found: int, expected: int, header: bool) -> str:
    return (f"{where}: {found} tab-separated columns, expected {expected} (as the "
            f"{'header' if header else 'first row'}); a tab or newline inside a text field, or a truncated row? "
            f"(the setting on_bad_row=skip leaves such rows out: --on_bad_row=skip for textrain-datagen, "
            f"finetune.problem_hparams={{'on_bad_row': 'skip'}} for textrain-finetune)")


@dataclasses.dataclass
class TableState:
    """Where a reading of a table stands: its column count and header line once seen, the next row's index."""

    columns: int
    header_line: int
    row: int
    skipped: list[int] = dataclasses.field(default_factory=list)


def table_rows(table: TableFile, lines: Iterable[tuple[int, str]], on_bad_row: str, state: TableState
                ) -> Iterator[tuple[int, int, str]]:
    """(line number, row index, line) of the data rows among `lines`: blank lines, the header and (with
    on_bad_row=skip) rows with a wrong column count left out; a leading byte-order mark dropped."""
    for lineno, line in lines:
        if (not state.header_line or lineno <= state.header_line) and line.startswith("\ufeff"):
            line = line[1:]
        if not line.strip():
            continue
        found = line.count("\t") + 1
        if not state.header_line:
            state.header_line = lineno
            state.columns = found if table.header else (state.columns or found)
        if lineno == state.header_line and table.header:
            continue
        if found < state.columns or (table.exact and found > state.columns):
            if on_bad_row == "skip":
                state.skipped.append(lineno)
                continue
            raise UserError(bad_row_message(f"{table.path}:{lineno}", found, state.columns, table.header))
        yield lineno, state.row, line
        state.row += 1


def warn_skipped_rows(path: str, lines: list[int]) -> None:
    if lines:
        logging.warning("%s: skipped %d row(s) with a wrong column count (lines %s%s)", path, len(lines),
                        ", ".join(map(str, lines[:5])), ", ..." if len(lines) > 5 else "")


def _table_partitions(corpus_spec: DocumentCorpus, partition_bytes: int) -> list[Partition]:
    """Every table read once here (its rows counted and checked); a plain one cut at line ends about every
    `partition_bytes` (a newline count pass), each partition knowing its first line and row index."""
    out: list[Partition] = []
    rows: dict[str, int] = {}  # a split's rows are numbered across its files
    for file_index, table in enumerate(corpus_spec.tables):
        cuts: list[tuple[int, int]] = []
        if _splittable(table.path, False) and fileio.stat(table.path).length > partition_bytes:
            cuts = _line_cuts(table.path, partition_bytes)[0]
        state = TableState(table.columns, 0, rows.get(table.split, 0))
        bounds = [(0, 0, state.row)]  # (lines before, byte offset, rows before)
        lines = corpus.iter_lines(table.path, corpus_spec.on_bad_utf8)
        for lines_before, offset in cuts:
            for _ in table_rows(table, _take_until(lines, lines_before), corpus_spec.on_bad_row, state):
                pass
            bounds.append((lines_before, offset, state.row))
        for _ in table_rows(table, lines, corpus_spec.on_bad_row, state):
            pass
        rows[table.split] = state.row
        warn_skipped_rows(table.path, state.skipped)
        ends: list[int | None] = [b[1] for b in bounds[1:]] + [fileio.stat(table.path).length if cuts else None]
        for (lines_before, start, first_row), end in zip(bounds, ends, strict=True):
            out.append(Partition(len(out), file_index, table.path, start, end,
                                 first_line=lines_before + 1, first_row=first_row, columns=state.columns,
                                 header_line=state.header_line))
    return out


def _take_until(lines: Iterator[tuple[int, str]], last: int) -> Iterator[tuple[int, str]]:
    """The lines of `lines` up to line number `last` (the iterator goes on after it)."""
    if last <= 0:
        return
    for lineno, line in lines:
        yield lineno, line
        if lineno >= last:
            return


def _newline_counts(path: str) -> Iterator[tuple[int, bytes]]:
    """(the file's byte offset of each block, the block), blocks of 4 MB."""
    with fileio.open_file(path, "rb") as f:
        at = 0
        for block in iter(lambda: f.read(1 << 22), b""):
            yield at, block
            at += len(block)


def _line_cuts(path: str, every: int) -> tuple[list[tuple[int, int]], int, int]:
    """Cuts about every `every` bytes, each just after a newline: ([(lines before it, byte offset)], the
    file's line count (a last line without a newline counts), its size)."""
    cuts: list[tuple[int, int]] = []
    lines, want, size, last = 0, every, 0, b"\n"
    length = fileio.stat(path).length
    for at, block in _newline_counts(path):
        pos = 0
        while want - at < len(block):
            nl = block.find(b"\n", max(want - at, pos))
            if nl < 0:
                break
            lines += block.count(b"\n", pos, nl + 1)
            pos = nl + 1
            if at + pos < length:
                cuts.append((lines, at + pos))
            want = at + pos + every
        lines += block.count(b"\n", pos)
        size, last = at + len(block), block[-1:]
    return cuts, lines + (size > 0 and last != b"\n"), size


def _line_offsets(path: str, wanted: list[int]) -> tuple[list[int], int, int]:
    """The byte offset just after the n-th newline for each n of `wanted` (ascending), the file's line
    count and its size."""
    out: list[int] = []
    lines, size, last = 0, 0, b"\n"
    for at, block in _newline_counts(path):
        pos = 0
        while len(out) < len(wanted) and lines + block.count(b"\n", pos) >= wanted[len(out)]:
            for _ in range(wanted[len(out)] - lines):
                pos = block.find(b"\n", pos) + 1
            lines = wanted[len(out)]
            out.append(at + pos)
        lines += block.count(b"\n", pos)
        size, last = at + len(block), block[-1:]
    return out, lines + (size > 0 and last != b"\n"), size


def document_key(text: str) -> str:
    """What a document is hashed by: its stripped, non-empty lines (the same in every format)."""
    return "\n".join(corpus.document_lines(text))


def assign(text: str, dev_fraction: float, shards: dict[str, int],
           split: str | tuple[str, int] | None = None) -> tuple[str, int]:
    """(split, shard) of a document: a hash of its text alone (module docstring); `split`: the split of
    a dev file's documents, which only their shard is drawn for, or (split, a table row's index), whose
    shard is the index mod the split's shard count."""
    if isinstance(split, tuple):
        return split[0], split[1] % shards.get(split[0], 1)
    h = int.from_bytes(hashlib.blake2b(document_key(text).encode("utf-8"), digest_size=8).digest(), "little")
    if split is None:
        split = SPLIT_EVAL if dev_fraction > 0 and (h >> 11) / float(1 << 53) < dev_fraction else SPLIT_TRAIN
    return split, h % shards.get(split, 1)


def partition_texts(corpus_spec: DocumentCorpus, part: Partition,
                    bad: list[tuple[str, str]] | None = None) -> Iterator[str]:
    """The documents of one partition, as raw texts, in file order; a structured file's bad records
    skipped (--skip_bad_records) are added to `bad` (their file's total is checked by the caller, or
    here when `bad` is None)."""
    if _record_parts(part.path, corpus_spec.whole_files):
        texts, places = corpus_formats.part_documents(part.path, part.part)
        if bad is None:
            corpus_formats.check_bad_records([(part.path, places)])
        else:
            bad.extend(places)
        yield from texts
        return
    if corpus_spec.whole_files:
        text = corpus.read_text(part.path, corpus_spec.on_bad_utf8)
        if text and not text.isspace():
            yield text
        return
    try:
        yield from corpus.iter_document_texts([part.path], corpus_spec.on_bad_utf8, byte_range=part.byte_range)
    except corpus.CorpusError as e:
        raise _with_file_line(e, part) from None


def partition_units(corpus_spec: DocumentCorpus, part: Partition, bad: list[tuple[str, str]] | None = None
                    ) -> Iterator[tuple[str, str | tuple[str, int] | None]]:
    """The units of one partition in order, each with the split it goes to (None: its hash decides):
    documents (`partition_texts`), or line pairs."""
    if corpus_spec.pairs:
        yield from _partition_pairs(corpus_spec, part)
        return
    if corpus_spec.tables:
        yield from _partition_rows(corpus_spec, part)
        return
    for text in partition_texts(corpus_spec, part, bad):
        yield text, part.split


def _partition_pairs(corpus_spec: DocumentCorpus, part: Partition) -> Iterator[tuple[str, str | None]]:
    """Line n of the source and of the target, both stripped, as "source\ntarget"; a pair with a blank
    side is left out."""
    source, target = corpus_spec.paths
    every = corpus_spec.dev_every
    if part.byte_range is None:
        pairs = corpus.parallel_lines(source, target, corpus_spec.on_bad_utf8)
    else:
        # The planner cut both files at the same line numbers; the count is endless (strict cannot hold).
        pairs = zip(range(part.first_line, 1 << 62),
                    _range_lines(source, corpus_spec.on_bad_utf8, part.byte_range, part.first_line),
                    _range_lines(target, corpus_spec.on_bad_utf8, part.target_range, part.first_line), strict=False)
    for n, s, t in pairs:
        s, t = s.strip(), t.strip()
        if s and t:
            yield f"{s}\n{t}", (SPLIT_EVAL if every and n % every == 0 else SPLIT_TRAIN)


def _partition_rows(corpus_spec: DocumentCorpus, part: Partition) -> Iterator[tuple[str, tuple[str, int]]]:
    """A table's data rows as "file index\tline\trow index\tthe line" (`table_row` reads it back), each
    with (its split, its index)."""
    table = corpus_spec.tables[part.file_index]
    if part.byte_range is None:
        lines: Iterable[tuple[int, str]] = corpus.iter_lines(table.path, corpus_spec.on_bad_utf8)
    else:
        lines = enumerate(_range_lines(table.path, corpus_spec.on_bad_utf8, part.byte_range, part.first_line),
                          start=part.first_line)
    state = TableState(part.columns, part.header_line, part.first_row)
    held_out = corpus_spec.dev_fraction if table.split == SPLIT_TRAIN else 0.0
    for lineno, row, line in table_rows(table, lines, corpus_spec.on_bad_row, state):
        split = SPLIT_EVAL if is_dev_document(row, held_out) else table.split
        yield f"{part.file_index}\t{lineno}\t{row}\t{line}", (split, row)


def table_row(corpus_spec: DocumentCorpus, text: str) -> tuple[str, int, int, list[str]]:
    """(path, line number, row index, fields) of a table row's unit text (`_partition_rows`)."""
    file_index, lineno, row, line = text.split("\t", 3)
    return corpus_spec.tables[int(file_index)].path, int(lineno), int(row), line.split("\t")


def _range_lines(path: str, on_bad_utf8: str, byte_range: tuple[int, int] | None, first_line: int) -> Iterator[str]:
    """The lines of a byte range that starts at line `first_line` (errors name the file's line)."""
    try:
        for block in corpus.iter_text_blocks(path, on_bad_utf8, byte_range):
            lines = block.split("\n")
            if block.endswith("\n"):
                lines.pop()
            yield from lines
    except corpus.CorpusError as e:
        m = re.match(re.escape(path) + r":(\d+):", str(e))
        if m is None:
            raise
        raise type(e)(f"{path}:{int(m.group(1)) + first_line - 1}:" + str(e)[m.end():]) from None


def _with_file_line(e: Exception, part: Partition) -> Exception:
    """An error of a range that starts inside its file names the file's line, not the range's."""
    m = re.match(re.escape(part.path) + r":(\d+):", str(e))
    if not part.start or m is None:
        return e
    with fileio.open_file(part.path, "rb") as f:
        before = corpus._count_newlines(f, part.start)
    return type(e)(f"{part.path}:{int(m.group(1)) + before}:" + str(e)[m.end():])


# ---------------------------------------------------------------------------------------------- spills
def spill_path(directory: str, part: Partition) -> str:
    return os.path.join(directory, f"part-{part.index:05d}.spill")


def _group(split: str, shard: int) -> str:
    return f"{split}/{shard}"


def write_spill(corpus_spec: DocumentCorpus, part: Partition, shards: dict[str, int], directory: str) -> int:
    """Read one partition and write its documents grouped by (split, shard) to its spill file (atomically),
    with the partition's bad records (checked per file once every spill exists: `bad_records`); returns
    the partition's document count."""
    path = spill_path(directory, part)
    groups: dict[str, list[bytes]] = {}
    count = 0
    bad: list[tuple[str, str]] = []
    for text, fixed in partition_units(corpus_spec, part, bad):
        split, shard = assign(text, corpus_spec.dev_fraction, shards, fixed)
        data = text.encode("utf-8")
        groups.setdefault(_group(split, shard), []).extend((_LENGTH.pack(len(data)), data))
        count += 1
    index: dict[str, list[int]] = {}
    tmp = fileio.incomplete_path(path)
    try:
        with fileio.open_file(tmp, "wb") as f:
            offset = 0
            for name in sorted(groups):
                body = b"".join(groups.pop(name))
                f.write(body)
                index[name] = [offset, len(body)]
                offset += len(body)
            footer = json.dumps({"groups": index, "bad": bad}, sort_keys=True).encode()
            f.write(footer + _FOOTER.pack(len(footer)))
        fileio.rename(tmp, path, overwrite=True)
    except BaseException:
        fileio.remove_if_exists(tmp)
        raise
    return count


def _claim_path(directory: str, part: Partition) -> str:
    return os.path.join(directory, f"part-{part.index:05d}.claim")


DEFAULT_CLAIM_TIMEOUT_S = 600.0


def claim(directory: str, part: Partition, timeout_s: float = DEFAULT_CLAIM_TIMEOUT_S) -> bool:
    """Take the partition for this process (tasks sharing a data_dir read each partition once): True when
    it is ours to read, False when its spill exists or a live process holds it. A claim is taken over
    when its holder is a dead process of this machine, or when it has not been renewed (`heartbeat`)
    for `timeout_s` seconds: a task of another machine that died or hangs."""
    if fileio.exists(spill_path(directory, part)):
        return False
    path = _claim_path(directory, part)
    mine = json.dumps({"host": locks.HOST, "pid": os.getpid()})
    if locks.create_file(path, mine):
        return True
    holder = _read_json(path)
    if holder.get("host") == locks.HOST and holder.get("pid") == os.getpid():
        return True
    dead = holder.get("host") == locks.HOST and not locks.process_running(int(holder.get("pid") or 0))
    age = _age(path)
    if not dead and age <= timeout_s:
        return False
    logging.warning("taking over %s of %s (%s)", path, f"pid {holder.get('pid')} on {holder.get('host')}",
                    "no longer running" if dead else f"not renewed for {age:.0f}s > --claim_timeout_s={timeout_s:g}")
    fileio.remove_if_exists(path)  # of two takers at once, one creates it
    return locks.create_file(path, mine) and not fileio.exists(spill_path(directory, part))


def _age(path: str) -> float:
    """Seconds since the file was last written (0 when it is gone: nothing to take over)."""
    try:
        return max(0.0, time.time() - fileio.stat(path).mtime_nsec / 1e9)
    except (*fileio.not_found_errors(), *fileio.file_errors()):
        return 0.0


def _renew(path: str) -> None:
    """Mark a claim alive: its mtime now (rewritten where a file system cannot set mtimes)."""
    try:
        if fileio.is_local(path):
            os.utime(path)
        else:
            with fileio.open_file(path, "r") as f:
                content = f.read()
            with fileio.open_file(path, "w") as f:
                f.write(content)
    except (OSError, *fileio.not_found_errors(), *fileio.file_errors()):
        pass  # taken over or removed: the spill is still written whole, atomically


@contextlib.contextmanager
def heartbeat(path: str, timeout_s: float) -> Iterator[None]:
    """Renew the claim `path` every timeout_s / 4 seconds while the block runs (a thread: a partition's
    read and its spill write run without pauses for it)."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(max(timeout_s / 4, 0.05)):
            _renew(path)

    thread = threading.Thread(target=beat, name=f"claim {os.path.basename(path)}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def spill_if_claimed(corpus_spec: DocumentCorpus, part: Partition, shards: dict[str, int], directory: str,
                     timeout_s: float = DEFAULT_CLAIM_TIMEOUT_S) -> int | None:
    """A partition job: read and spill the partition if this process claims it, renewing the claim while
    it works; its document count, or None when another process has it."""
    if not claim(directory, part, timeout_s):
        return None
    with heartbeat(_claim_path(directory, part), timeout_s):
        return write_spill(corpus_spec, part, shards, directory)


def _read_json(path: str) -> dict:
    try:
        return fileio.read_json(path) or {}
    except (ValueError, *fileio.not_found_errors(), *fileio.file_errors()):
        return {}


def _footer(path: str) -> tuple[dict, int]:
    st = fileio.stat(path)
    key = (path, st.length, st.mtime_nsec)
    if key not in _FOOTERS:  # a process making many shards reads each spill's index once
        if len(_FOOTERS) > 4096:
            _FOOTERS.clear()
        with fileio.open_file(path, "rb") as f:
            f.seek(st.length - _FOOTER.size)
            (n,) = _FOOTER.unpack(f.read(_FOOTER.size))
            f.seek(st.length - _FOOTER.size - n)
            _FOOTERS[key] = json.loads(f.read(n))
    return _FOOTERS[key], st.length


_FOOTERS: dict[tuple[str, int, int], dict] = {}  # (spill path, size, mtime) -> its index


def bad_records(directory: str, parts: list[Partition]) -> list[tuple[str, list[tuple[str, str]]]]:
    """(file, bad records) of every partition, from the spill files' footers."""
    return [(part.path, [tuple(b) for b in _footer(spill_path(directory, part))[0]["bad"]]) for part in parts]


def read_group(path: str, split: str, shard: int) -> Iterator[str]:
    """The texts of one (split, shard) group of a spill file: its index, then only that slice."""
    footer, _ = _footer(path)
    where = footer["groups"].get(_group(split, shard))
    if where is None:
        return
    with fileio.open_file(path, "rb") as f:
        f.seek(where[0])
        body = f.read(where[1])
    pos = 0
    while pos < len(body):
        (length,) = _LENGTH.unpack_from(body, pos)
        pos += _LENGTH.size
        yield body[pos:pos + length].decode("utf-8")
        pos += length


@dataclasses.dataclass(frozen=True)
class Spills:
    """A run's finished spill directory: what the shard jobs read from (plain data: it pickles to workers)."""

    directory: str
    num_partitions: int

    def texts(self, split: str, shard: int) -> Iterator[str]:
        for i in range(self.num_partitions):
            yield from read_group(spill_path(self.directory, Partition(i, 0, "")), split, shard)


@dataclasses.dataclass(frozen=True)
class GroupedTexts:
    """One shard's documents as an engine's shuffle delivered them (the Beam runner): the texts in corpus
    order."""

    split: str
    shard: int
    documents: tuple[str, ...]

    def texts(self, split: str, shard: int) -> Iterator[str]:
        if (split, shard) != (self.split, self.shard):
            raise ValueError(f"shard {split}-{shard} asked of the documents of {self.split}-{self.shard}")
        return iter(self.documents)


class _Reading(threading.local):
    """The spills each thread's shard job reads from. Per thread, because an engine runs several shard jobs at
    once in one process (Beam's DirectRunner with direct_num_workers > 1): a process-wide stack handed one
    job another job's documents."""

    def __init__(self) -> None:
        self.stack: list[Spills | GroupedTexts] = []


_READING = _Reading()


@contextlib.contextmanager
def reading_spills(spills: Spills | GroupedTexts | None) -> Iterator[None]:
    """Within the block, `shard_texts` called on this thread reads from `spills` (the shard jobs of every
    runner)."""
    if spills is None:
        yield
        return
    stack = _READING.stack
    stack.append(spills)
    try:
        yield
    finally:
        stack.pop()


def shard_texts(corpus_spec: DocumentCorpus, split: str, shard: int, num_shards: int) -> Iterator[str]:
    """The documents of one shard, as raw texts in corpus order: THE way a problem's shard job gets them."""
    stack = _READING.stack
    if stack:
        yield from stack[-1].texts(split, shard)
        return
    shards = {split: num_shards}
    for text, fixed in _all_units(corpus_spec):
        if assign(text, corpus_spec.dev_fraction, shards, fixed) == (split, shard):
            yield text


def all_texts(corpus_spec: DocumentCorpus) -> Iterable[str]:
    """Every document of the corpus, in corpus order (bad records checked per file)."""
    return (text for text, _ in _all_units(corpus_spec))


def _all_units(corpus_spec: DocumentCorpus) -> Iterator[tuple[str, str | tuple[str, int] | None]]:
    """Every unit of the corpus with its fixed split (`partition_units`), in corpus order."""
    parts = plan_partitions(corpus_spec, 1 << 62)
    bad: list[tuple[str, str]] = []
    for i, part in enumerate(parts):
        yield from partition_units(corpus_spec, part, bad)
        if i + 1 == len(parts) or parts[i + 1].file_index != part.file_index:
            corpus_formats.check_bad_records([(part.path, bad)])
            bad = []


def plan_identity(corpus_spec: DocumentCorpus, parts: list[Partition], shards: dict[str, int]) -> dict:
    """What a spill directory was made for: a re-run keeps its finished spills only when this is equal."""
    files = []
    for path, _ in corpus_spec.files():
        st = fileio.stat(path)
        files.append([str(path), st.length, getattr(st, "mtime_nsec", 0)])
    return {"corpus": dataclasses.asdict(corpus_spec) | {"paths": [str(p) for p in corpus_spec.paths],
                                                        "dev_paths": [str(p) for p in corpus_spec.dev_paths],
                                                        "tables": [[str(t.path), t.split, t.header, t.columns,
                                                                    t.exact] for t in corpus_spec.tables]},
            "files": files, "shards": shards,
            "partitions": [[p.file_index, p.start, p.end, p.split, p.target_range, p.first_line, p.part,
                            p.first_row, p.columns, p.header_line] for p in parts]}


def planned_partitions(directory: str, corpus_spec: DocumentCorpus, shards: dict[str, int]) -> list[Partition] | None:
    """The partitions of the spill directory's plan when it was made for this corpus (same files, sizes
    and mtimes) and these shard counts, else None: a task after the first skips the planning (for line
    pairs a count pass over both files)."""
    marker = _read_json(os.path.join(directory, "plan.json"))
    now = json.loads(json.dumps(plan_identity(corpus_spec, [], shards)))
    if not marker or any(marker.get(k) != now[k] for k in ("corpus", "files", "shards")):
        return None
    paths = [path for path, _ in corpus_spec.files()]
    return [Partition(i, f, paths[f], start, end, part=tuple(part) if part else None, split=split,
                      target_range=tuple(target) if target else None, first_line=first, first_row=row,
                      columns=columns, header_line=header)
            for i, (f, start, end, split, target, first, part, row, columns, header)
            in enumerate(marker["partitions"])]


def prepare_directory(directory: str, identity: dict) -> None:
    """Keep the spill directory when it was made for the same plan (a dead run's, or one another task is
    filling); otherwise start it afresh. A new one appears whole, plan.json inside (made aside, then
    renamed), so a task never sees a spill directory without its plan."""
    marker = os.path.join(directory, "plan.json")
    expected = json.loads(json.dumps(identity))
    for _ in range(2):
        if fileio.exists(marker) and _read_json(marker) == expected:
            logging.info("resuming the corpus shuffle in %s", directory)
            locks.remove_stale_incomplete(directory)
            return
        if fileio.exists(directory):
            fileio.rmtree(directory)
        fresh = f"{directory}-{locks.HOST}-{os.getpid()}.new"
        fileio.makedirs(fresh)
        fileio.write_json_atomic(os.path.join(fresh, "plan.json"), identity)
        try:
            fileio.rename(fresh, directory)
            return
        except (OSError, *fileio.file_errors()):  # another task made it first: use theirs
            fileio.rmtree(fresh)
    raise RuntimeError(f"{directory}: tasks keep replacing the corpus shuffle's directory: do they run "
                       f"with the same settings?")


def remove_directory(directory: str) -> None:
    if fileio.exists(directory):
        fileio.rmtree(directory)
