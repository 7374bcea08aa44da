"""The base of the sentence(-pair) classification, regression and multilabel tasks: rows -> records.

`ClassificationProblem` turns the rows of a task's files (problems/tsv_reader.py) into fine-tuning
records in the model family's layout (problems/layouts.py) and is a `framework.tasks.FinetuneTask`
(labels, eval/predict splits; metrics and predictions are the contract's classification defaults).
Its subclasses say where the rows are: problems/glue.py (the nine GLUE tasks) and
problems/tsv_classification.py (your own TSV files). See docs/CONTRACTS.md, "Fine-tuning tasks".

Tokenization (a fine-tune always uses the PRETRAINED model's vocabulary, so it is required):
- `--tokenizer=wordpiece` (BERT, ELECTRA): `--vocab_file`, `--do_lower_case`; `bert_layout`.
  A text_b that tokenizes to nothing is a single text (the original tests `if tokens_b`).
- `--tokenizer=sentencepiece` (XLNet): `--sp_model`, `--uncased` (the names xlnet_pretrain uses);
  `xlnet_layout`.
Record features keep the originals' names and dtypes, so their input functions read these records:
int64 `input_ids`, `segment_ids` [max_seq_length]; `input_mask` [max_seq_length] int64 (WordPiece)
or float32 (SentencePiece); `label_ids` int64 scalar (classification), float32 scalar (regression,
as XLNet's run_classifier writes STS-B), int64 multi-hot [num_labels] (multilabel); int64
`is_real_example` (1) and `example_index` (the row's 0-based position among its file's data rows,
so predictions can be written in input order).

Decisions:
- Splits: `train` (8 shards, shuffled within each shard when written), every dev and test split ONE
  unshuffled shard, so evaluation and prediction read them in file order (`shuffle_split`).
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
from typing import ClassVar, Iterator

import numpy as np

from textrain.framework import corpus_formats, fileio, shuffle
from textrain.framework.errors import UserError
from textrain.framework.lazy_tf import tf
from textrain.framework.problem import DatasetSplit
from textrain.framework.settings import help_text
from textrain.framework.tasks import TASK_TYPES, FinetuneTask, tokenizer_file
from textrain.problems.layouts import bert_layout, xlnet_layout
from textrain.problems.tsv_reader import BAD_ROW_POLICIES, Columns, Row, read_tsv_rows, row_of


def setting(default, text: str):
    """A settings field with its help text (the datagen flag of the same name shows it)."""
    return dataclasses.field(default=default, metadata=help_text(text))


@dataclasses.dataclass
class TokenizerHParams:
    """The pretrained model's tokenizer and the record length: the settings every fine-tuning task made from
    text shares (framework.tasks.pretrained_encoder reads them)."""

    tokenizer: str = setting("wordpiece", "Fine-tuning tasks: wordpiece (BERT, ELECTRA: --vocab_file, "
                                          "--do_lower_case) | sentencepiece (XLNet: --sp_model, --uncased).")
    vocab_file: str = setting("", "WordPiece vocab.txt of the PRETRAINED model (required for wordpiece).")
    do_lower_case: bool = setting(True, "WordPiece: lower-case and strip accents (uncased models).")
    sp_model: str = setting("", "SentencePiece model of the PRETRAINED XLNet (required for sentencepiece).")
    uncased: bool = setting(False, "SentencePiece: lower-case the text (uncased XLNet models).")
    max_seq_length: int = setting(128, "Tokens per example, special tokens included.")
    on_bad_utf8: str = setting("error", "Input bytes that are not UTF-8: error | replace | skip")


@dataclasses.dataclass
class ClassificationHParams(TokenizerHParams):
    on_bad_row: str = setting("error", "Fine-tuning tasks: a TSV row with a wrong column count: error | skip "
                                       "(GLUE's QQP train.tsv has a few such rows: a question split by a newline).")


class SavedLabelList:
    """A task whose label list `prepare` decides and saves in its problem folder (`LABELS_FILE`); worker
    processes read it back from there. The class sets `self._labels` (None until known)."""

    LABELS_FILE: ClassVar[str] = "labels.json"
    _labels: list[str] | None

    def labels_path(self, data_dir: str) -> str:
        return os.path.join(self.problem_dir(data_dir), self.LABELS_FILE)

    def labels(self, data_dir: str) -> list[str]:
        """The label list decided by `prepare` (read from the problem folder in worker processes)."""
        if self._labels is None:
            path = self.labels_path(data_dir)
            if not fileio.exists(path):
                raise FileNotFoundError(f"{path} does not exist: run textrain-datagen (prepare) first")
            self._labels = list(fileio.read_json(path)["labels"])
        return self._labels


class ClassificationProblem(SavedLabelList, FinetuneTask):
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

    # ------------------------------------------------------------------ the task contract
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
    def learn_labels(self) -> list[str]:
        """The label list when there is no fixed one (GLUE has fixed lists)."""
        raise NotImplementedError

    def decide_labels(self) -> list[str]:
        if self.task_type == "regression":
            return []
        if self.fixed_labels is not None:
            return list(self.fixed_labels)
        return self.learn_labels()

    # ------------------------------------------------------------------ generation side
    def dataset_splits(self) -> list[tuple[str, int]]:
        splits = [s for s in self.split_names() if self.split_wanted(s)]
        for split in splits:
            self.split_paths(split)  # a wanted split's input must exist: an error naming it
        return [(s, self.train_shards if s == DatasetSplit.TRAIN else 1) for s in splits]

    def shuffle_split(self, split: str) -> bool:
        return split == DatasetSplit.TRAIN

    def held_out_fraction(self) -> float:
        """The share of the train rows held out as the dev split (every 1/f-th row; 0: a dev file)."""
        return 0.0

    def document_corpus(self, tmp_dir: str) -> shuffle.DocumentCorpus:
        """Every split's files as table rows, read once by datagen and sent to their shards
        (framework/shuffle.py: a row's shard is its index mod the split's shard count)."""
        tables = []
        for split, _ in self.dataset_splits():
            if split == DatasetSplit.EVAL and self.held_out_fraction() > 0:
                continue  # its rows are the train files'
            columns = self.split_columns(split)
            tables.extend(shuffle.TableFile(path, split, columns.header, self.split_num_columns(split) or 0,
                                            self.exact_columns) for path in self.split_paths(split))
        if self.hparams.on_bad_row not in BAD_ROW_POLICIES:
            raise UserError(f"--on_bad_row={self.hparams.on_bad_row!r}: use {' or '.join(BAD_ROW_POLICIES)}")
        return shuffle.DocumentCorpus(tuple(t.path for t in tables), self.hparams.on_bad_utf8,
                                      self.held_out_fraction(), tables=tuple(tables),
                                      on_bad_row=self.hparams.on_bad_row)

    def prepare(self, data_dir: str, tmp_dir: str) -> None:
        """Check the settings and files, decide the label list, write it for the workers."""
        self.check_hparams()
        self.encoder()
        for split, _ in self.dataset_splits():
            self.split_paths(split)
        labels = self.decide_labels()
        fileio.makedirs(self.problem_dir(data_dir))
        fileio.write_json_atomic(self.labels_path(data_dir), {"labels": labels, "task_type": self.task_type})
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
        """Row i goes to shard i % num_shards (dev/test: one shard, in file order), from the corpus shuffle."""
        spec = self.document_corpus(tmp_dir)
        columns = self.split_columns(split)
        for text in shuffle.shard_texts(spec, split, shard_id, num_shards):
            path, lineno, index, fields = shuffle.table_row(spec, text)
            yield self.encode_row(row_of(fields, columns, index, f"{path}:{lineno}"), data_dir)

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
