"""framework/tasks.py: every registered task problem declares the whole fine-tuning task contract, and the
contract's classification defaults (metrics, predictions, export hooks) work on real records of
tsv_classification; trainers/ ask the contract, never the problem what it can do."""
from __future__ import annotations

import glob
import json
import os
import re

import numpy as np
import pytest

from textrain.framework import registry, tasks
from textrain.framework.encoders import build_wordpiece_vocab
from textrain.trainers import evaluation

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMMA = os.path.join(REPO, "tests", "data", "austen_emma.txt")
TASKS = {"cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli", "tsv_classification", "squad_v1",
         "squad_v2", "race"}


def _task_names() -> set[str]:
    registry.import_builtins(models=False)
    return {n for n in registry.problems.names() if issubclass(registry.problems.get(n), tasks.FinetuneTask)}


def test_every_registered_task_problem_is_a_complete_finetune_task():
    names = _task_names()
    assert names >= TASKS
    configured = set()
    for path in glob.glob(os.path.join(REPO, "configs", "*.gin")):
        configured.update(re.findall(r"^finetune\.task\s*=\s*['\"](\w+)['\"]", open(path).read(), re.M))
    assert configured and configured <= names  # every task a config names is a FinetuneTask
    for name in sorted(names):
        cls = registry.problems.get(name)
        assert not cls.__abstractmethods__, (name, sorted(cls.__abstractmethods__))
        problem = cls()  # default settings: instantiable
        assert isinstance(problem.task_type, str) and isinstance(problem.main_metric, str)
        assert isinstance(problem.eval_splits(), list) and isinstance(problem.predict_splits(), list)


def test_a_task_that_omits_a_declared_member_cannot_be_built():
    class NoLabels(tasks.FinetuneTask):
        def num_labels(self, data_dir):
            return 2

    with pytest.raises(TypeError, match="label_list"):
        NoLabels()


def test_trainers_do_not_probe_problems():
    for path in glob.glob(os.path.join(REPO, "trainers", "*.py")):
        text = open(path, encoding="utf-8").read()
        assert not re.search(r"(hasattr|getattr)\(problem\s*,", text), path


# ------------------------------------------------------------------------ the classification defaults
@pytest.fixture(scope="module")
def tsv_task(tmp_path_factory):
    """tsv_classification records of real sentences: train/dev (every 4th row) with labels, test without."""
    root = tmp_path_factory.mktemp("tsv")
    vocab = build_wordpiece_vocab(EMMA, vocab_size=1000, out_file=str(root / "vocab.txt"))
    lines = [line.strip() for line in open(EMMA, encoding="utf-8") if line.strip()][:48]
    with open(root / "train.tsv", "w", encoding="utf-8") as f:
        f.write("sentence\tlabel\n" + "".join(f"{s}\t{'pos' if i % 3 else 'neg'}\n" for i, s in enumerate(lines[:40])))
    with open(root / "test.tsv", "w", encoding="utf-8") as f:
        f.write("sentence\n" + "".join(f"{s}\n" for s in lines[40:]))
    cls = registry.problems.get("tsv_classification")
    problem = cls(cls.HParams(train_file=str(root / "train.tsv"), test_file=str(root / "test.tsv"), dev_fraction=0.25,
                              vocab_file=vocab, max_seq_length=24))
    data_dir = str(root / "data")
    problem.generate_data(data_dir, "", seed=0)
    return cls(), data_dir, vocab  # a trainer's instance: default settings, the data's own from its manifest


def _outputs(problem, data_dir, split, right_every: int) -> dict[str, np.ndarray]:
    """What the eval loop gathers for a split: its records' label_ids and example_index, and logits that
    pick the true label except on every `right_every`-th row."""
    batches = list(problem.eval_dataset(data_dir, split, 4))
    labels = np.concatenate([b["label_ids"].numpy() for b in batches])
    index = np.concatenate([b["example_index"].numpy() for b in batches])
    predicted = np.where(np.arange(len(labels)) % right_every == 0, 1 - labels, labels)
    logits = np.eye(2, dtype=np.float32)[predicted] * 3.0
    probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    return {"logits": logits, "probabilities": probs, "label_ids": labels, "example_index": index}


def test_default_metrics_of_a_labelled_split(tsv_task):
    problem, data_dir, _ = tsv_task
    assert evaluation.present_eval_splits(problem, data_dir) == ["dev"]
    outputs = _outputs(problem, data_dir, "dev", right_every=4)
    n = len(outputs["label_ids"])
    assert n == 10  # every 4th of 40 rows
    metrics = problem.metrics(data_dir, "dev", outputs)
    assert metrics["accuracy"] == pytest.approx(1 - len(range(0, n, 4)) / n)
    assert {"f1", "mcc"} <= set(metrics)  # two labels
    result = evaluation.EvalResult(metrics={}, num_examples=n, outputs=outputs, num_batches=3)
    assert evaluation.task_metrics(problem, data_dir, "dev", result) == metrics


def test_default_hooks_of_an_unlabelled_split_write_named_predictions(tsv_task, tmp_path):
    problem, data_dir, vocab = tsv_task
    assert problem.label_list(data_dir) == ["neg", "pos"] and problem.predict_splits() == ["test"]
    outputs = _outputs(problem, data_dir, "test", right_every=1)  # the records hold label 0: predict 1
    assert problem.metrics(data_dir, "test", outputs) == {}  # no labels, no metrics
    main = problem.write_predictions(data_dir, "test", outputs, str(tmp_path / "predict_test"))
    assert main == str(tmp_path / "predict_test.tsv")
    tsv = open(main).read().splitlines()
    rows = [json.loads(line) for line in open(tmp_path / "predict_test.jsonl")]
    assert len(tsv) == len(rows) == 8
    assert [r["example_index"] for r in rows] == list(range(8))
    assert {r["label"] for r in rows} == {"pos"}
    assert tsv[0] == "\t".join(f"{p:.6f}" for p in outputs["probabilities"][0])
    assert problem.serving_labels(data_dir) == ["neg", "pos"]
    assert problem.serving_vocab(data_dir) == tasks.ServingVocab(vocab, True)


def test_regression_and_multilabel_defaults():
    y = np.array([0.5, 1.0, 2.5, 4.0], np.float32)
    regression = tasks.classification_metrics("regression", y, (2 * y + 1)[:, None])
    assert regression["pearson"] == pytest.approx(1.0) and regression["spearman"] == pytest.approx(1.0)
    tsv, jsonl = tasks.prediction_lines({"logits": y[:, None], "predictions": y}, [])
    assert tsv.splitlines() == ["0.500000", "1.000000", "2.500000", "4.000000"]
    assert json.loads(jsonl.splitlines()[2]) == {"example_index": 2, "prediction": 2.5}
    hot = np.array([[1, 0, 1], [0, 1, 0]])
    multilabel = tasks.classification_metrics("multilabel", hot, np.array([[2.0, -1.0, 3.0], [1.0, 2.0, -2.0]]))
    assert multilabel["exact_match"] == 0.5 and multilabel["micro_f1"] == pytest.approx(6 / 7)
