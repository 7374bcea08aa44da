"""The fine-tuning task contract: what a trainer asks of a task problem (GLUE, tsv_classification, SQuAD ...).

A task problem subclasses `FinetuneTask` (itself a `framework.problem.Problem`). The trainers
(trainers/finetune.py, evaluation.py, export.py) use only what is declared here and never ask a problem
what it can do: every hook has a default for classification (and regression / multilabel by
`task_type`), and a task that works otherwise overrides the hook (SQuAD: metrics and predictions from
post-processing every window; RACE: accuracy over the choices). A subclass must say `num_labels` and
`label_list`; the rest is optional. See docs/CONTRACTS.md, "Fine-tuning tasks".

Decisions:
- Evaluation and prediction read every example exactly once, in the order of its input file:
  `eval_records` asks `Problem.dataset` for no shuffle, no repeat and a last, smaller batch
  (`drop_remainder=False`), and shards BATCHES, not files, across input pipelines (a dev split is one
  file). That order holds because the problems write their dev/test splits as one unshuffled shard
  (`Problem.shuffle_split`); every record also carries `example_index` (its row's position in its
  input file), so output can be written in input order whatever the reader does.
- `has_labels(split)` comes from the split's manifest: GLUE test files have no labels (the records hold
  label 0 there, as the originals write), and metrics on such a split would be meaningless.
- Every `main_metric` is "higher is better" (accuracy, F1, MCC, Pearson, micro-F1), so the best
  checkpoint is the one with the largest main metric (other reported values, e.g. regression's mse,
  are there to read, not to select by).
"""
from __future__ import annotations

import abc
import json
import os
from typing import Any, ClassVar, NamedTuple

import numpy as np
from absl import logging

from textrain.framework import encoders, fileio, manifests
from textrain.framework import metrics as metric_fns
from textrain.framework.errors import UserError
from textrain.framework.lazy_tf import tf
from textrain.framework.problem import DataParams, ModeKeys, Problem

TOKENIZERS = ("wordpiece", "sentencepiece")
# What a sequence-level task predicts (a FinetuneTask's and a classifier's task_type).
TASK_TYPES = ("classification", "regression", "multilabel")


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


class ServingVocab(NamedTuple):
    """The WordPiece vocabulary an export tokenizes raw strings with, in the graph."""

    vocab_file: str
    do_lower_case: bool


def eval_records(problem: Problem, data_dir: str, split: str, batch_size: int,
                 input_context: tf.distribute.InputContext | None = None,
                 mode: str = ModeKeys.EVAL) -> tf.data.Dataset:
    """Every example of `split` once, in file order, the last batch smaller when the count is not a
    multiple of `batch_size` (the global batch). With `input_context`: per-replica batches, and input
    pipeline i of n takes batches i, i+n, ... For any problem (pretraining eval reads its dev split so)."""
    per_replica = input_context.get_per_replica_batch_size(batch_size) if input_context else batch_size
    params = DataParams(batch_size=per_replica, shuffle=False, repeat=False, drop_remainder=False)
    ds = problem.dataset(mode, data_dir, params, input_context=None, split=split)
    if input_context is not None and input_context.num_input_pipelines > 1:
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return ds


def prediction_lines(outputs: dict[str, np.ndarray], labels: list[str]) -> tuple[str, str]:
    """(tsv, jsonl) text of gathered, ordered outputs: per line the class probabilities (regression:
    the value), as run_classifier's test_results.tsv; jsonl: example_index, label (its name when
    `labels` has it, else its id) and probabilities (regression: prediction)."""
    n = len(outputs["logits"])
    index = outputs.get("example_index", np.arange(n)).reshape(-1)
    tsv, jsonl = [], []
    for i in range(n):
        row: dict[str, Any] = {"example_index": int(index[i])}
        if "predictions" in outputs:
            value = float(outputs["predictions"][i])
            tsv.append(f"{value:.6f}")
            row["prediction"] = value
        else:
            probs = [float(p) for p in outputs["probabilities"][i]]
            tsv.append("\t".join(f"{p:.6f}" for p in probs))
            best = int(np.argmax(probs))
            row["label"] = labels[best] if best < len(labels) else best
            row["probabilities"] = probs
        jsonl.append(json.dumps(row))
    return "".join(line + "\n" for line in tsv), "".join(line + "\n" for line in jsonl)


def classification_metrics(task_type: str, labels: np.ndarray, outputs: np.ndarray) -> dict[str, float]:
    """accuracy (+ f1 and mcc for 2 classes, macro_f1 for more); regression: pearson, spearman, mse;
    multilabel: micro_f1, exact_match. `outputs`: logits [N, num_labels] (multilabel: sigmoid logits),
    or the values [N] / [N, 1] for regression."""
    outputs = np.asarray(outputs)
    labels = np.asarray(labels)
    if task_type == "regression":
        predictions = outputs.reshape(-1)
        return {"pearson": metric_fns.pearson(predictions, labels),
                "spearman": metric_fns.spearman(predictions, labels),
                "mse": metric_fns.mean_squared_error(predictions, labels)}
    if task_type == "multilabel":
        predictions = outputs > 0  # sigmoid(logit) > 0.5
        return {"micro_f1": metric_fns.multilabel_micro_f1(labels, predictions),
                "exact_match": float(np.mean(np.all(predictions == labels.astype(bool), axis=-1)))}
    predictions = np.argmax(outputs, axis=-1)
    labels = labels.reshape(-1)
    out = {"accuracy": metric_fns.accuracy(labels, predictions)}
    if outputs.shape[-1] == 2:
        out.update(f1=metric_fns.f1_binary(labels, predictions),
                   mcc=metric_fns.matthews_corrcoef(labels, predictions))
    else:
        out.update(macro_f1=metric_fns.macro_f1(labels, predictions, num_classes=outputs.shape[-1]))
    return out


class FinetuneTask(Problem, abc.ABC):
    """A problem the fine-tuning trainer can train, evaluate, predict and export (see the module docstring).

    Its settings name the pretrained tokenizer as `pretrained_encoder` reads them (tokenizer, vocab_file,
    do_lower_case, sp_model, uncased); `encoder()` and `serving_vocab()` use them."""

    task_type: ClassVar[str] = "classification"  # classification | regression | multilabel | ...
    main_metric: ClassVar[str] = "accuracy"       # the metric the best checkpoint is kept by
    _encoder: encoders.WordpieceEncoder | encoders.SentencePieceEncoder | None = None

    # ---------------------------------------------------------------- what every task says
    @abc.abstractmethod
    def num_labels(self, data_dir: str) -> int:
        """Outputs of the model head (regression 1, multiple choice the number of choices, span QA 0)."""

    @abc.abstractmethod
    def label_list(self, data_dir: str) -> list[str]:
        """Label names in id order ([] when the ids have no names: regression, choices, spans)."""

    # ---------------------------------------------------------------- splits
    def eval_splits(self) -> list[str]:
        """The splits evaluated during and after training (each gets its own metrics)."""
        return ["dev"]

    def predict_splits(self) -> list[str]:
        """The splits `do_predict` writes predictions for."""
        return ["test"]

    def has_split(self, data_dir: str, split: str) -> bool:
        """Whether `split` was generated (its manifest exists): a task's dev/test splits may be absent."""
        return fileio.exists(os.path.join(self.problem_dir(data_dir), manifests.manifest_filename(self.name, split)))

    def has_labels(self, data_dir: str, split: str) -> bool:
        """Whether the split's records hold real labels (from its manifest)."""
        return bool(self.read_manifest(data_dir, split).get("has_labels", True))

    def num_examples(self, data_dir: str, split: str) -> int:
        return int(self.read_manifest(data_dir, split)["num_examples"])

    def eval_dataset(self, data_dir: str, split: str, batch_size: int,
                     input_context: tf.distribute.InputContext | None = None,
                     mode: str = ModeKeys.EVAL) -> tf.data.Dataset:
        """`eval_records` of this task: every example of `split` once, in file order."""
        return eval_records(self, data_dir, split, batch_size, input_context, mode)

    # ---------------------------------------------------------------- metrics
    def compute_metrics(self, labels: np.ndarray, outputs: np.ndarray) -> dict[str, float]:
        """Metrics of the model `outputs` (logits [N, num_labels], or [N] for regression) against
        `labels`, real examples only, in any order. Default: `classification_metrics` of `task_type`."""
        return classification_metrics(self.task_type, labels, outputs)

    def metrics(self, data_dir: str, split: str, outputs: dict[str, np.ndarray]) -> dict[str, float]:
        """The task's metrics of one evaluated split from its gathered outputs (`predict_outputs` and the
        carried features, input order). Default: `compute_metrics(label_ids, predictions or logits)`;
        none for a split without labels."""
        if "label_ids" not in outputs or not self.has_labels(data_dir, split):
            return {}
        values = outputs["predictions"] if "predictions" in outputs else outputs["logits"]
        return dict(self.compute_metrics(outputs["label_ids"], values))

    # ---------------------------------------------------------------- predictions
    def write_predictions(self, data_dir: str, split: str, outputs: dict[str, np.ndarray], base_path: str) -> str:
        """Write the predictions of one split from its gathered outputs; returns the main file. Default:
        `{base_path}.tsv` and `.jsonl` (`prediction_lines`)."""
        tsv, jsonl = prediction_lines(outputs, self.label_list(data_dir))
        fileio.write_text_atomic(base_path + ".tsv", tsv)
        fileio.write_text_atomic(base_path + ".jsonl", jsonl)
        logging.info("wrote %s.tsv / .jsonl (%d examples)", base_path, tsv.count("\n"))
        return base_path + ".tsv"

    # ---------------------------------------------------------------- export
    def serving_labels(self, data_dir: str) -> list[str]:
        """The names the exported `label` output maps class ids to ([]: no label output)."""
        return self.label_list(data_dir) if self.task_type == "classification" else []

    def serving_vocab(self, data_dir: str) -> ServingVocab | None:
        """The WordPiece vocabulary of the export's raw-string signatures; None: token ids only
        (SentencePiece has no core-TensorFlow op)."""
        hp = self.hparams
        if hp.tokenizer != "wordpiece" or not hp.vocab_file:
            return None
        return ServingVocab(hp.vocab_file, bool(hp.do_lower_case))

    def serving_doc_stride(self, data_dir: str) -> int:
        """Sub-tokens between two windows' starts in a tagger's raw-text signature (the records'
        `doc_stride`); 0: the task has no windows of words."""
        return 0

    # ---------------------------------------------------------------- tokenizer
    def encoder(self) -> encoders.WordpieceEncoder | encoders.SentencePieceEncoder:
        """The pretrained model's tokenizer (`pretrained_encoder`), built once per problem."""
        if self._encoder is None:
            self._encoder = pretrained_encoder(self.hparams)
        return self._encoder
