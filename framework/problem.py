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
- One writer per problem directory: generate_data holds a lock file there (framework/locks.py); a
  second concurrent run stops at once naming the holder. `.incomplete` files of dead writers are removed.
- A complete split whose files no longer match its manifest (a shard missing, truncated, replaced:
  a stat per shard) is repaired: the manifest is removed, the damaged shards are regenerated (shards are
  deterministic, so the result equals an untouched run) and the manifest is written again. With
  `verify=True` (`textrain-datagen --verify`) every record's CRC and every shard's count is checked too.
- A failure while writing (disk full, permission denied) leaves no `.incomplete` file of this run and
  no manifest.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import multiprocessing
import os
import pickle
import random
import sys
import time
from typing import Any, ClassVar, Iterator

import numpy as np
from absl import logging

from textrain.framework import corpus_formats, fileio, lazy_tf, locks, pipeline, records
from textrain.framework.cli import UserError
from textrain.framework.lazy_tf import tf
from textrain.framework.flags import validate_settings


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


class SettingsMismatchError(UserError, ValueError):
    pass


class MissingDataError(UserError, FileNotFoundError):
    """A split that was never (completely) generated; the message says which datagen command makes it."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


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
        validate_settings(self.hparams)  # declared ranges + the HParams' validate(), before any work

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
        settings = corpus_formats.without_default_settings(settings)
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
                      num_shards: dict[str, int] | None = None, verify: bool = False) -> dict[str, dict]:
        return generate_data(self, data_dir, tmp_dir, num_workers=num_workers, task_id=task_id,
                             num_tasks=num_tasks, seed=seed, overwrite=overwrite, num_shards=num_shards,
                             verify=verify)

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
        if not fileio.exists(path):
            raise MissingDataError(
                f"{path} does not exist: the {split!r} split of {self.name} has not been (completely) "
                f"generated in {data_dir}; run textrain-datagen --problem={self.name} --data_dir={data_dir}")
        return records.read_json(path)

    def data_files(self, data_dir: str, split: str) -> list[str]:
        """The split's record files, checked against its manifest first (a stat each: names and sizes
        recorded at write time), so a deleted, truncated or replaced shard is named before any training."""
        manifest = self.read_manifest(data_dir, split)
        damage = records.check_split_files(self.problem_dir(data_dir), manifest)
        if damage:
            raise records.RecordError(
                f"the {split!r} split in {self.problem_dir(data_dir)} does not match its manifest: "
                f"{'; '.join(damage)}. Re-run textrain-datagen --problem={self.name} --data_dir={data_dir} "
                f"(add --verify to check every record) with the settings the data was made with: it "
                f"regenerates exactly those shards")
        files = [os.path.join(self.problem_dir(data_dir), s["file"]) for s in manifest["shards"]]
        records.note_files_opened(files)
        return files

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
class ShardJob:
    """One unit of work: one output shard of one split."""

    split: str
    shard_id: int
    num_shards: int
    path: str
    settings_hash: str


@dataclasses.dataclass(frozen=True)
class ProblemSpec:
    """What another process needs to rebuild this process's problem: its class by import path and its
    hparams as pickled bytes (unpickled only after `sys_path` is in place, so problems from --usr_dir
    resolve). Used by the local worker pool and the Beam runner (framework/beam_datagen.py)."""

    sys_path: tuple[str, ...]
    module: str
    qualname: str
    hparams: bytes

    @classmethod
    def of(cls, problem: Problem) -> "ProblemSpec":
        kind = type(problem)
        return cls(tuple(sys.path), kind.__module__, kind.__qualname__, pickle.dumps(problem.hparams))

    def build(self) -> Problem:
        import importlib

        sys.path[:0] = [p for p in self.sys_path if p not in sys.path]
        kind: Any = importlib.import_module(self.module)
        for part in self.qualname.split("."):
            kind = getattr(kind, part)
        return kind(pickle.loads(self.hparams))


def run_shard_job(problem: Problem, data_dir: str, tmp_dir: str, seed: int, job: ShardJob) -> dict:
    """Generate and write one shard (atomically): THE per-shard code of every runner (local and Beam)."""
    samples = problem.generate_shard(data_dir, tmp_dir, job.split, job.shard_id, job.num_shards, seed)
    rng = shard_rng(seed, job.split + "/shuffle", job.shard_id) if problem.shuffle_split(job.split) else None
    start = time.time()
    stats = records.write_shard(job.path, samples, shuffle_rng=rng, settings_hash=job.settings_hash)
    stats["seconds"] = time.time() - start
    return stats


# Set in each worker process by _init_worker.
_WORKER: dict[str, Any] = {}


def _init_worker(spec: ProblemSpec, data_dir: str, tmp_dir: str, seed: int) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    _WORKER.update(problem=spec.build(), data_dir=data_dir, tmp_dir=tmp_dir, seed=seed)


def _worker_run(job: ShardJob) -> dict:
    w = _WORKER
    return run_shard_job(w["problem"], w["data_dir"], w["tmp_dir"], w["seed"], job)


def _split_status(problem: Problem, data_dir: str, split: str, settings: dict, seed: int,
                  overwrite: bool) -> str:
    """'complete', 'todo', or raises when an existing manifest was made with other settings."""
    path = os.path.join(problem.problem_dir(data_dir), records.manifest_filename(problem.name, split))
    if not fileio.exists(path):
        return "todo"
    if overwrite:
        fileio.remove(path)
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


@dataclasses.dataclass
class GenerationPlan:
    """What is left to do: the splits (name, shards), those without a manifest, their settings (the
    manifest's), and the shard jobs of this task. Plain data: it pickles to Beam workers."""

    splits: list[tuple[str, int]]
    pending: list[str]
    settings: dict
    seed: int
    jobs: list[ShardJob]


def generate_data(problem: Problem, data_dir: str, tmp_dir: str, *, num_workers: int = 1,
                  task_id: int | None = None, num_tasks: int = 1, seed: int = 0, overwrite: bool = False,
                  num_shards: dict[str, int] | None = None, progress_every: float = 10.0,
                  verify: bool = False) -> dict[str, dict]:
    """Make every split's shards (this task's share of them) and, when all exist, its manifest.

    Returns {split: manifest} for the splits that are complete after this call. Complete splits whose
    files do not match their manifest are repaired (`verify`: every record read; see the module docstring).
    The Beam runner (framework/beam_datagen.py) runs the same three steps under the same lock: plan,
    run_shard_job per shard, write_manifests.
    """
    with generation_lock(problem, data_dir, task_id, num_tasks):
        plan = plan_generation(problem, data_dir, tmp_dir, task_id=task_id, num_tasks=num_tasks, seed=seed,
                               overwrite=overwrite, num_shards=num_shards, verify=verify)
        _run_jobs(problem, data_dir, tmp_dir, seed, plan.jobs, num_workers, progress_every)
        return write_manifests(problem, data_dir, plan)


@contextlib.contextmanager
def generation_lock(problem: Problem, data_dir: str, task_id: int | None = None, num_tasks: int = 1):
    """One writer per problem directory (per task): hold its lock, remove the temporary files of writers
    that died before, and on any failure remove this run's own temporary files."""
    if num_tasks < 1 or (task_id is not None and not 0 <= task_id < num_tasks):
        raise ValueError(f"--task_id must be in [0, --num_tasks={num_tasks}), got {task_id}")
    out_dir = problem.problem_dir(data_dir)
    fileio.makedirs(out_dir)
    lock = locks.acquire_dir_lock(out_dir, "textrain-datagen", _lock_name(task_id, num_tasks))
    try:
        for path in records.remove_stale_incomplete(out_dir):
            logging.warning("removed %s, left by a writer that died", path)
        yield
    except BaseException:
        records.remove_stale_incomplete(out_dir)  # a failed shard's (and killed workers') temporary files
        raise
    finally:
        lock.release()


def _lock_name(task_id: int | None, num_tasks: int) -> str:
    """Machines sharing the shards (--task_id) each hold their own lock: they are meant to run together."""
    return ".datagen.lock" if task_id is None else f".datagen-task{task_id}-of-{num_tasks}.lock"


def _damaged_shards(problem: Problem, data_dir: str, split: str, verify: bool) -> list[str]:
    """What is wrong with a complete split's shards: a stat each, and with `verify` a full CRC read."""
    out_dir = problem.problem_dir(data_dir)
    manifest = problem.read_manifest(data_dir, split)
    if not verify:
        return records.check_split_files(out_dir, manifest)
    found = [records.verify_shard(os.path.join(out_dir, s["file"]), s) for s in manifest["shards"]]
    return [f for f in found if f]


def _repair_split(problem: Problem, data_dir: str, split: str, damage: list[str]) -> None:
    """Drop the manifest and the damaged shards (and their stats) so they are made again."""
    out_dir = problem.problem_dir(data_dir)
    logging.warning("%s-%s does not match its manifest (%s); regenerating those shards", problem.name, split,
                    "; ".join(damage))
    manifest = problem.read_manifest(data_dir, split)
    names = {d.split(" ", 1)[0].rstrip(":") for d in damage}
    for shard in manifest["shards"]:
        if shard["file"] in names:
            records.remove_if_exists(os.path.join(out_dir, shard["file"]))
            records.remove_if_exists(records.stats_path(os.path.join(out_dir, shard["file"])))
    records.remove_if_exists(os.path.join(out_dir, records.manifest_filename(problem.name, split)))


def plan_generation(problem: Problem, data_dir: str, tmp_dir: str, *, task_id: int | None = None,
                    num_tasks: int = 1, seed: int = 0, overwrite: bool = False,
                    num_shards: dict[str, int] | None = None, verify: bool = False) -> GenerationPlan:
    """Build the vocabulary (`prepare`, here, once), repair complete splits whose files no longer match
    their manifest, and list the shards still to make. Call it under `generation_lock`."""
    out_dir = problem.problem_dir(data_dir)
    fileio.makedirs(out_dir)
    fileio.makedirs(tmp_dir) if tmp_dir else None
    problem.prepare(data_dir, tmp_dir)
    settings = problem.manifest_settings(data_dir)

    splits = [(s, (num_shards or {}).get(s, n)) for s, n in problem.dataset_splits()]
    jobs: list[ShardJob] = []
    pending: list[str] = []  # splits without a manifest
    for split, n in splits:
        split_settings = dict(settings, num_shards=n)
        if _split_status(problem, data_dir, split, split_settings, seed, overwrite) == "complete":
            damage = _damaged_shards(problem, data_dir, split, verify)
            if not damage:
                logging.info("%s-%s is complete%s; skipping", problem.name, split,
                             " and every record verified" if verify else "")
                continue
            _repair_split(problem, data_dir, split, damage)
        h = settings_hash(dict(split_settings, seed=seed))
        pending.append(split)
        for i in range(n):
            path = os.path.join(out_dir, records.shard_filename(problem.name, split, i, n))
            if task_id is not None and i % num_tasks != task_id:
                continue
            if overwrite or records.completed_shard_stats(path, h) is None:
                jobs.append(ShardJob(split, i, n, path, h))
    return GenerationPlan(splits, pending, settings, seed, jobs)


def write_manifests(problem: Problem, data_dir: str, plan: GenerationPlan) -> dict[str, dict]:
    """Write the manifest of every pending split whose shards ALL exist on disk (checked here, from the
    files' stats sidecars, not from what a caller says it wrote); returns {split: manifest} of the
    complete splits."""
    out_dir = problem.problem_dir(data_dir)
    settings, seed = plan.settings, plan.seed
    manifests = {}
    for split, n in plan.splits:
        if split not in plan.pending:
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


def _run_jobs(problem: Problem, data_dir: str, tmp_dir: str, seed: int, jobs: list[ShardJob],
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
            report(i, run_shard_job(problem, data_dir, tmp_dir, seed, job))
        return
    if "forkserver" in multiprocessing.get_all_start_methods():
        # The fork server imports the problem's module once (and TensorFlow if this process uses it: a
        # remote data_dir, a problem that needs it); workers fork from it instead of each paying the imports.
        ctx = multiprocessing.get_context("forkserver")
        preload = ["tensorflow"] if lazy_tf.loaded() else []
        ctx.set_forkserver_preload(preload + [type(problem).__module__])
    else:
        ctx = multiprocessing.get_context("spawn")
    init = (ProblemSpec.of(problem), data_dir, tmp_dir, seed)
    with ctx.Pool(min(num_workers, len(jobs)), initializer=_init_worker, initargs=init) as pool:
        for i, stats in enumerate(pool.imap_unordered(_worker_run, jobs), 1):
            report(i, stats)
