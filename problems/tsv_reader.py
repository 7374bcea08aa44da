"""Rows of tab-separated files, as the fine-tuning tasks read them (GLUE folders, tsv_classification).

No quoting (as run_classifier.py's csv reader with quotechar=None); blank lines are skipped (and do
not count in a row's `index`); a UTF-8 byte-order mark before the first line is dropped; labels are
stripped of surrounding whitespace (texts are kept as they are). A row with a wrong column count is an
error naming file:line, or with `on_bad_row="skip"` left out and logged.
"""
from __future__ import annotations

import dataclasses
from typing import Iterator, Sequence

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
        table = shuffle.TableFile(path, "", columns.header, num_columns or 0, exact)
        state = shuffle.TableState(table.columns, 0, index)
        for lineno, index, line in shuffle.table_rows(table, corpus.iter_lines(path, on_bad_utf8), on_bad_row, state):
            yield row_of(line.split("\t"), columns, index, f"{path}:{lineno}")
        index = state.row
        shuffle.warn_skipped_rows(path, state.skipped)


def row_of(fields: list[str], columns: Columns, index: int, where: str) -> Row:
    """The row of a line's fields (the label stripped of surrounding whitespace)."""
    return Row(index=index, text_a=fields[columns.text_a],
               text_b=fields[columns.text_b] if columns.text_b is not None else None,
               label=fields[columns.label].strip() if columns.label is not None else None, where=where)
