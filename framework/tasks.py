"""The fine-tuning task API: what a trainer asks of a task problem (GLUE, tsv_classification, SQuAD ...).

A task problem is a `framework.problem.Problem` that also inherits `FinetuneTask`. The fine-tuning
trainer (trainers/finetune.py) uses only what is here, so any problem implementing it can be trained,
evaluated and predicted with the same loop. See docs/CONTRACTS.md, "Fine-tuning tasks".

Decisions:
- Evaluation and prediction read every example exactly once, in the order of its input file:
  `eval_dataset` asks `Problem.dataset` for no shuffle, no repeat and a last, smaller batch
  (`drop_remainder=False`). That order holds because the problems write their dev/test splits as one
  unshuffled shard (`Problem.shuffle_split`); every record also carries `example_index` (its row's
  position in its input file), so output can be written in input order whatever the reader does.
- `has_labels(split)` comes from the split's manifest: GLUE test files have no labels (the records hold
  label 0 there, as the originals write), and metrics on such a split would be meaningless.
- Every `main_metric` is "higher is better" (accuracy, F1, MCC, Pearson, micro-F1), so the best
  checkpoint is the one with the largest main metric (other reported values, e.g. regression's mse,
  are there to read, not to select by).
"""
from __future__ import annotations

import os
from typing import ClassVar

import numpy as np

from textrain.framework import encoders, fileio, manifests
from textrain.framework.errors import UserError
from textrain.framework.lazy_tf import tf
from textrain.framework.problem import DataParams, ModeKeys


TOKENIZERS = ("wordpiece", "sentencepiece")


def check_tokenizer(name: str) -> None:
    if name not in TOKENIZERS:
        raise UserError(f"--tokenizer={name!r}: use wordpiece (BERT, ELECTRA) or sentencepiece (XLNet)")


def tokenizer_file(hparams) -> tuple[str, str]:
    """(flag, path) of the PRETRAINED model's vocabulary named by the settings `tokenizer`, `vocab_file`,
    `sp_model`; an unknown tokenizer, a missing flag or an absent file is a UserError naming the flag."""
    check_tokenizer(hparams.tokenizer)
    wordpiece = hparams.tokenizer == "wordpiece"
    flag, path = ("vocab_file", hparams.vocab_file) if wordpiece else ("sp_model", hparams.sp_model)
    if not path:
        raise UserError(f"--{flag} is required with --tokenizer={hparams.tokenizer}: a fine-tune uses the "
                        f"PRETRAINED model's vocabulary (its {'vocab.txt' if wordpiece else 'spiece.model'})")
    if not fileio.exists(path):
        raise UserError(f"--{flag}={path} does not exist")
    return flag, path


def pretrained_encoder(hparams) -> encoders.WordpieceEncoder | encoders.SentencePieceEncoder:
    """The PRETRAINED model's tokenizer that every task problem encodes with (see `tokenizer_file`),
    with `do_lower_case` (WordPiece) or `uncased` (SentencePiece). An unusable file is a UserError naming
    the flag."""
    flag, path = tokenizer_file(hparams)
    try:
        if flag == "sp_model":
            return encoders.SentencePieceEncoder(path, uncased=hparams.uncased)
        encoder = encoders.WordpieceEncoder(path, do_lower_case=hparams.do_lower_case)
    except encoders.EncoderError as e:
        raise UserError(f"--{flag}: {e}") from None
    missing = [t for t in ("[CLS]", "[SEP]") if t not in encoder.special_ids]
    if missing:
        raise UserError(f"--vocab_file={path} lacks {' and '.join(missing)}")
    return encoder


class FinetuneTask:
    """Mixin for task problems; subclasses also inherit `framework.problem.Problem`."""

    task_type: ClassVar[str] = "classification"  # classification | regression | multilabel | ...
    main_metric: ClassVar[str] = "accuracy"       # the metric the best checkpoint is kept by

    def encoder(self):
        """The pretrained model's tokenizer (`pretrained_encoder`), built once per problem."""
        if getattr(self, "_encoder", None) is None:
            self._encoder = pretrained_encoder(self.hparams)  # type: ignore[attr-defined]
        return self._encoder

    def eval_splits(self) -> list[str]:
        """The splits evaluated during and after training (each gets its own metrics)."""
        return ["dev"]

    def predict_splits(self) -> list[str]:
        """The splits `--do_predict` writes predictions for."""
        return ["test"]

    def has_split(self, data_dir: str, split: str) -> bool:
        """Whether `split` was generated (its manifest exists): a task's dev/test splits may be absent."""
        name = self.name  # type: ignore[attr-defined]
        return fileio.exists(os.path.join(self.problem_dir(data_dir),  # type: ignore[attr-defined]
                                               manifests.manifest_filename(name, split)))

    def has_labels(self, data_dir: str, split: str) -> bool:
        """Whether the split's records hold real labels (from its manifest)."""
        return bool(self.read_manifest(data_dir, split).get("has_labels", True))  # type: ignore[attr-defined]

    def num_examples(self, data_dir: str, split: str) -> int:
        return int(self.read_manifest(data_dir, split)["num_examples"])  # type: ignore[attr-defined]

    def compute_metrics(self, labels: np.ndarray, outputs: np.ndarray) -> dict[str, float]:
        """Metrics of the model `outputs` (logits [N, num_labels], or [N] for regression) against
        `labels`, real examples only, in any order."""
        raise NotImplementedError

    def eval_dataset(self, data_dir: str, split: str, batch_size: int,
                     input_context: tf.distribute.InputContext | None = None,
                     mode: str = ModeKeys.EVAL) -> tf.data.Dataset:
        """Every example of `split` once, in file order, the last batch smaller when the count is
        not a multiple of `batch_size` (per replica when `input_context` is given)."""
        params = DataParams(batch_size=batch_size, shuffle=False, repeat=False, drop_remainder=False)
        return self.dataset(mode, data_dir, params, input_context=input_context,  # type: ignore[attr-defined]
                            split=split)
