"""The one evaluation loop: fine-tuning (task metrics on every eval split) and pretraining (the model's
own step_output metrics on the dev split, as run_pretraining.py --do_eval).

    result = evaluate(strategy, model, dataset_fn, max_steps=None, collect_outputs=True)

A fine-tuning run evaluates and predicts through the task contract (framework/tasks.py), never asking a
task what it can do: `present_eval_splits`, `task_metrics` (a `PeriodicEvaluator`'s metrics_fn) and
`predict` (each predict split's files, written by the task).

Decisions:
- Every example exactly once, under any strategy: the eval dataset is NOT repeated and keeps its partial
  last batch (`drop_remainder=False`); it goes through `strategy.distribute_datasets_from_function`,
  which hands a partial (even empty) batch to the replicas at the end. With several workers, worker i
  takes batches i, i+n, ... (`Dataset.shard` on batches: a dev split usually has one file).
- Losses and metrics are the model's `step_output` Terms (sums and counts), summed over replicas and
  batches, then divided: the global mean, as training reports it. `loss` = sum of weight * mean of
  each loss term. Rows with `is_real_example = 0` count for nothing (the models weight by it).
- Outputs (`model.predict_outputs(features)`: logits, probabilities / predictions) and the label,
  `example_index` and `is_real_example` features are gathered to the host with `strategy.gather`
  (all-gather: every worker gets all rows), concatenated, padding rows dropped, and sorted by
  `example_index` when the records carry it, so predictions come out in input order.
- A model runs with `training=False` (no dropout); ELECTRA's pretraining eval still masks at random.
"""
from __future__ import annotations

import dataclasses
import math
import os
from typing import Callable

import numpy as np
import tensorflow as tf
from absl import logging

from textrain.framework import tasks
from textrain.framework.problem import Problem
from textrain.framework.tasks import FinetuneTask, prediction_lines  # noqa: F401  (the default predictions' text)

# Features that travel with the gathered outputs (when the records have them).
CARRIED_FEATURES = ("label_ids", "example_index", "is_real_example")


@dataclasses.dataclass
class EvalResult:
    metrics: dict[str, float]                 # loss, each loss term, each step_output metric (global means)
    num_examples: int                         # real examples seen (collect_outputs) or batches' rows
    outputs: dict[str, np.ndarray]            # predict_outputs + carried features, input order (collect_outputs)
    num_batches: int


def _batch_rows(features) -> tf.Tensor:
    return tf.shape(tf.nest.flatten(features)[0])[0]


def evaluate(strategy: tf.distribute.Strategy, model, dataset_fn: Callable[[tf.distribute.InputContext], tf.data.Dataset],
             *, max_steps: int | None = None, collect_outputs: bool = False) -> EvalResult:
    """Run `model` over the whole eval dataset (or its first `max_steps` global batches).

    strategy: the training strategy (the model's variables live under it).
    model: a `models.base.TrainableModel`; with `collect_outputs` it must have `predict_outputs(features)`.
    dataset_fn(InputContext) -> per-replica batches, NOT repeated, partial last batch kept.
    max_steps: stop after this many global batches (pretraining eval; None = all).
    collect_outputs: gather outputs + CARRIED_FEATURES to the host (fine-tuning metrics, prediction).
    Returns an EvalResult; metrics are global means over every example seen.
    """
    dist = strategy.distribute_datasets_from_function(dataset_fn)
    step, weights = _step_fn(strategy, model, collect_outputs)
    totals: dict[str, float] = {}
    pieces: dict[str, list[np.ndarray]] = {}
    batches = 0
    for features in dist:
        if max_steps is not None and batches >= max_steps:
            break
        sums, gathered = step(features)
        for k, v in sums.items():
            totals[k] = totals.get(k, 0.0) + float(v)
        for k, v in gathered.items():
            pieces.setdefault(k, []).append(v.numpy())
        batches += 1
    if batches == 0:
        raise ValueError("the eval dataset is empty")
    return EvalResult(metrics=_means(totals, weights), num_examples=int(totals.get("rows", 0)),
                      outputs=_in_order({k: np.concatenate(v, axis=0) for k, v in pieces.items()}),
                      num_batches=batches)


# One compiled eval step per (strategy, model, collect): evaluating every N steps must not retrace.
_STEP_FNS: dict[tuple[int, int, bool], tuple[Callable, dict[str, float], object]] = {}


def _step_fn(strategy, model, collect_outputs: bool) -> tuple[Callable, dict[str, float]]:
    key = (id(strategy), id(model), collect_outputs)
    cached = _STEP_FNS.get(key)
    if cached is not None and cached[2] is model:
        return cached[0], cached[1]
    weights: dict[str, float] = {}

    def replica_fn(features):
        rows = _batch_rows(features)
        out = model.step_output(features, model.initial_state(rows), training=False)
        for k, t in out.losses.items():
            weights[k] = float(t.weight)
        sums = {}
        for kind, terms in (("losses", out.losses), ("metrics", out.metrics)):
            for k, t in terms.items():
                sums[f"{kind}/{k}/total"] = tf.cast(t.total, tf.float32)
                sums[f"{kind}/{k}/count"] = tf.cast(t.count, tf.float32)
        sums["rows"] = tf.cast(rows, tf.float32)
        gathered = {}
        if collect_outputs:
            gathered = dict(model.predict_outputs(features))
            for name in CARRIED_FEATURES:
                if name in features:
                    gathered[name] = features[name]
        return sums, gathered

    @tf.function(reduce_retracing=True)
    def step(features):
        sums, gathered = strategy.run(replica_fn, args=(features,))
        sums = {k: strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None) for k, v in sums.items()}
        gathered = {k: strategy.gather(v, axis=0) for k, v in gathered.items()}
        return sums, gathered

    _STEP_FNS[key] = (step, weights, model)
    return step, weights


def _means(totals: dict[str, float], weights: dict[str, float]) -> dict[str, float]:
    metrics: dict[str, float] = {}
    loss = 0.0
    for key, total in totals.items():
        if not key.endswith("/total"):
            continue
        kind, name, _ = key.split("/")
        count = totals[f"{kind}/{name}/count"]
        mean = total / count if count else float("nan")
        if kind == "losses":
            metrics[f"{name}_loss"] = mean
            loss += weights.get(name, 1.0) * (0.0 if math.isnan(mean) else mean)
        else:
            metrics[name] = mean
    metrics["loss"] = loss
    return metrics


def _in_order(outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Drop padding rows (is_real_example = 0) and sort by example_index when present."""
    if not outputs:
        return outputs
    keep = np.ones(len(next(iter(outputs.values()))), bool)
    if "is_real_example" in outputs:
        keep = np.reshape(outputs["is_real_example"], [-1]) > 0
    outputs = {k: v[keep] for k, v in outputs.items()}
    if "example_index" in outputs:
        order = np.argsort(np.reshape(outputs["example_index"], [-1]), kind="stable")
        outputs = {k: v[order] for k, v in outputs.items()}
    return outputs


def eval_dataset_fn(problem: Problem, data_dir: str, split: str, global_batch_size: int
                    ) -> Callable[[tf.distribute.InputContext], tf.data.Dataset]:
    """`dataset_fn` of one eval split of any registered problem: `framework.tasks.eval_records` (every
    record once, in file order, per-replica batches, the partial last batch kept, batches sharded
    across workers)."""
    return lambda ctx: tasks.eval_records(problem, data_dir, split, global_batch_size, ctx)


# ------------------------------------------------------------------------- fine-tuning tasks
# The trainers' side of the task contract (framework/tasks.py): they only call its hooks.
def present_eval_splits(problem: FinetuneTask, data_dir: str) -> list[str]:
    """The task's eval splits that were generated (an absent one is logged and left out)."""
    present = []
    for split in problem.eval_splits():
        if problem.has_split(data_dir, split):
            present.append(split)
        else:
            logging.warning("no %s records of %s in %s: not evaluated", split, problem.name, data_dir)
    return present


def task_metrics(problem: FinetuneTask, data_dir: str, split: str, result: EvalResult) -> dict[str, float]:
    """The task's own metrics of one evaluated split (`FinetuneTask.metrics` of its gathered outputs)."""
    return problem.metrics(data_dir, split, result.outputs)


def predict(strategy: tf.distribute.Strategy, model, problem: FinetuneTask, data_dir: str, model_dir: str,
            batch_size: int) -> dict[str, str]:
    """Predict each of the task's predict splits that has records and write the predictions under
    `{model_dir}/predict_<split>` (`FinetuneTask.write_predictions`: by default `.tsv` with the class
    probabilities per line, input order, as run_classifier's test_results.tsv, regression the value,
    and `.jsonl`). Returns {split: the main file written}."""
    written = {}
    for split in problem.predict_splits():
        if not problem.has_split(data_dir, split):
            logging.warning("no %s records of %s: nothing to predict", split, problem.name)
            continue
        result = evaluate(strategy, model, eval_dataset_fn(problem, data_dir, split, batch_size), collect_outputs=True)
        written[split] = problem.write_predictions(data_dir, split, result.outputs,
                                                   os.path.join(model_dir, f"predict_{split}"))
    return written


def write_scalars(model_dir: str, split: str, step: int, metrics: dict[str, float]) -> None:
    """TensorBoard scalars under `{model_dir}/eval_{split}/`."""
    writer = tf.summary.create_file_writer(os.path.join(model_dir, f"eval_{split}"))
    with writer.as_default(step=step):
        for k, v in metrics.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                tf.summary.scalar(k, float(v))
    writer.flush()
    writer.close()


class PeriodicEvaluator:
    """Evaluate every `every_steps` and at `final_step` (a `Trainer.train` callback), on each split.

    Writes `{model_dir}/eval_results.json` ({split: [{"step": s, ...metrics}, ...]}, rewritten atomically
    after each evaluation), TensorBoard scalars under `{model_dir}/eval_{split}/`, and, when
    `main_metric` is given, keeps the best model (by the FIRST split's main_metric; ties keep the earlier)
    as `{model_dir}/best/` (a textrain checkpoint `best/ckpt-<step>` of the model only, and
    `best/best_metrics.json`).

    metrics_fn(split, EvalResult) -> dict adds task metrics (fine-tuning: `task_metrics`, the task's
    metrics of the gathered outputs); without it only the step_output means are reported.
    """

    def __init__(self, strategy: tf.distribute.Strategy, model, model_dir: str,
                 splits: dict[str, Callable[[tf.distribute.InputContext], tf.data.Dataset]], *,
                 every_steps: int = 0, final_step: int | None = None,
                 metrics_fn: Callable[[str, EvalResult], dict] | None = None, main_metric: str | None = None,
                 higher_is_better: bool = True, max_steps: int | None = None, is_chief: bool = True):
        self.strategy, self.model, self.model_dir = strategy, model, model_dir
        self.splits = dict(splits)
        self.every_steps, self.final_step = every_steps, final_step
        self.metrics_fn, self.main_metric = metrics_fn, main_metric
        self.higher_is_better, self.max_steps, self.is_chief = higher_is_better, max_steps, is_chief
        self.results_path = f"{model_dir}/eval_results.json"
        self.history: dict[str, list[dict]] = self._read_history()
        self.best: dict | None = self._read_best()
        self.last_step = -1

    def _read_history(self) -> dict[str, list[dict]]:
        from textrain.framework import fileio

        if tf.io.gfile.exists(self.results_path):
            return fileio.read_json(self.results_path)
        return {}

    def _read_best(self) -> dict | None:
        from textrain.framework import fileio

        path = f"{self.model_dir}/best/best_metrics.json"
        return fileio.read_json(path) if tf.io.gfile.exists(path) else None

    def __call__(self, figures: dict) -> None:
        step = int(figures["step"])
        due = (self.every_steps > 0 and step % self.every_steps == 0) or (
            self.final_step is not None and step >= self.final_step)
        if due and step != self.last_step:
            self.run(step)

    def run(self, step: int) -> dict[str, dict]:
        """Evaluate every split now; returns {split: metrics}."""
        from textrain.framework import fileio

        results = {}
        for split, dataset_fn in self.splits.items():
            result = evaluate(self.strategy, self.model, dataset_fn, max_steps=self.max_steps,
                              collect_outputs=self.metrics_fn is not None)
            metrics = dict(result.metrics)
            if self.metrics_fn is not None:
                metrics.update(self.metrics_fn(split, result))
            metrics = {k: _plain(v) for k, v in metrics.items()}
            metrics["num_examples"] = int(len(next(iter(result.outputs.values()))) if result.outputs
                                          else result.num_examples)
            results[split] = metrics
            logging.info("eval %s at step %d: %s", split, step,
                     " | ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()))
            if self.is_chief:
                write_scalars(self.model_dir, split, step, metrics)
                entries = [e for e in self.history.get(split, []) if e.get("step") != step]
                self.history[split] = entries + [dict(step=step, **metrics)]
        if self.is_chief:
            fileio.write_json_atomic(self.results_path, self.history)
        self._maybe_keep_best(step, results)
        self.last_step = step
        return results

    def _maybe_keep_best(self, step: int, results: dict[str, dict]) -> None:
        if not self.main_metric or not results:
            return
        split = next(iter(results))
        value = results[split].get(self.main_metric)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            logging.warning("main metric %r missing from the %s results; best checkpoint not updated", self.main_metric, split)
            return
        if self.best is not None:
            old = self.best["value"]
            if (value <= old) if self.higher_is_better else (value >= old):
                return
        self.best = {"step": step, "split": split, "metric": self.main_metric, "value": value,
                     "metrics": results[split]}
        save_best(self.model, self.model_dir, step, self.best, self.is_chief)
        logging.info("new best %s %.4f at step %d -> %s/best", self.main_metric, value, step, self.model_dir)


def save_best(model, model_dir: str, step: int, info: dict, is_chief: bool = True) -> str:
    """Write the model to `{model_dir}/best/ckpt-<step>` (+ best_metrics.json) through a temp folder,
    so an interrupted save never leaves a half-written best/."""
    from textrain.framework import fileio

    final = f"{model_dir}/best"
    tmp = f"{model_dir}/best.tmp" if is_chief else f"{model_dir}/.worker_tmp/best-{id(model)}"
    if tf.io.gfile.exists(tmp):
        tf.io.gfile.rmtree(tmp)
    tf.io.gfile.makedirs(tmp)
    path = tf.train.Checkpoint(model=model).write(f"{tmp}/ckpt-{step}")
    if not is_chief:
        tf.io.gfile.rmtree(tmp)
        return path
    fileio.write_json_atomic(f"{tmp}/best_metrics.json", dict(info, checkpoint=f"ckpt-{step}"))
    # The state file makes best/ a checkpoint directory like model_dir: any reader can take `run/best`.
    fileio.write_text_atomic(f"{tmp}/checkpoint", f'model_checkpoint_path: "ckpt-{step}"\n'
                             f'all_model_checkpoint_paths: "ckpt-{step}"\n')
    if tf.io.gfile.exists(final):
        tf.io.gfile.rmtree(final)
    tf.io.gfile.rename(tmp, final)
    return f"{final}/ckpt-{step}"


def best_checkpoint(model_dir: str) -> str | None:
    """The prefix of the best checkpoint kept by PeriodicEvaluator, or None."""
    from textrain.framework import fileio

    path = f"{model_dir}/best/best_metrics.json"
    if not tf.io.gfile.exists(path):
        return None
    return f"{model_dir}/best/{fileio.read_json(path)['checkpoint']}"


def _plain(value):
    """JSON-able Python numbers from numpy scalars."""
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    return value
