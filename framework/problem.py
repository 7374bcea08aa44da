"""The Problem contract (tensor2tensor style) and the data-generation driver.

A problem turns raw text into sharded TFRecords (`generate_*` side) and reads them back as a
`tf.data.Dataset` (`example_reading_spec` / `preprocess_example` / `dataset` side). See
docs/CONTRACTS.md for the exact signatures and ../shared/DESIGN.md §2 for the rules.

Decisions:
- The unit of parallel work is one output shard. A shard's content depends only on
  (problem settings, seed, split, shard id), never on which worker made it, so the same seed and input
  give byte-identical shards for any number of workers or machines (`task_id`/`num_tasks`).
- Worker processes fork from a fork server that has imported TensorFlow and the problem's module but
  started no TF runtime (TF is not fork-safe once initialised; `spawn` where there is no fork
  server); each rebuilds the problem from its class and hparams.
- A split is complete only when its manifest exists (written last). Re-running skips complete splits,
  keeps finished shards of an incomplete split made with the same settings, and redoes the rest. A
  data_dir whose manifest was made with other settings is refused, naming every differing setting.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import multiprocessing
import os
import random
import sys
import time
from typing import Any, ClassVar, Iterator

import numpy as np
import tensorflow as tf
from absl import logging

from framework import pipeline, records


class DatasetSplit:
    TRAIN = "train"
    EVAL = "dev"
    TEST = "test"


class ModeKeys:
    TRAIN = "train"
    EVAL = "eval"
    PREDICT = "predict"


@dataclasses.dataclass
class NoHParams:
    """Problems without settings."""


@dataclasses.dataclass
class DataParams:
    """The reading side's knobs (see docs/CONTRACTS.md)."""

    batch_size: int
    max_length: int = 0
    shuffle: bool | None = None
    shuffle_buffer: int = 10_000
    repeat: bool | None = None
    seed: int | None = None
    batching: str = "auto"
    drop_remainder: bool = True


class SettingsMismatchError(ValueError):
    pass


def _derive_seed(*parts: Any) -> int:
    digest = hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little")


def shard_rng(seed: int, split: str, shard_id: int) -> random.Random:
    """The one way to seed a shard's Python randomness."""
    return random.Random(_derive_seed("textrain", seed, split, shard_id))


def shard_np_rng(seed: int, split: str, shard_id: int) -> np.random.Generator:
    """The one way to seed a shard's numpy randomness."""
    return np.random.default_rng(_derive_seed("textrain-np", seed, split, shard_id))


def check_settings(manifest: dict, expected: dict, source: str) -> None:
    """Refuse values in `expected` that disagree with the data's manifest, naming both."""
    settings = manifest.get("settings", {})
    bad = [f"{k}: {source} says {v!r}, the data was made with {settings[k]!r}"
           for k, v in expected.items() if k in settings and v is not None and settings[k] != v]
    if bad:
        raise SettingsMismatchError(
            f"settings disagree with the data manifest of {manifest.get('problem')}-"
            f"{manifest.get('split')}:\n  " + "\n  ".join(bad))


def settings_hash(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]


class Problem:
    """Base class of every data problem. Subclasses register with @register_problem."""

    HParams: ClassVar[type] = NoHParams
    shuffle_examples: ClassVar[bool] = True
    registered_name: str = ""

    def __init__(self, hparams: Any = None):
        self.hparams = hparams if hparams is not None else self.HParams()

    @property
    def name(self) -> str:
        return self.registered_name or type(self).__name__

    def problem_dir(self, data_dir: str) -> str:
        return os.path.join(data_dir, self.name)

    # ---------------------------------------------------------------- generation side
    def dataset_splits(self) -> list[tuple[str, int]]:
        return [(DatasetSplit.TRAIN, 8), (DatasetSplit.EVAL, 1)]

    def prepare(self, data_dir: str, tmp_dir: str) -> None:
        """Build vocabularies (runs once, in the parent, before any shard)."""

    def feature_encoders(self, data_dir: str) -> dict:
        return {}

    def generate_samples(self, data_dir: str, tmp_dir: str, split: str) -> Iterator[dict]:
        raise NotImplementedError(f"{self.name} must implement generate_samples or generate_shard")

    def encode_sample(self, sample: dict, encoders: dict) -> dict:
        """Encode the text fields that have an encoder; other fields pass through."""
        return {k: (encoders[k].encode(v) if k in encoders and isinstance(v, str) else v)
                for k, v in sample.items()}

    def generate_encoded_samples(self, data_dir: str, tmp_dir: str, split: str) -> Iterator[dict]:
        encoders = self.feature_encoders(data_dir)
        for sample in self.generate_samples(data_dir, tmp_dir, split):
            yield self.encode_sample(sample, encoders)

    def generate_shard(self, data_dir: str, tmp_dir: str, split: str, shard_id: int, num_shards: int,
                       seed: int) -> Iterator[dict]:
        """Round-robin: raw sample i belongs to shard i % num_shards; only those are encoded."""
        encoders = self.feature_encoders(data_dir)
        for i, sample in enumerate(self.generate_samples(data_dir, tmp_dir, split)):
            if i % num_shards == shard_id:
                yield self.encode_sample(sample, encoders)

    def manifest_settings(self, data_dir: str) -> dict:
        settings = dataclasses.asdict(self.hparams) if dataclasses.is_dataclass(self.hparams) else {}
        for name, encoder in self.feature_encoders(data_dir).items():
            settings[f"{name}_vocab_fingerprint"] = encoder.fingerprint()
            settings.setdefault(f"{name}_vocab_size", encoder.vocab_size)
        return settings

    def after_split(self, data_dir: str, split: str, manifest: dict) -> None:
        """Hook for extra files written once a split is complete."""

    def shuffle_split(self, split: str) -> bool:
        """Whether the records of `split` are shuffled within each shard when written (default:
        `shuffle_examples`). Task problems keep dev/test in input order for evaluation/prediction."""
        return self.shuffle_examples

    def generate_data(self, data_dir: str, tmp_dir: str, num_workers: int = 1, task_id: int | None = None,
                      num_tasks: int = 1, seed: int = 0, overwrite: bool = False,
                      num_shards: dict[str, int] | None = None) -> dict[str, dict]:
        return generate_data(self, data_dir, tmp_dir, num_workers=num_workers, task_id=task_id,
                             num_tasks=num_tasks, seed=seed, overwrite=overwrite, num_shards=num_shards)

    # ---------------------------------------------------------------- reading side
    def example_reading_spec(self) -> dict:
        raise NotImplementedError

    def preprocess_example(self, example: dict, mode: str, params: DataParams) -> dict:
        """Default: int64 -> int32 (what the models and TPUs want)."""
        return {k: (tf.cast(v, tf.int32) if v.dtype == tf.int64 else v) for k, v in example.items()}

    def example_length(self, example: dict) -> tf.Tensor:
        """Length used for bucketing and max_length filtering (variable-length problems)."""
        lengths = [tf.shape(v)[0] for v in example.values() if v.shape.rank == 1]
        return tf.reduce_max(tf.stack(lengths)) if lengths else tf.constant(0)

    def default_batching(self) -> str:
        spec = self.example_reading_spec()
        return "fixed" if all(isinstance(s, tf.io.FixedLenFeature) for s in spec.values()) else "bucket"

    def read_manifest(self, data_dir: str, split: str = DatasetSplit.TRAIN) -> dict:
        path = os.path.join(self.problem_dir(data_dir), records.manifest_filename(self.name, split))
        if not tf.io.gfile.exists(path):
            raise FileNotFoundError(
                f"{path} does not exist: the {split!r} split of {self.name} has not been (completely) "
                f"generated in {data_dir}; run textrain-datagen --problem={self.name} --data_dir={data_dir}")
        return records.read_json(path)

    def data_files(self, data_dir: str, split: str) -> list[str]:
        manifest = self.read_manifest(data_dir, split)
        return [os.path.join(self.problem_dir(data_dir), s["file"]) for s in manifest["shards"]]

    def dataset(self, mode: str, data_dir: str, params: DataParams,
                input_context: tf.distribute.InputContext | None = None,
                split: str | None = None) -> tf.data.Dataset:
        """Records -> parsed, preprocessed, batched (per replica when input_context is given)."""
        split = split or (DatasetSplit.TRAIN if mode == ModeKeys.TRAIN else DatasetSplit.EVAL)
        training = mode == ModeKeys.TRAIN
        shuffle = (training and self.shuffle_examples) if params.shuffle is None else params.shuffle
        repeat = training if params.repeat is None else params.repeat
        files = self.data_files(data_dir, split)
        batch_size = params.batch_size
        if input_context is not None:
            files = pipeline.files_for_pipeline(files, input_context)
            batch_size = input_context.get_per_replica_batch_size(params.batch_size)
        spec = self.example_reading_spec()
        ds = pipeline.read_records(files, shuffle_files=shuffle, seed=params.seed,
                                   interleave=self.shuffle_examples)
        if repeat:
            ds = ds.repeat()
        if shuffle:
            ds = ds.shuffle(params.shuffle_buffer, seed=params.seed)
        ds = ds.map(lambda r: pipeline.parse_example(r, spec), num_parallel_calls=tf.data.AUTOTUNE,
                    deterministic=True)
        ds = ds.map(lambda ex: self.preprocess_example(ex, mode, params),
                    num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        batching = self.default_batching() if params.batching == "auto" else params.batching
        ds = pipeline.batch(ds, batching, batch_size, max_length=params.max_length,
                            length_fn=self.example_length, drop_remainder=params.drop_remainder)
        options = tf.data.Options()
        options.deterministic = True
        return ds.with_options(options).prefetch(tf.data.AUTOTUNE)


# =============================================================================================== #
# The generate_data driver
# =============================================================================================== #
@dataclasses.dataclass(frozen=True)
class _ShardJob:
    split: str
    shard_id: int
    num_shards: int
    path: str
    settings_hash: str


def _run_shard(problem: Problem, data_dir: str, tmp_dir: str, seed: int, job: _ShardJob) -> dict:
    samples = problem.generate_shard(data_dir, tmp_dir, job.split, job.shard_id, job.num_shards, seed)
    rng = shard_rng(seed, job.split + "/shuffle", job.shard_id) if problem.shuffle_split(job.split) else None
    start = time.time()
    stats = records.write_shard(job.path, samples, shuffle_rng=rng, settings_hash=job.settings_hash)
    stats["seconds"] = time.time() - start
    return stats


# Set in each worker process by _init_worker.
_WORKER: dict[str, Any] = {}


def _init_worker(sys_path: list[str], module: str, qualname: str, hparams: Any, data_dir: str,
                 tmp_dir: str, seed: int) -> None:
    sys.path[:] = sys_path
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import importlib

    cls = importlib.import_module(module)
    for part in qualname.split("."):
        cls = getattr(cls, part)
    _WORKER.update(problem=cls(hparams), data_dir=data_dir, tmp_dir=tmp_dir, seed=seed)


def _worker_run(job: _ShardJob) -> dict:
    w = _WORKER
    return _run_shard(w["problem"], w["data_dir"], w["tmp_dir"], w["seed"], job)


def _split_status(problem: Problem, data_dir: str, split: str, settings: dict, seed: int,
                  overwrite: bool) -> str:
    """'complete', 'todo', or raises when an existing manifest was made with other settings."""
    path = os.path.join(problem.problem_dir(data_dir), records.manifest_filename(problem.name, split))
    if not tf.io.gfile.exists(path):
        return "todo"
    if overwrite:
        tf.io.gfile.remove(path)
        return "todo"
    old = records.read_json(path)
    diff = {k: (old.get("settings", {}).get(k, "<absent>"), v) for k, v in settings.items()
            if old.get("settings", {}).get(k, "<absent>") != v}
    if old.get("seed") != seed:
        diff["seed"] = (old.get("seed"), seed)
    if diff:
        lines = "\n  ".join(f"{k}: existing {a!r}, now {b!r}" for k, (a, b) in sorted(diff.items()))
        raise SettingsMismatchError(
            f"{path} was made with other settings:\n  {lines}\n"
            f"use another --data_dir, or pass --overwrite to regenerate")
    return "complete"


def generate_data(problem: Problem, data_dir: str, tmp_dir: str, *, num_workers: int = 1,
                  task_id: int | None = None, num_tasks: int = 1, seed: int = 0, overwrite: bool = False,
                  num_shards: dict[str, int] | None = None, progress_every: float = 10.0
                  ) -> dict[str, dict]:
    """Make every split's shards (this task's share of them) and, when all exist, its manifest.

    Returns {split: manifest} for the splits that are complete after this call.
    """
    if num_tasks < 1 or (task_id is not None and not 0 <= task_id < num_tasks):
        raise ValueError(f"--task_id must be in [0, --num_tasks={num_tasks}), got {task_id}")
    out_dir = problem.problem_dir(data_dir)
    tf.io.gfile.makedirs(out_dir)
    tf.io.gfile.makedirs(tmp_dir) if tmp_dir else None
    problem.prepare(data_dir, tmp_dir)
    settings = problem.manifest_settings(data_dir)

    splits = [(s, (num_shards or {}).get(s, n)) for s, n in problem.dataset_splits()]
    jobs: list[_ShardJob] = []
    pending: set[str] = set()  # splits without a manifest
    for split, n in splits:
        split_settings = dict(settings, num_shards=n)
        if _split_status(problem, data_dir, split, split_settings, seed, overwrite) == "complete":
            logging.info("%s-%s is complete; skipping", problem.name, split)
            continue
        h = settings_hash(dict(split_settings, seed=seed))
        pending.add(split)
        for i in range(n):
            path = os.path.join(out_dir, records.shard_filename(problem.name, split, i, n))
            if task_id is not None and i % num_tasks != task_id:
                continue
            if overwrite or records.completed_shard_stats(path, h) is None:
                jobs.append(_ShardJob(split, i, n, path, h))

    _run_jobs(problem, data_dir, tmp_dir, seed, jobs, num_workers, progress_every)

    manifests = {}
    for split, n in splits:
        if split not in pending:
            manifests[split] = problem.read_manifest(data_dir, split)
            continue
        h = settings_hash(dict(settings, num_shards=n, seed=seed))
        all_stats = [records.completed_shard_stats(
            os.path.join(out_dir, records.shard_filename(problem.name, split, i, n)), h) for i in range(n)]
        if any(s is None for s in all_stats):
            logging.info("%s-%s: this task's shards are done; the manifest is written by the task that "
                         "finishes the last shard", problem.name, split)
            continue
        manifest = records.make_manifest(problem.name, split, seed, dict(settings, num_shards=n), h, all_stats)
        if manifest["num_examples"] == 0:
            raise ValueError(f"{problem.name}-{split}: the input produced no examples (empty corpus?); "
                             f"no manifest written")
        problem.after_split(data_dir, split, manifest)
        records.write_json_atomic(
            os.path.join(out_dir, records.manifest_filename(problem.name, split)), manifest)
        manifests[split] = manifest
    return manifests


def _run_jobs(problem: Problem, data_dir: str, tmp_dir: str, seed: int, jobs: list[_ShardJob],
              num_workers: int, progress_every: float) -> None:
    if not jobs:
        return
    start = last = time.time()
    examples = 0

    def report(i: int, stats: dict) -> None:
        nonlocal last, examples
        examples += stats["count"]
        now = time.time()
        if now - last >= progress_every or i == len(jobs):
            elapsed = now - start
            eta = elapsed / i * (len(jobs) - i)
            logging.info("datagen %s: %d/%d shards, %d examples, %.0f examples/s, ETA %.0fs",
                         problem.name, i, len(jobs), examples, examples / max(elapsed, 1e-9), eta)
            last = now

    if num_workers <= 1 or len(jobs) == 1:
        for i, job in enumerate(jobs, 1):
            report(i, _run_shard(problem, data_dir, tmp_dir, seed, job))
        return
    if "forkserver" in multiprocessing.get_all_start_methods():
        # The fork server imports TensorFlow and the problem once (no TF runtime started); workers
        # fork from it instead of each paying the import (seconds: most of a small corpus's datagen).
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["tensorflow", type(problem).__module__])
    else:
        ctx = multiprocessing.get_context("spawn")
    cls = type(problem)
    init = (list(sys.path), cls.__module__, cls.__qualname__, problem.hparams, data_dir, tmp_dir, seed)
    with ctx.Pool(min(num_workers, len(jobs)), initializer=_init_worker, initargs=init) as pool:
        for i, stats in enumerate(pool.imap_unordered(_worker_run, jobs), 1):
            report(i, stats)
