"""`tsv_classification`: fine-tuning on your own tab-separated files.

    textrain-datagen --problem=tsv_classification --train_file=train.tsv --dev_file=dev.tsv \
        --text_a_column=sentence --label_column=label --vocab_file=vocab.txt --data_dir=data

`--dev_file` or held out of the train file (`--dev_fraction=0.2`: every 5th row); `--has_header`
(columns by name, or by 0-based index either way); labels learned from the train file (sorted) or
given in order as `--labels=a,b,c`; `--task_type=regression` (a float label) or `multilabel` (labels
joined by `--multilabel_separator`, a multi-hot target). A dev/test label that is not in the label
list, a row with the wrong number of columns, bytes that are not UTF-8 or a regression label that is
not a number stop datagen with an error naming file:line. A test file may leave out the label column
(with a header: the label column name is absent; without: each row is the train layout minus the
label column); its manifest then says `"has_labels": false`.

Decisions:
- Rows need exactly the header's (or first row's) column count; a bad row is an error naming
  file:line, or with `--on_bad_row=skip` left out and logged.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar, Iterator

from textrain.framework import corpus, corpus_formats, shuffle
from textrain.framework.errors import UserError
from textrain.framework.problem import DatasetSplit
from textrain.framework.registry import register_problem
from textrain.problems.classification import ClassificationHParams, ClassificationProblem, setting
from textrain.problems.tsv_reader import Columns, Row


@dataclasses.dataclass
class TsvHParams(ClassificationHParams, corpus_formats.RecordSettings):
    train_file: str = setting("", "tsv_classification: training TSV (.gz/.bz2 ok; comma list/glob).")
    dev_file: str = setting("", "tsv_classification: dev TSV (optional).")
    dev_fraction: float = setting(0.0, "tsv_classification without --dev_file: hold out this share of the train "
                                       "rows as the dev split (every 1/f-th row: deterministic).")
    test_file: str = setting("", "tsv_classification: test TSV (optional; the label column may be absent).")
    has_header: bool = setting(True, "tsv_classification: the first row names the columns.")
    text_a_column: str = setting("sentence", "tsv_classification: first text column (name, or 0-based index).")
    text_b_column: str = setting("", "tsv_classification: second text column for pairs (empty: single text).")
    label_column: str = setting("label", "tsv_classification: label column (name, or 0-based index).")
    labels: str = setting("", "tsv_classification: the labels in id order, comma-separated "
                              "(empty: the sorted labels of the train file).")
    task_type: str = setting("classification", "tsv_classification: classification | regression | multilabel.")
    multilabel_separator: str = setting(",", "tsv_classification multilabel: separator of a row's labels.")


@register_problem(name="tsv_classification")
class TsvClassification(ClassificationProblem):
    """Users' own TSV data (see the module docstring)."""

    HParams: ClassVar[type] = TsvHParams

    @property
    def task_type(self) -> str:  # type: ignore[override]
        return self.hparams.task_type

    @property
    def main_metric(self) -> str:  # type: ignore[override]
        return {"regression": "pearson", "multilabel": "micro_f1"}.get(self.task_type, "accuracy")

    _FLAGS = {DatasetSplit.TRAIN: "train_file", DatasetSplit.EVAL: "dev_file", DatasetSplit.TEST: "test_file"}

    def split_wanted(self, split: str) -> bool:
        """Train always; dev with --dev_file or --dev_fraction; test with --test_file."""
        hp = self.hparams
        if split == DatasetSplit.EVAL:
            return bool(hp.dev_file) or hp.dev_fraction > 0
        return split == DatasetSplit.TRAIN or bool(hp.test_file)

    def split_paths(self, split: str) -> list[str]:
        if split == DatasetSplit.EVAL and self.hparams.dev_fraction > 0:
            split = DatasetSplit.TRAIN  # held-out rows of the train file
        flag = self._FLAGS[split]
        pattern = getattr(self.hparams, flag)
        if not pattern:
            raise UserError(f"--{flag} is required" if split == DatasetSplit.TRAIN else f"no --{flag}")
        hp = self.hparams
        columns = tuple(c for c in (hp.text_a_column, hp.text_b_column, hp.label_column) if c)
        try:  # structured files (JSON Lines, Parquet, ...) are read as a TSV of these columns
            return corpus.expand_paths(pattern, corpus_formats.ReadOptions.of(hp, "table", columns))
        except corpus.CorpusError as e:
            raise UserError(f"--{flag}={pattern}: {e}") from None

    def check_hparams(self) -> None:
        super().check_hparams()
        hp = self.hparams
        if not 0 <= hp.dev_fraction < 1:
            raise UserError(f"--dev_fraction={hp.dev_fraction}: must be in [0, 1)")
        if hp.dev_fraction > 0 and hp.dev_file:
            raise UserError("give --dev_file or --dev_fraction, not both")
        if hp.labels and self.task_type == "regression":
            raise UserError("--labels does not apply to --task_type=regression")
        if self.task_type == "multilabel" and not hp.multilabel_separator:
            raise UserError("--multilabel_separator must not be empty")
        if not hp.text_a_column or not hp.label_column:
            raise UserError("--text_a_column and --label_column must name columns")
        given = [x.strip() for x in hp.labels.split(",")] if hp.labels else []
        if any(not x for x in given) or len(set(given)) != len(given):
            raise UserError(f"--labels={hp.labels!r}: each label once, none empty")
        self.split_columns(DatasetSplit.TRAIN)

    # ------------------------------------------------------------------ columns
    def __init__(self, hparams: TsvHParams | None = None):
        super().__init__(hparams)
        # A file's header, read once per process: every shard job asks for its split's columns, and a
        # structured file (JSON Lines, Parquet) opened as text parses records to give its first line.
        self._headers: dict[str, list[str]] = {}

    def _header(self, path: str) -> list[str]:
        if path not in self._headers:
            line = next((line for _, line in corpus.iter_lines(path, self.hparams.on_bad_utf8) if line.strip()),
                        None)
            if line is None:
                raise UserError(f"{path}: the file is empty")
            self._headers[path] = line.lstrip("\ufeff").split("\t")
        return self._headers[path]

    def _first_row_width(self, path: str) -> int:
        return len(self._header(path))

    def _column(self, spec: str, flag: str, header: list[str] | None, path: str) -> int | None:
        if header is not None and spec in header:
            return header.index(spec)
        if spec.isdigit():
            return int(spec)
        if header is None:
            raise UserError(f"--{flag}={spec!r}: without a header (--has_header=false) columns are "
                            f"0-based indexes")
        return None  # a name the header lacks

    def split_columns(self, split: str) -> Columns:
        hp = self.hparams
        path = self.split_paths(split)[0]
        header = self._header(path) if hp.has_header else None
        columns = {}
        for key, flag in (("text_a", "text_a_column"), ("text_b", "text_b_column"), ("label", "label_column")):
            spec = getattr(hp, flag)
            if not spec:
                columns[key] = None
                continue
            columns[key] = self._column(spec, flag, header, path)
            if columns[key] is None and not (key == "label" and split == DatasetSplit.TEST):
                raise UserError(f"--{flag}={spec!r}: {path} has no such column (its header: "
                                f"{', '.join(header or [])})")
        if not hp.has_header and split == DatasetSplit.TEST:
            columns = self._headerless_test_columns(columns, path)
        return Columns(header=hp.has_header, **columns)

    def _headerless_test_columns(self, columns: dict, path: str) -> dict:
        """A headerless test file has the train layout, or the train layout minus the label column."""
        train_width = self._first_row_width(self.split_paths(DatasetSplit.TRAIN)[0])
        width = self._first_row_width(path)
        if width == train_width:
            return columns
        if width != train_width - 1:
            raise UserError(f"{path}: {width} columns; a headerless test file has the train file's "
                            f"{train_width} columns, or {train_width - 1} without the label column")
        label = columns["label"]
        shift = {k: (v - 1 if v is not None and v > label else v) for k, v in columns.items()}
        shift["label"] = None
        return shift

    def split_num_columns(self, split: str) -> int | None:
        return None

    def held_out_fraction(self) -> float:
        return self.hparams.dev_fraction

    def rows(self, split: str) -> Iterator[Row]:
        """With --dev_fraction, train and dev are the two parts of the train file (row i is dev when
        floor((i + 1) f) > floor(i f): exactly floor(N f) rows, spread evenly); example_index stays the
        row's position in the file."""
        fraction = self.hparams.dev_fraction
        if fraction <= 0 or split not in (DatasetSplit.TRAIN, DatasetSplit.EVAL):
            yield from super().rows(split)
            return
        for row in super().rows(split):
            if shuffle.is_dev_document(row.index, fraction) == (split == DatasetSplit.EVAL):
                yield row

    # ------------------------------------------------------------------ labels
    def learn_labels(self) -> list[str]:
        """--labels in their order, else the sorted labels of the whole train file (held-out rows too)."""
        hp = self.hparams
        if hp.labels:
            return [x.strip() for x in hp.labels.split(",")]
        seen: set[str] = set()
        for row in ClassificationProblem.rows(self, DatasetSplit.TRAIN):
            if self.task_type == "multilabel":
                seen.update(self.split_multilabel(row.label))
            else:
                seen.add(row.label)
        if not seen:
            raise UserError(f"--train_file={hp.train_file}: no labels found")
        return sorted(seen)
