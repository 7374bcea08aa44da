"""The nine GLUE tasks: `cola`, `sst2`, `mrpc`, `stsb`, `qqp`, `mnli`, `qnli`, `rte`, `wnli`.

Each reads one GLUE task folder of `download_glue_data.py` (`--glue_dir`) into the records of
problems/classification.py.

    textrain-datagen --problem=mrpc --glue_dir=glue_data/MRPC --vocab_file=uncased_L-12_H-768_A-12/vocab.txt \
        --data_dir=data

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

Decisions:
- Splits: `train`, `dev` and `test` (MNLI: dev_matched, dev_mismatched, test_matched, test_mismatched);
  a test file that is absent is skipped; train and dev are required.
- Rows need at least the header's column count (more are accepted: the originals read by position).
  GLUE's QQP train.tsv has a few rows broken by a newline inside a question: `--on_bad_row=skip`
  leaves them out (HF's processor skips them too).
"""
from __future__ import annotations

import dataclasses
import os
from typing import ClassVar

from textrain.framework import fileio
from textrain.framework.errors import UserError
from textrain.framework.problem import DatasetSplit
from textrain.framework.registry import register_problem
from textrain.problems.classification import ClassificationHParams, ClassificationProblem, setting
from textrain.problems.tsv_reader import Columns


@dataclasses.dataclass
class GlueHParams(ClassificationHParams):
    glue_dir: str = setting("", "GLUE task folder (e.g. glue_data/MRPC) holding train.tsv, dev.tsv, "
                                "test.tsv (MNLI: dev_matched.tsv, ...).")


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

    task_type = "regression"
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
