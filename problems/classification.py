"""Sentence(-pair) classification and regression tasks for fine-tuning: GLUE and your own TSV files.

Registered problems: `cola`, `sst2`, `mrpc`, `stsb`, `qqp`, `mnli`, `qnli`, `rte`, `wnli` (the GLUE
task folders of `download_glue_data.py`, read from `--glue_dir`) and `tsv_classification` (your own
tab-separated files). Each is a `framework.problem.Problem` (records, manifest, encoders) and a
`framework.tasks.FinetuneTask` (labels, metrics, eval/predict splits) — see docs/CONTRACTS.md,
"Fine-tuning tasks".

    textrain-datagen --problem=mrpc --glue_dir=glue_data/MRPC --vocab_file=uncased_L-12_H-768_A-12/vocab.txt \
        --data_dir=data
    textrain-datagen --problem=tsv_classification --train_file=train.tsv --dev_file=dev.tsv \
        --text_a_column=sentence --label_column=label --vocab_file=vocab.txt --data_dir=data

GLUE file layouts (facts of the GLUE release, as google-research/bert run_classifier.py's processors
read them; columns 0-based, tab-separated, no quoting):
- CoLA: train.tsv/dev.tsv have NO header: source, label, original mark, sentence (text 3, label 1);
  test.tsv has a header `index sentence` (text 1).
- SST-2: header `sentence label`; test `index sentence`.
- MRPC: header `Quality #1 ID #2 ID #1 String #2 String` (label 0, texts 3 and 4); test has the same
  columns with `index` first.
- STS-B: header with sentence1 (7), sentence2 (8), score (last, a float: regression); test without score.
- QQP: header `id qid1 qid2 question1 question2 is_duplicate` (texts 3, 4, label 5); test `id question1
  question2` (texts 1, 2).
- MNLI: header; sentence1 (8), sentence2 (9), gold label last; dev_matched.tsv / dev_mismatched.tsv,
  test_matched.tsv / test_mismatched.tsv (no label).
- QNLI, RTE, WNLI: header `index sentence1|question sentence2|sentence label` (texts 1, 2, label last).
Label lists are the originals' `get_labels()`. Test files have no labels: the records hold label 0
(the originals write a dummy label too) and the split's manifest says `"has_labels": false`.

`tsv_classification`: one sentence (`--text_a_column`) or a pair (`--text_b_column`); a dev split from
`--dev_file` or held out of the train file (`--dev_fraction=0.2`: every 5th row); `--has_header`
(columns by name, or by 0-based index either way); labels learned from the train file (sorted) or
given in order as `--labels=a,b,c`; `--task_type=regression` (a float label) or `multilabel` (labels
joined by `--multilabel_separator`, a multi-hot target). A dev/test label that is not in the label
list, a row with the wrong number of columns, bytes that are not UTF-8 or a regression label that is
not a number stop datagen with an error naming file:line. A test file may leave out the label column
(with a header: the label column name is absent; without: each row is the train layout minus the
label column); its manifest then says `"has_labels": false`.

Tokenization (a fine-tune always uses the PRETRAINED model's vocabulary, so it is required):
- `--tokenizer=wordpiece` (BERT, ELECTRA): `--vocab_file`, `--do_lower_case`. Layout as
  run_classifier.py: `[CLS] A [SEP] B [SEP]`, segment ids 0 for [CLS] A [SEP] and 1 for B [SEP],
  input_mask 1 on real tokens, right-padded with 0; a pair is truncated longest-first (one token at a
  time from the end of the longer side, B on a tie) to max_seq_length - 3, a single text to - 2.
  A text_b that tokenizes to nothing is a single text (the original tests `if tokens_b`).
- `--tokenizer=sentencepiece` (XLNet): `--sp_model`, `--uncased` (the names xlnet_pretrain uses).
  Layout as zihangdai/xlnet classifier_utils.py: `A <sep> B <sep> <cls>`, LEFT-padded with id 0;
  segment ids A=0 (its <sep> too), B=1 (its <sep> too), <cls>=2, padding=4; input_mask is FLOAT with
  1 on padding and 0 on real tokens (XLNet's convention), the same truncation.
Record features keep the originals' names and dtypes, so their input functions read these records:
int64 `input_ids`, `segment_ids` [max_seq_length]; `input_mask` [max_seq_length] int64 (WordPiece)
or float32 (SentencePiece); `label_ids` int64 scalar (classification), float32 scalar (regression,
as XLNet's run_classifier writes STS-B), int64 multi-hot [num_labels] (multilabel); int64
`is_real_example` (1) and `example_index` (the row's 0-based position among its file's data rows,
so predictions can be written in input order).

Decisions:
- Splits: `train` (8 shards, shuffled within each shard when written), `dev` and `test` (MNLI:
  dev_matched, dev_mismatched, test_matched, test_mismatched) as ONE unshuffled shard each, so
  evaluation and prediction read them in file order (`shuffle_split`). A GLUE test file that is
  absent is skipped; train and dev are required.
- Rows: GLUE rows need at least the header's column count (more are accepted: the originals read by
  position); tsv_classification rows need exactly it. A bad row is an error naming file:line, or with
  `--on_bad_row=skip` left out and logged (GLUE's QQP train.tsv has a few rows broken by a newline
  inside a question; HF's processor skips them too).
- Blank lines are skipped (and do not count in `example_index`); a UTF-8 byte-order mark before a
  header is dropped; labels are stripped of surrounding whitespace (texts are kept as they are).
- The reading side follows the data: `bind_data(data_dir)` (called by `dataset`, `label_list`,
  `num_labels`) adopts the manifest's tokenizer, max_seq_length, task type and labels, so a trainer
  that builds the problem with default settings still parses the records as they were written.
- The label list is decided once, in `prepare`, and written to `{problem_dir}/labels.json` for the
  worker processes; the manifests record it (`label_list`), so data made with another label list is
  refused on re-runs and the trainer reads it from there.
"""
from __future__ import annotations

import dataclasses
import os
from typing import ClassVar, Iterator, Sequence

import numpy as np
from absl import logging

from textrain.framework import corpus, corpus_formats, fileio, metrics, records, text_encoders
from textrain.framework.cli import UserError
from textrain.framework.flags import help_text
from textrain.framework.lazy_tf import tf
from textrain.framework.problem import DatasetSplit, Problem
from textrain.framework.registry import register_problem
from textrain.framework.tasks import FinetuneTask, tokenizer_file
from textrain.framework.text_problems import is_dev_document

TASK_TYPES = ("classification", "regression", "multilabel")
BAD_ROW_POLICIES = ("error", "skip")

# XLNet classifier_utils.py segment ids.
XLNET_SEG_A, XLNET_SEG_B, XLNET_SEG_CLS, XLNET_SEG_PAD = 0, 1, 2, 4


# =============================================================================================== #
# Layouts (pure functions; the graph tokenizer and the tests restate them)
# =============================================================================================== #
def truncate_seq_pair(tokens_a: list, tokens_b: list, max_length: int) -> None:
    """In place: drop one token at a time from the end of the longer list (B on a tie) until the
    pair fits in `max_length` (run_classifier.py's _truncate_seq_pair)."""
    while len(tokens_a) + len(tokens_b) > max_length:
        if len(tokens_a) > len(tokens_b):
            tokens_a.pop()
        else:
            tokens_b.pop()


def _truncate(ids_a: Sequence[int], ids_b: Sequence[int] | None,
              max_seq_length: int) -> tuple[list[int], list[int]]:
    a, b = list(ids_a), list(ids_b or [])
    if b:
        truncate_seq_pair(a, b, max_seq_length - 3)
    else:
        a = a[:max_seq_length - 2]
    return a, b


def bert_layout(ids_a: Sequence[int], ids_b: Sequence[int] | None, max_seq_length: int,
                cls_id: int, sep_id: int) -> dict[str, list]:
    """`[CLS] A [SEP] B [SEP]`, right-padded with 0; input_mask 1 = real token."""
    a, b = _truncate(ids_a, ids_b, max_seq_length)
    input_ids = [cls_id] + a + [sep_id]
    segment_ids = [0] * len(input_ids)
    if b:
        input_ids += b + [sep_id]
        segment_ids += [1] * (len(b) + 1)
    pad = max_seq_length - len(input_ids)
    return {"input_ids": input_ids + [0] * pad, "input_mask": [1] * len(input_ids) + [0] * pad,
            "segment_ids": segment_ids + [0] * pad}


def xlnet_layout(ids_a: Sequence[int], ids_b: Sequence[int] | None, max_seq_length: int,
                 cls_id: int = text_encoders.XLNET_SPECIAL_IDS["<cls>"],
                 sep_id: int = text_encoders.XLNET_SPECIAL_IDS["<sep>"]) -> dict[str, list]:
    """`A <sep> B <sep> <cls>`, LEFT-padded with id 0; float input_mask 1 = padding, 0 = real."""
    a, b = _truncate(ids_a, ids_b, max_seq_length)
    input_ids = a + [sep_id]
    segment_ids = [XLNET_SEG_A] * len(input_ids)
    if b:
        input_ids += b + [sep_id]
        segment_ids += [XLNET_SEG_B] * (len(b) + 1)
    input_ids.append(cls_id)
    segment_ids.append(XLNET_SEG_CLS)
    pad = max_seq_length - len(input_ids)
    return {"input_ids": [0] * pad + input_ids, "input_mask": [1.0] * pad + [0.0] * len(input_ids),
            "segment_ids": [XLNET_SEG_PAD] * pad + segment_ids}


# =============================================================================================== #
# Settings
# =============================================================================================== #
def _setting(default, text: str):
    return dataclasses.field(default=default, metadata=help_text(text))


@dataclasses.dataclass
class ClassificationHParams:
    tokenizer: str = _setting("wordpiece", "Fine-tuning tasks: wordpiece (BERT, ELECTRA: --vocab_file, "
                                           "--do_lower_case) | sentencepiece (XLNet: --sp_model, --uncased).")
    vocab_file: str = _setting("", "WordPiece vocab.txt of the PRETRAINED model (required for wordpiece).")
    do_lower_case: bool = _setting(True, "WordPiece: lower-case and strip accents (uncased models).")
    sp_model: str = _setting("", "SentencePiece model of the PRETRAINED XLNet (required for sentencepiece).")
    uncased: bool = _setting(False, "SentencePiece: lower-case the text (uncased XLNet models).")
    max_seq_length: int = _setting(128, "Tokens per example, special tokens included.")
    on_bad_utf8: str = _setting("error", "Input bytes that are not UTF-8: error | replace | skip")
    on_bad_row: str = _setting("error", "Fine-tuning tasks: a TSV row with a wrong column count: error | skip "
                                        "(GLUE's QQP train.tsv has a few such rows: a question split by a newline).")


@dataclasses.dataclass
class GlueHParams(ClassificationHParams):
    glue_dir: str = _setting("", "GLUE task folder (e.g. glue_data/MRPC) holding train.tsv, dev.tsv, "
                                 "test.tsv (MNLI: dev_matched.tsv, ...).")


@dataclasses.dataclass
class TsvHParams(ClassificationHParams, corpus_formats.RecordSettings):
    train_file: str = _setting("", "tsv_classification: training TSV (.gz/.bz2 ok; comma list/glob).")
    dev_file: str = _setting("", "tsv_classification: dev TSV (optional).")
    dev_fraction: float = _setting(0.0, "tsv_classification without --dev_file: hold out this share of the train "
                                        "rows as the dev split (every 1/f-th row: deterministic).")
    test_file: str = _setting("", "tsv_classification: test TSV (optional; the label column may be absent).")
    has_header: bool = _setting(True, "tsv_classification: the first row names the columns.")
    text_a_column: str = _setting("sentence", "tsv_classification: first text column (name, or 0-based index).")
    text_b_column: str = _setting("", "tsv_classification: second text column for pairs (empty: single text).")
    label_column: str = _setting("label", "tsv_classification: label column (name, or 0-based index).")
    labels: str = _setting("", "tsv_classification: the labels in id order, comma-separated "
                               "(empty: the sorted labels of the train file).")
    task_type: str = _setting("classification", "tsv_classification: classification | regression | multilabel.")
    multilabel_separator: str = _setting(",", "tsv_classification multilabel: separator of a row's labels.")


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
                raise UserError(f"{path}:{lineno}: {len(fields)} tab-separated columns, expected "
                                f"{expected} (as the {'header' if columns.header else 'first row'}); a tab or "
                                f"newline inside a text field, or a truncated row? (--on_bad_row=skip leaves "
                                f"such rows out)")
            yield Row(index=index, text_a=fields[columns.text_a],
                      text_b=fields[columns.text_b] if columns.text_b is not None else None,
                      label=fields[columns.label].strip() if columns.label is not None else None,
                      where=f"{path}:{lineno}")
            index += 1
        if skipped:
            logging.warning("%s: skipped %d row(s) with a wrong column count (lines %s%s)", path, len(skipped),
                            ", ".join(map(str, skipped[:5])), ", ..." if len(skipped) > 5 else "")


# =============================================================================================== #
# The base class
# =============================================================================================== #
class ClassificationProblem(FinetuneTask, Problem):
    """Sentence(-pair) classification/regression/multilabel records for BERT, ELECTRA and XLNet.

    Subclasses implement `split_paths(split) -> list[str]`, `split_columns(split) -> Columns`,
    `split_names() -> list[str]` and either `fixed_labels` or a learned label list (`learn_labels`).
    """

    HParams: ClassVar[type] = ClassificationHParams
    # Settings the reading side takes from the data's manifest (bind_data).
    DATA_SETTINGS: ClassVar[tuple[str, ...]] = ("tokenizer", "max_seq_length", "do_lower_case", "uncased",
                                                "task_type", "multilabel_separator")
    fixed_labels: ClassVar[list[str] | None] = None
    train_shards: ClassVar[int] = 8
    LABELS_FILE: ClassVar[str] = "labels.json"

    def __init__(self, hparams=None):
        super().__init__(hparams)
        self._labels: list[str] | None = None
        self._reading_num_labels: int | None = None
        self._bound: tuple[str, dict] | None = None
        self._index: dict[str, int] | None = None

    # ------------------------------------------------------------------ what subclasses say
    def split_names(self) -> list[str]:
        return [DatasetSplit.TRAIN, DatasetSplit.EVAL, DatasetSplit.TEST]

    def split_paths(self, split: str) -> list[str]:
        raise NotImplementedError

    def split_columns(self, split: str) -> Columns:
        raise NotImplementedError

    def split_num_columns(self, split: str) -> int | None:
        """Expected column count of a headerless file (None: the first row's)."""
        return None

    def split_wanted(self, split: str) -> bool:
        """Whether `split` is made (its input must then exist); default: every split."""
        return True

    @property
    def task_type(self) -> str:  # type: ignore[override]
        return "classification"

    # ------------------------------------------------------------------ FinetuneTask API
    def eval_splits(self) -> list[str]:
        return [s for s in self.split_names() if s.startswith(DatasetSplit.EVAL)]

    def predict_splits(self) -> list[str]:
        return [s for s in self.split_names() if s.startswith(DatasetSplit.TEST)]

    def bind_data(self, data_dir: str) -> dict:
        """Adopt the settings the records were made with (from a manifest of `data_dir`): the reading
        side (feature shapes and dtypes, task type, labels) follows the data, whatever settings this
        instance was built with, so a trainer needs only the problem name and data_dir. Returns them."""
        if self._bound is None or self._bound[0] != data_dir:
            manifest = None
            for split in self.split_names():
                if self.has_split(data_dir, split):
                    manifest = self.read_manifest(data_dir, split)
                    break
            if manifest is None:  # read_manifest's error names the command to run
                manifest = self.read_manifest(data_dir, DatasetSplit.TRAIN)
            settings = manifest["settings"]
            names = {f.name for f in dataclasses.fields(self.hparams)}
            adopt = {k: settings[k] for k in self.DATA_SETTINGS if k in names and k in settings}
            # The vocabulary the data was made with, unless this instance names one (export needs it).
            adopt.update({k: settings[k] for k in ("vocab_file", "sp_model")
                          if k in names and settings.get(k) and not getattr(self.hparams, k)})
            self.hparams = dataclasses.replace(self.hparams, **adopt)
            self._labels = list(settings["label_list"])
            self._index = None
            self._reading_num_labels = 1 if self.task_type == "regression" else len(self._labels)
            self._bound = (data_dir, settings)
        return self._bound[1]

    def label_list(self, data_dir: str) -> list[str]:
        """The labels in id order, from the data's manifest ([] for regression)."""
        self.bind_data(data_dir)
        return list(self._labels)

    def num_labels(self, data_dir: str) -> int:
        """Outputs of the model head: 1 for regression, else the number of labels."""
        self.bind_data(data_dir)
        return 1 if self.task_type == "regression" else len(self._labels)

    def compute_metrics(self, labels: np.ndarray, outputs: np.ndarray) -> dict[str, float]:
        outputs = np.asarray(outputs)
        labels = np.asarray(labels)
        if self.task_type == "regression":
            predictions = outputs.reshape(-1)
            return {"pearson": metrics.pearson(predictions, labels),
                    "spearman": metrics.spearman(predictions, labels),
                    "mse": metrics.mean_squared_error(predictions, labels)}
        if self.task_type == "multilabel":
            predictions = outputs > 0  # sigmoid(logit) > 0.5
            return {"micro_f1": metrics.multilabel_micro_f1(labels, predictions),
                    "exact_match": float(np.mean(np.all(predictions == labels.astype(bool), axis=-1)))}
        predictions = np.argmax(outputs, axis=-1)
        labels = labels.reshape(-1)
        out = {"accuracy": metrics.accuracy(labels, predictions)}
        if outputs.shape[-1] == 2:
            out.update(f1=metrics.f1_binary(labels, predictions), mcc=metrics.matthews_corrcoef(labels, predictions))
        else:
            out.update(macro_f1=metrics.macro_f1(labels, predictions, num_classes=outputs.shape[-1]))
        return out

    # ------------------------------------------------------------------ checks and encoders
    def check_hparams(self) -> None:
        hp = self.hparams
        tokenizer_file(hp)
        if hp.max_seq_length < 3:
            raise UserError(f"--max_seq_length={hp.max_seq_length}: must be at least 3 (special tokens)")
        if self.task_type not in TASK_TYPES:
            raise UserError(f"--task_type={self.task_type!r}: use one of {', '.join(TASK_TYPES)}")

    def feature_encoders(self, data_dir: str) -> dict:
        return {"inputs": self.encoder()}

    # ------------------------------------------------------------------ labels
    def labels_path(self, data_dir: str) -> str:
        return os.path.join(self.problem_dir(data_dir), self.LABELS_FILE)

    def learn_labels(self) -> list[str]:
        """The label list when there is no fixed one (GLUE has fixed lists)."""
        raise NotImplementedError

    def decide_labels(self) -> list[str]:
        if self.task_type == "regression":
            return []
        if self.fixed_labels is not None:
            return list(self.fixed_labels)
        return self.learn_labels()

    def labels(self, data_dir: str) -> list[str]:
        """The label list decided by `prepare` (read from the problem folder in worker processes)."""
        if self._labels is None:
            path = self.labels_path(data_dir)
            if not fileio.exists(path):
                raise FileNotFoundError(f"{path} does not exist: run textrain-datagen (prepare) first")
            self._labels = list(records.read_json(path)["labels"])
        return self._labels

    # ------------------------------------------------------------------ generation side
    def dataset_splits(self) -> list[tuple[str, int]]:
        splits = [s for s in self.split_names() if self.split_wanted(s)]
        for split in splits:
            self.split_paths(split)  # a wanted split's input must exist: an error naming it
        return [(s, self.train_shards if s == DatasetSplit.TRAIN else 1) for s in splits]

    def shuffle_split(self, split: str) -> bool:
        return split == DatasetSplit.TRAIN

    def prepare(self, data_dir: str, tmp_dir: str) -> None:
        """Check the settings and files, decide the label list, write it for the workers."""
        self.check_hparams()
        self.encoder()
        for split, _ in self.dataset_splits():
            self.split_paths(split)
        labels = self.decide_labels()
        fileio.makedirs(self.problem_dir(data_dir))
        records.write_json_atomic(self.labels_path(data_dir), {"labels": labels, "task_type": self.task_type})
        self._labels = labels

    def manifest_settings(self, data_dir: str) -> dict:
        encoder = self.encoder()
        labels = self.labels(data_dir)
        settings = corpus_formats.without_default_settings(dataclasses.asdict(self.hparams))
        return dict(settings, task_type=self.task_type, label_list=labels,
                    num_labels=1 if self.task_type == "regression" else len(labels),
                    vocab_size=int(encoder.vocab_size), vocab_fingerprint=encoder.fingerprint(),
                    layout="xlnet" if self.hparams.tokenizer == "sentencepiece" else "bert")

    def split_has_labels(self, split: str) -> bool:
        return self.split_columns(split).label is not None

    def after_split(self, data_dir: str, split: str, manifest: dict) -> None:
        manifest["has_labels"] = self.split_has_labels(split)

    exact_columns: ClassVar[bool] = True  # a row must have exactly the header's column count

    def rows(self, split: str) -> Iterator[Row]:
        return read_tsv_rows(self.split_paths(split), self.split_columns(split), self.hparams.on_bad_utf8,
                             num_columns=self.split_num_columns(split), exact=self.exact_columns,
                             on_bad_row=self.hparams.on_bad_row)

    def generate_samples(self, data_dir: str, tmp_dir: str, split: str) -> Iterator[dict]:
        for row in self.rows(split):
            yield dataclasses.asdict(row)

    def generate_encoded_samples(self, data_dir: str, tmp_dir: str, split: str) -> Iterator[dict]:
        for row in self.rows(split):
            yield self.encode_row(row, data_dir)

    def generate_shard(self, data_dir, tmp_dir, split, shard_id, num_shards, seed) -> Iterator[dict]:
        """Row i goes to shard i % num_shards (dev/test: one shard, in file order)."""
        for row in self.rows(split):
            if row.index % num_shards == shard_id:
                yield self.encode_row(row, data_dir)

    def encode_sample(self, sample: dict, encoders: dict) -> dict:
        raise NotImplementedError("use encode_row(row, data_dir)")

    def label_feature(self, row: Row, data_dir: str):
        """The `label_ids` value of a row (0 / 0.0 / zeros for a file without labels)."""
        labels = self.labels(data_dir)
        kind = self.task_type
        if row.label is None:
            return 0.0 if kind == "regression" else ([0] * len(labels) if kind == "multilabel" else 0)
        if kind == "regression":
            try:
                value = float(row.label)
            except ValueError:
                raise UserError(f"{row.where}: regression label {row.label!r} is not a number") from None
            if not np.isfinite(value):
                raise UserError(f"{row.where}: regression label {row.label!r} is not finite")
            return value
        index = self._label_index(data_dir)
        if kind == "multilabel":
            hot = [0] * len(labels)
            for name in self.split_multilabel(row.label):
                hot[self._lookup(index, name, row)] = 1
            return hot
        return self._lookup(index, row.label, row)

    def split_multilabel(self, value: str) -> list[str]:
        return [p.strip() for p in value.split(self.hparams.multilabel_separator) if p.strip()]

    def _label_index(self, data_dir: str) -> dict[str, int]:
        if self._index is None:
            self._index = {name: i for i, name in enumerate(self.labels(data_dir))}
        return self._index

    def _lookup(self, index: dict[str, int], name: str, row: Row) -> int:
        if name not in index:
            shown = ", ".join(index) if len(index) <= 20 else ", ".join(list(index)[:20]) + ", ..."
            raise UserError(f"{row.where}: label {name!r} is not one of the {len(index)} labels "
                            f"({shown}); every label must occur in the train file (or be in --labels)")
        return index[name]

    def encode_row(self, row: Row, data_dir: str) -> dict:
        encoder = self.encoder()
        ids_a = encoder.encode(row.text_a)
        ids_b = encoder.encode(row.text_b) if row.text_b else None  # the originals: `if example.text_b`
        length = self.hparams.max_seq_length
        if self.hparams.tokenizer == "wordpiece":
            features = bert_layout(ids_a, ids_b, length, encoder.special_ids["[CLS]"], encoder.special_ids["[SEP]"])
        else:
            features = xlnet_layout(ids_a, ids_b, length)
        features["label_ids"] = self.label_feature(row, data_dir)
        features["is_real_example"] = 1
        features["example_index"] = row.index
        return features

    # ------------------------------------------------------------------ reading side
    def example_reading_spec(self) -> dict:
        length = self.hparams.max_seq_length
        mask_dtype = tf.float32 if self.hparams.tokenizer == "sentencepiece" else tf.int64
        spec = {"input_ids": tf.io.FixedLenFeature([length], tf.int64),
                "input_mask": tf.io.FixedLenFeature([length], mask_dtype),
                "segment_ids": tf.io.FixedLenFeature([length], tf.int64),
                "is_real_example": tf.io.FixedLenFeature([], tf.int64),
                "example_index": tf.io.FixedLenFeature([], tf.int64)}
        if self.task_type == "regression":
            spec["label_ids"] = tf.io.FixedLenFeature([], tf.float32)
        elif self.task_type == "multilabel":
            if self._reading_num_labels is None:
                raise ValueError("multilabel reading needs the label count: call bind_data(data_dir) first "
                                 "(dataset() does)")
            spec["label_ids"] = tf.io.FixedLenFeature([self._reading_num_labels], tf.int64)
        else:
            spec["label_ids"] = tf.io.FixedLenFeature([], tf.int64)
        return spec

    def example_length(self, example: dict) -> tf.Tensor:
        return tf.shape(example["input_ids"])[0]

    def dataset(self, mode, data_dir, params, input_context=None, split=None) -> tf.data.Dataset:
        """Problem.dataset; records are already max_seq_length long, so `params.max_length` is not used
        (fixed batching would otherwise pad the multi-hot labels to it)."""
        self.bind_data(data_dir)
        params = dataclasses.replace(params, max_length=0, batching="fixed")
        return super().dataset(mode, data_dir, params, input_context=input_context, split=split)


# =============================================================================================== #
# GLUE
# =============================================================================================== #
@dataclasses.dataclass(frozen=True)
class GlueFile:
    name: str          # file name in the task folder
    columns: Columns
    num_columns: int | None = None  # headerless files: the expected count


class GlueProblem(ClassificationProblem):
    """One GLUE task folder (`--glue_dir`); subclasses give `files` {split: GlueFile} and labels."""

    HParams: ClassVar[type] = GlueHParams
    exact_columns = False  # extra columns are ignored, as the originals' processors read by position
    files: ClassVar[dict[str, GlueFile]] = {}
    regression: ClassVar[bool] = False

    @property
    def task_type(self) -> str:  # type: ignore[override]
        return "regression" if self.regression else "classification"

    def split_names(self) -> list[str]:
        return list(self.files)

    def split_wanted(self, split: str) -> bool:
        """Train and dev always; a test file only when the folder has it (people often have only train/dev)."""
        if not split.startswith(DatasetSplit.TEST) or not self.hparams.glue_dir:
            return True
        return fileio.exists(os.path.join(self.hparams.glue_dir, self.files[split].name))

    def split_paths(self, split: str) -> list[str]:
        folder = self.hparams.glue_dir
        if not folder:
            raise UserError(f"--glue_dir is required for {self.name}: the GLUE task folder "
                            f"(e.g. glue_data/{self.name.upper()}) holding {', '.join(f.name for f in self.files.values())}")
        path = os.path.join(folder, self.files[split].name)
        if not fileio.exists(path):
            raise UserError(f"{path} does not exist (--glue_dir={folder}): {self.name} reads "
                            f"{', '.join(f.name for f in self.files.values())}")
        return [path]

    def split_columns(self, split: str) -> Columns:
        return self.files[split].columns

    def split_num_columns(self, split: str) -> int | None:
        return self.files[split].num_columns


def _headed(a: int, b: int | None = None, label: int | None = None) -> Columns:
    return Columns(text_a=a, text_b=b, label=label, header=True)


_BINARY = ["0", "1"]
_NLI2 = ["entailment", "not_entailment"]


@register_problem(name="cola")
class Cola(GlueProblem):
    """CoLA: grammatical acceptability; Matthews correlation."""

    fixed_labels = _BINARY
    main_metric = "mcc"
    files = {"train": GlueFile("train.tsv", Columns(3, None, 1, header=False), 4),
             "dev": GlueFile("dev.tsv", Columns(3, None, 1, header=False), 4),
             "test": GlueFile("test.tsv", _headed(1))}


@register_problem(name="sst2")
class Sst2(GlueProblem):
    fixed_labels = _BINARY
    main_metric = "accuracy"
    files = {"train": GlueFile("train.tsv", _headed(0, None, 1)),
             "dev": GlueFile("dev.tsv", _headed(0, None, 1)),
             "test": GlueFile("test.tsv", _headed(1))}


@register_problem(name="mrpc")
class Mrpc(GlueProblem):
    """MRPC: paraphrase; the leaderboard reports F1 then accuracy (best checkpoint by F1)."""

    fixed_labels = _BINARY
    main_metric = "f1"
    files = {"train": GlueFile("train.tsv", _headed(3, 4, 0)),
             "dev": GlueFile("dev.tsv", _headed(3, 4, 0)),
             "test": GlueFile("test.tsv", _headed(3, 4))}


@register_problem(name="stsb")
class Stsb(GlueProblem):
    """STS-B: similarity score 0-5, regression; Pearson (and Spearman)."""

    regression = True
    main_metric = "pearson"
    files = {"train": GlueFile("train.tsv", _headed(7, 8, -1)),
             "dev": GlueFile("dev.tsv", _headed(7, 8, -1)),
             "test": GlueFile("test.tsv", _headed(7, 8))}


@register_problem(name="qqp")
class Qqp(GlueProblem):
    """QQP: duplicate questions; F1 then accuracy (best checkpoint by F1)."""

    fixed_labels = _BINARY
    main_metric = "f1"
    files = {"train": GlueFile("train.tsv", _headed(3, 4, 5)),
             "dev": GlueFile("dev.tsv", _headed(3, 4, 5)),
             "test": GlueFile("test.tsv", _headed(1, 2))}


@register_problem(name="mnli")
class Mnli(GlueProblem):
    """MNLI: matched and mismatched dev/test files, each its own split; accuracy."""

    fixed_labels = ["contradiction", "entailment", "neutral"]
    main_metric = "accuracy"
    files = {"train": GlueFile("train.tsv", _headed(8, 9, -1)),
             "dev_matched": GlueFile("dev_matched.tsv", _headed(8, 9, -1)),
             "dev_mismatched": GlueFile("dev_mismatched.tsv", _headed(8, 9, -1)),
             "test_matched": GlueFile("test_matched.tsv", _headed(8, 9)),
             "test_mismatched": GlueFile("test_mismatched.tsv", _headed(8, 9))}


class _IndexPairLabel(GlueProblem):
    """`index text_a text_b label` files (QNLI, RTE, WNLI)."""

    main_metric = "accuracy"
    files = {"train": GlueFile("train.tsv", _headed(1, 2, -1)),
             "dev": GlueFile("dev.tsv", _headed(1, 2, -1)),
             "test": GlueFile("test.tsv", _headed(1, 2))}


@register_problem(name="qnli")
class Qnli(_IndexPairLabel):
    fixed_labels = _NLI2


@register_problem(name="rte")
class Rte(_IndexPairLabel):
    fixed_labels = _NLI2


@register_problem(name="wnli")
class Wnli(_IndexPairLabel):
    fixed_labels = _BINARY


# =============================================================================================== #
# Your own TSV files
# =============================================================================================== #
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
    def _header(self, path: str) -> list[str]:
        for _, line in corpus.iter_lines(path, self.hparams.on_bad_utf8):
            if line.strip():
                return line.lstrip("\ufeff").split("\t")
        raise UserError(f"{path}: the file is empty")

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

    def rows(self, split: str) -> Iterator[Row]:
        """With --dev_fraction, train and dev are the two parts of the train file (row i is dev when
        floor((i + 1) f) > floor(i f): exactly floor(N f) rows, spread evenly); example_index stays the
        row's position in the file."""
        fraction = self.hparams.dev_fraction
        if fraction <= 0 or split not in (DatasetSplit.TRAIN, DatasetSplit.EVAL):
            yield from super().rows(split)
            return
        for row in super().rows(split):
            if is_dev_document(row.index, fraction) == (split == DatasetSplit.EVAL):
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
