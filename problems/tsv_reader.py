"""Rows of tab-separated files, as the fine-tuning tasks read them (GLUE folders, tsv_classification).

No quoting (as run_classifier.py's csv reader with quotechar=None); blank lines are skipped (and do
not count in a row's `index`); a UTF-8 byte-order mark before the first line is dropped; labels are
stripped of surrounding whitespace (texts are kept as they are). A row with a wrong column count is an
error naming file:line, or with `on_bad_row="skip"` left out and logged.
"""
from __future__ import annotations

import dataclasses
from typing import Iterator, Sequence

from absl import logging

from textrain.framework import corpus, shuffle
from textrain.framework.errors import UserError

BAD_ROW_POLICIES = ("error", "skip")


@dataclasses.dataclass
class Row:
    """One data row: `index` is its 0-based position among the data rows of its input file(s)."""

    index: int
    text_a: str
    text_b: str | None
    label: str | None
    where: str  # "path:line"


@dataclasses.dataclass(frozen=True)
class Columns:
    """Where a file's fields are (0-based; -1 = last column). `label` None: the file has no labels."""

    text_a: int
    text_b: int | None
    label: int | None
    header: bool


def read_tsv_rows(paths: Sequence[str], columns: Columns, on_bad_utf8: str = "error",
                  num_columns: int | None = None, exact: bool = True, on_bad_row: str = "error") -> Iterator[Row]:
    """Rows of tab-separated files (no quoting, as run_classifier's csv reader with quotechar=None).

    The expected column count is the header's; without a header, `num_columns` (or the first row's).
    A row with fewer columns (or, when `exact`, more) is bad: an error naming file:line, or with
    `on_bad_row="skip"` left out (counted and logged with the first places). GLUE readers pass
    exact=False: the originals read columns by position and ignore extra ones.
    """
    if on_bad_row not in BAD_ROW_POLICIES:
        raise UserError(f"--on_bad_row={on_bad_row!r}: use {' or '.join(BAD_ROW_POLICIES)}")
    index = 0
    for path in paths:
        expected = num_columns
        first = True
        skipped: list[int] = []
        for lineno, line in corpus.iter_lines(path, on_bad_utf8):
            if first and line.startswith("\ufeff"):
                line = line[1:]
            if not line.strip():
                continue
            fields = line.split("\t")
            if first:
                first = False
                if columns.header:
                    expected = len(fields)
                    continue
                expected = expected or len(fields)
            if len(fields) < expected or (exact and len(fields) > expected):
                if on_bad_row == "skip":
                    skipped.append(lineno)
                    continue
                raise UserError(shuffle.bad_row_message(f"{path}:{lineno}", len(fields), expected, columns.header))
            yield Row(index=index, text_a=fields[columns.text_a],
                      text_b=fields[columns.text_b] if columns.text_b is not None else None,
                      label=fields[columns.label].strip() if columns.label is not None else None,
                      where=f"{path}:{lineno}")
            index += 1
        if skipped:
            logging.warning("%s: skipped %d row(s) with a wrong column count (lines %s%s)", path, len(skipped),
                            ", ".join(map(str, skipped[:5])), ", ..." if len(skipped) > 5 else "")
