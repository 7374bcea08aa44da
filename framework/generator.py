"""The data-generation driver (tensor2tensor's generator_utils): a problem's samples -> sharded TFRecords.

It drives any object with the generation side of the Problem contract (framework/problem.py;
`GeneratingProblem` below lists what it uses) and never imports the contract itself: the contract
points down to this module (`Problem.generate_data`), not the other way.

Decisions:
- The unit of parallel work is one output shard. A shard's content depends only on
  (problem settings, seed, split, shard id), never on which worker made it, so the same seed and input
  give byte-identical shards for any number of workers or machines (`task_id`/`num_tasks`).
- A problem's document corpus (`document_corpus(tmp_dir)`) is read once, before the shard jobs, by the
  same workers: a partition job per partition writes a spill file grouped by (split, shard), and each
  shard job reads its slices (framework/shuffle.py has the partitions, the hash assignment and the spill
  format). Progress is one line per stage: partition, shuffle, shards. The spill directory
  `<problem dir>/.shuffle/` is shared by --num_tasks tasks (partitions are claimed) and removed at the end.
  A claim is renewed (its mtime) while its partition is read; one of a dead process of this machine, or
  one not renewed for --claim_timeout_s (a task of another machine that died or hangs), is taken over.
- A problem without a document corpus reads its input in each shard job (`generate_samples`, through
  the readers of corpus_formats), so every job reads all of it, as tensor2tensor's do; to read a corpus
  once, a problem declares it as its `document_corpus`.
- Worker processes fork from a fork server that has imported TensorFlow and the problem's module but
  started no TF runtime (TF is not fork-safe once initialised; `spawn` where there is no fork
  server); each rebuilds the problem from its class and hparams.
- A split is complete only when its manifest exists (written last). Re-running skips complete splits,
  keeps finished shards of an incomplete split made with the same settings, and redoes the rest. A
  data_dir whose manifest was made with other settings is refused, naming every differing setting.
- One writer per problem directory: generate_data holds a lock file there (framework/locks.py); a
  second concurrent run stops at once naming the holder. `.incomplete` files of dead writers are removed.
- A complete split whose files no longer match its manifest (a shard missing, truncated, replaced:
  a stat per shard) is repaired: the manifest is removed, the damaged shards (`ShardDamage.file`: names as
  data, not parsed from messages) are regenerated (shards are deterministic, so the result equals an
  untouched run) and the manifest is written again. With `verify=True` (`textrain-datagen --verify`)
  every record's CRC and every shard's count is checked too.
- A failure while writing (disk full, permission denied) leaves no `.incomplete` file of this run and
  no manifest.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import multiprocessing
import os
import pickle
import random
import sys
import time
from typing import Any, Iterator, Protocol

import numpy as np
from absl import logging

from textrain.framework import corpus_formats, fileio, lazy_tf, locks, manifests, shards, shuffle
from textrain.framework.errors import SettingsMismatchError
from textrain.framework.manifests import ShardDamage


def _derive_seed(*parts: Any) -> int:
    digest = hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little")


def shard_rng(seed: int, split: str, shard_id: int) -> random.Random:
    """The one way to seed a shard's Python randomness."""
    return random.Random(_derive_seed("textrain", seed, split, shard_id))


def shard_np_rng(seed: int, split: str, shard_id: int) -> np.random.Generator:
    """The one way to seed a shard's numpy randomness."""
    return np.random.default_rng(_derive_seed("textrain-np", seed, split, shard_id))


class GeneratingProblem(Protocol):
    """What the driver uses of a problem: the generation side of framework.problem.Problem."""

    name: str
    hparams: Any

    def problem_dir(self, data_dir: str) -> str: ...

    def dataset_splits(self) -> list[tuple[str, int]]: ...

    def prepare(self, data_dir: str, tmp_dir: str) -> None: ...

    def generate_shard(self, data_dir: str, tmp_dir: str, split: str, shard_id: int, num_shards: int,
                       seed: int) -> Iterator[dict]: ...

    def manifest_settings(self, data_dir: str) -> dict: ...

    def shuffle_split(self, split: str) -> bool: ...

    def after_split(self, data_dir: str, split: str, manifest: dict) -> None: ...

    def read_manifest(self, data_dir: str, split: str) -> dict: ...

    def document_corpus(self, tmp_dir: str) -> shuffle.DocumentCorpus | None: ...


@dataclasses.dataclass(frozen=True)
class ShardJob:
    """One unit of work: one output shard of one split."""

    split: str
    shard_id: int
    num_shards: int
    path: str
    settings_hash: str


@dataclasses.dataclass(frozen=True)
class ProblemRecipe:
    """What another process needs to rebuild this process's problem: its class by import path and its
    hparams as pickled bytes (unpickled only after `sys_path` is in place, so problems from --usr_dir
    resolve). Used by the local worker pool and the Beam runner (framework/beam_datagen.py)."""

    sys_path: tuple[str, ...]
    module: str
    qualname: str
    hparams: bytes

    @classmethod
    def of(cls, problem: GeneratingProblem) -> "ProblemRecipe":
        kind = type(problem)
        return cls(tuple(sys.path), kind.__module__, kind.__qualname__, pickle.dumps(problem.hparams))

    def build(self) -> GeneratingProblem:
        import importlib

        sys.path[:0] = [p for p in self.sys_path if p not in sys.path]
        kind: Any = importlib.import_module(self.module)
        for part in self.qualname.split("."):
            kind = getattr(kind, part)
        return kind(pickle.loads(self.hparams))


def run_shard_job(problem: GeneratingProblem, data_dir: str, tmp_dir: str, seed: int, job: ShardJob,
                  spills: shuffle.Spills | shuffle.GroupedTexts | None = None) -> dict:
    """Generate and write one shard (atomically): THE per-shard code of every runner (local and Beam).
    `spills`: the shuffled documents of a problem's document_corpus, read instead of the corpus."""
    with shuffle.reading_spills(spills):
        samples = problem.generate_shard(data_dir, tmp_dir, job.split, job.shard_id, job.num_shards, seed)
        rng = shard_rng(seed, job.split + "/shuffle", job.shard_id) if problem.shuffle_split(job.split) else None
        start = time.time()
        stats = shards.write_shard(job.path, samples, shuffle_rng=rng, settings_hash=job.settings_hash)
    stats["seconds"] = time.time() - start
    return stats


# Set in each worker process by _init_worker.
_WORKER: dict[str, Any] = {}


def _init_worker(spec: ProblemRecipe, data_dir: str, tmp_dir: str, seed: int) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    _WORKER.update(problem=spec.build(), data_dir=data_dir, tmp_dir=tmp_dir, seed=seed)


def _worker_run(task: tuple[ShardJob, shuffle.Spills | None]) -> dict:
    w = _WORKER
    return run_shard_job(w["problem"], w["data_dir"], w["tmp_dir"], w["seed"], *task)


def _worker_spill(task: tuple[shuffle.DocumentCorpus, shuffle.Partition, dict[str, int], str, float]) -> int | None:
    """A partition job: read and spill the partition if this process claims it (None: another has it)."""
    return shuffle.spill_if_claimed(*task)


def _split_status(problem: GeneratingProblem, data_dir: str, split: str, settings: dict, seed: int,
                  overwrite: bool) -> str:
    """'complete', 'todo', or raises when an existing manifest was made with other settings."""
    path = os.path.join(problem.problem_dir(data_dir), manifests.manifest_filename(problem.name, split))
    if not fileio.exists(path):
        return "todo"
    if overwrite:
        fileio.remove(path)
        return "todo"
    old = fileio.read_json(path)
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


def generate_data(problem: GeneratingProblem, data_dir: str, tmp_dir: str, *, num_workers: int = 1,
                  task_id: int | None = None, num_tasks: int = 1, seed: int = 0, overwrite: bool = False,
                  num_shards: dict[str, int] | None = None, progress_every: float = 10.0,
                  verify: bool = False, partition_mb: float = shuffle.DEFAULT_PARTITION_MB,
                  claim_timeout_s: float = shuffle.DEFAULT_CLAIM_TIMEOUT_S) -> dict[str, dict]:
    """Make every split's shards (this task's share of them) and, when all exist, its manifest.

    Returns {split: manifest} for the splits that are complete after this call. Complete splits whose
    files do not match their manifest are repaired (`verify`: every record read; see the module docstring).
    The Beam runner (framework/beam_datagen.py) runs the same three steps under the same lock: plan,
    run_shard_job per shard, write_manifests.
    """
    with generation_lock(problem, data_dir, task_id, num_tasks):
        plan = plan_generation(problem, data_dir, tmp_dir, task_id=task_id, num_tasks=num_tasks, seed=seed,
                               overwrite=overwrite, num_shards=num_shards, verify=verify)
        with shuffled_corpus(problem, data_dir, tmp_dir, plan, partition_mb, task_id, num_tasks,
                             claim_timeout_s) as shuffled:
            _run_jobs(problem, data_dir, tmp_dir, seed, plan.jobs, num_workers, progress_every, shuffled)
        return write_manifests(problem, data_dir, plan)


@dataclasses.dataclass
class Shuffled:
    """A run's corpus shuffle to do: the partitions and where their spill files go (shuffle.py)."""

    corpus: shuffle.DocumentCorpus
    partitions: list[shuffle.Partition]
    shards: dict[str, int]
    directory: str
    task_id: int | None = None
    num_tasks: int = 1
    claim_timeout_s: float = shuffle.DEFAULT_CLAIM_TIMEOUT_S  # a claim not renewed for this long is taken over

    def spills(self) -> shuffle.Spills:
        return shuffle.Spills(self.directory, len(self.partitions))

    def own_order(self) -> list[shuffle.Partition]:
        """The partitions in the order this task claims them: task k starts k/num_tasks of the way in, so
        tasks that run together mostly read different partitions (claims decide; any order is correct)."""
        start = (self.task_id or 0) * len(self.partitions) // self.num_tasks
        return self.partitions[start:] + self.partitions[:start]


def shuffle_dir(problem: GeneratingProblem, data_dir: str) -> str:
    """Where a run spills its shuffled corpus: one directory, shared by the --num_tasks tasks (each
    partition is claimed and read by one of them)."""
    return os.path.join(problem.problem_dir(data_dir), ".shuffle")


def plan_shuffle(problem: GeneratingProblem, data_dir: str, tmp_dir: str, plan: "GenerationPlan",
                 partition_mb: float, task_id: int | None = None, num_tasks: int = 1, spill: bool = True,
                 claim_timeout_s: float = shuffle.DEFAULT_CLAIM_TIMEOUT_S) -> Shuffled | None:
    """The partitions of the problem's document corpus (none when it has none or no shard is to be made),
    and with `spill` (not on Beam, whose engine shuffles) the spill directory made ready for them."""
    directory = shuffle_dir(problem, data_dir)
    spec = problem.document_corpus(tmp_dir) if plan.jobs else None
    if spec is None:
        if task_id is None:
            shuffle.remove_directory(directory)  # a dead run's, for a plan that has nothing left to do
        return None
    start = time.time()
    shards = dict(plan.splits)
    parts = (shuffle.planned_partitions(directory, spec, shards) if spill else None) or \
        shuffle.plan_partitions(spec, max(1, int(partition_mb * (1 << 20))))
    if spill:
        shuffle.prepare_directory(directory, shuffle.plan_identity(spec, parts, shards))
    logging.info("datagen %s: partition: %d files -> %d partitions of <= %g MB in %.1fs", problem.name,
                 len(spec.paths), len(parts), partition_mb, time.time() - start)
    return Shuffled(spec, parts, shards, directory, task_id, num_tasks, claim_timeout_s)


@contextlib.contextmanager
def shuffled_corpus(problem: GeneratingProblem, data_dir: str, tmp_dir: str, plan: "GenerationPlan",
                    partition_mb: float, task_id: int | None = None, num_tasks: int = 1,
                    claim_timeout_s: float = shuffle.DEFAULT_CLAIM_TIMEOUT_S) -> Iterator[Shuffled | None]:
    """`plan_shuffle`; the spill files are removed when the block ends, normally or by an error (a killed
    run's are kept, and a re-run with the same plan keeps its finished partitions). With --num_tasks
    they are shared: removed by the task after which every shard of the pending splits exists."""
    shuffled = plan_shuffle(problem, data_dir, tmp_dir, plan, partition_mb, task_id, num_tasks,
                            claim_timeout_s=claim_timeout_s)
    try:
        yield shuffled
    except BaseException:
        if shuffled is not None and task_id is None:
            shuffle.remove_directory(shuffled.directory)
        raise
    if shuffled is not None and (task_id is None or _all_shards_exist(problem, data_dir, plan)):
        shuffle.remove_directory(shuffled.directory)


def _all_shards_exist(problem: GeneratingProblem, data_dir: str, plan: "GenerationPlan") -> bool:
    out_dir = problem.problem_dir(data_dir)
    for split, n in plan.splits:
        if split in plan.pending:
            h = manifests.settings_hash(dict(plan.settings, num_shards=n, seed=plan.seed))
            if any(shards.completed_shard_stats(os.path.join(out_dir, shards.shard_filename(problem.name, split, i, n)),
                                                h) is None for i in range(n)):
                return False
    return True


@contextlib.contextmanager
def generation_lock(problem: GeneratingProblem, data_dir: str, task_id: int | None = None, num_tasks: int = 1):
    """One writer per problem directory (per task): hold its lock, remove the temporary files of writers
    that died before, and on any failure remove this run's own temporary files."""
    if num_tasks < 1 or (task_id is not None and not 0 <= task_id < num_tasks):
        raise ValueError(f"--task_id must be in [0, --num_tasks={num_tasks}), got {task_id}")
    out_dir = problem.problem_dir(data_dir)
    fileio.makedirs(out_dir)
    lock = locks.acquire_dir_lock(out_dir, "textrain-datagen", _lock_name(task_id, num_tasks))
    try:
        for path in locks.remove_stale_incomplete(out_dir):
            logging.warning("removed %s, left by a writer that died", path)
        yield
    except BaseException:
        locks.remove_stale_incomplete(out_dir)  # a failed shard's (and killed workers') temporary files
        raise
    finally:
        lock.release()


def _lock_name(task_id: int | None, num_tasks: int) -> str:
    """Machines sharing the shards (--task_id) each hold their own lock: they are meant to run together."""
    return ".datagen.lock" if task_id is None else f".datagen-task{task_id}-of-{num_tasks}.lock"


def _damaged_shards(problem: GeneratingProblem, data_dir: str, split: str, verify: bool) -> list[ShardDamage]:
    """What is wrong with a complete split's shards: a stat each, and with `verify` a full CRC read."""
    out_dir = problem.problem_dir(data_dir)
    manifest = problem.read_manifest(data_dir, split)
    if not verify:
        return manifests.check_split_files(out_dir, manifest)
    found = [shards.verify_shard(os.path.join(out_dir, s["file"]), s) for s in manifest["shards"]]
    return [f for f in found if f]


def _repair_split(problem: GeneratingProblem, data_dir: str, split: str, damage: list[ShardDamage]) -> None:
    """Drop the manifest and the damaged shards (and their stats) so they are made again."""
    out_dir = problem.problem_dir(data_dir)
    logging.warning("%s-%s does not match its manifest (%s); regenerating those shards", problem.name, split,
                    "; ".join(map(str, damage)))
    manifest = problem.read_manifest(data_dir, split)
    names = {d.file for d in damage}
    for shard in manifest["shards"]:
        if shard["file"] in names:
            fileio.remove_if_exists(os.path.join(out_dir, shard["file"]))
            fileio.remove_if_exists(shards.stats_path(os.path.join(out_dir, shard["file"])))
    fileio.remove_if_exists(os.path.join(out_dir, manifests.manifest_filename(problem.name, split)))


def plan_generation(problem: GeneratingProblem, data_dir: str, tmp_dir: str, *, task_id: int | None = None,
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
        h = manifests.settings_hash(dict(split_settings, seed=seed))
        pending.append(split)
        for i in range(n):
            path = os.path.join(out_dir, shards.shard_filename(problem.name, split, i, n))
            if task_id is not None and i % num_tasks != task_id:
                continue
            if overwrite or shards.completed_shard_stats(path, h) is None:
                jobs.append(ShardJob(split, i, n, path, h))
    return GenerationPlan(splits, pending, settings, seed, jobs)


def write_manifests(problem: GeneratingProblem, data_dir: str, plan: GenerationPlan) -> dict[str, dict]:
    """Write the manifest of every pending split whose shards ALL exist on disk (checked here, from the
    files' stats sidecars, not from what a caller says it wrote); returns {split: manifest} of the
    complete splits."""
    out_dir = problem.problem_dir(data_dir)
    settings, seed = plan.settings, plan.seed
    complete = {}
    for split, n in plan.splits:
        if split not in plan.pending:
            complete[split] = problem.read_manifest(data_dir, split)
            continue
        h = manifests.settings_hash(dict(settings, num_shards=n, seed=seed))
        all_stats = [shards.completed_shard_stats(
            os.path.join(out_dir, shards.shard_filename(problem.name, split, i, n)), h) for i in range(n)]
        if any(s is None for s in all_stats):
            logging.info("%s-%s: this task's shards are done; the manifest is written by the task that "
                         "finishes the last shard", problem.name, split)
            continue
        manifest = manifests.make_manifest(problem.name, split, seed, dict(settings, num_shards=n), h, all_stats)
        if manifest["num_examples"] == 0:
            raise ValueError(f"{problem.name}-{split}: the input produced no examples (an empty corpus, or one "
                             f"too small for this split: a dev split of documents takes each with probability "
                             f"--dev_fraction, by a hash of its text); no manifest written")
        problem.after_split(data_dir, split, manifest)
        fileio.write_json_atomic(
            os.path.join(out_dir, manifests.manifest_filename(problem.name, split)), manifest)
        complete[split] = manifest
    return complete


class _Progress:
    """One log line per stage at most every `every` seconds (and at its end): done/total, rate and ETA."""

    def __init__(self, problem: GeneratingProblem, stage: str, total: int, unit: str, every: float):
        self.name, self.stage, self.total, self.unit, self.every = problem.name, stage, total, unit, every
        self.start = self.last = time.time()
        self.items = 0

    def add(self, done: int, items: int) -> None:
        self.items += max(items, 0)
        now = time.time()
        if now - self.last >= self.every or done == self.total:
            elapsed = now - self.start
            logging.info("datagen %s: %s: %d/%d, %d %s, %.0f %s/s, ETA %.0fs", self.name, self.stage, done,
                         self.total, self.items, self.unit, self.items / max(elapsed, 1e-9), self.unit,
                         elapsed / done * (self.total - done))
            self.last = now


def _spilled(problem: GeneratingProblem, shuffled: Shuffled, tasks: list, results: Iterator[int | None],
             progress_every: float) -> None:
    """Follow this process's partition jobs (in order: a file's first failing partition is the error),
    read any partition whose claimer died, wait for those other tasks read, then check each structured
    file's bad records (kept in the spill files) against its --skip_bad_records."""
    progress = _Progress(problem, "shuffle (partitions read)", len(tasks), "documents", progress_every)
    for i, count in enumerate(results, 1):
        progress.add(i, count or 0)
    missing = list(shuffled.partitions)
    last = 0.0
    while True:
        missing = [p for p in missing if not fileio.exists(shuffle.spill_path(shuffled.directory, p))]
        if not missing:
            break
        for part in missing:
            shuffle.spill_if_claimed(shuffled.corpus, part, shuffled.shards, shuffled.directory,
                                     shuffled.claim_timeout_s)
        if time.time() - last >= progress_every:
            logging.info("datagen %s: shuffle: waiting for %d partitions that other tasks read", problem.name,
                         len(missing))
            last = time.time()
        time.sleep(0.5)
    corpus_formats.check_bad_records(shuffle.bad_records(shuffled.directory, shuffled.partitions))


def _run_jobs(problem: GeneratingProblem, data_dir: str, tmp_dir: str, seed: int, jobs: list[ShardJob],
              num_workers: int, progress_every: float, shuffled: Shuffled | None = None) -> None:
    """Shuffle the document corpus to spill files, then make the shards: both spread over the same
    worker processes."""
    if not jobs:
        return
    spill_tasks = ([(shuffled.corpus, p, shuffled.shards, shuffled.directory, shuffled.claim_timeout_s)
                    for p in shuffled.own_order()]
                   if shuffled is not None else [])
    spills = shuffled.spills() if shuffled is not None else None
    start = last = time.time()
    examples = 0

    def report(i: int, stats: dict) -> None:
        nonlocal last, examples
        examples += stats["count"]
        now = time.time()
        if now - last >= progress_every or i == len(jobs):
            elapsed = now - start
            eta = elapsed / i * (len(jobs) - i)
            logging.info("datagen %s: shards: %d/%d, %d examples, %.0f examples/s, ETA %.0fs",
                         problem.name, i, len(jobs), examples, examples / max(elapsed, 1e-9), eta)
            last = now

    if num_workers <= 1 or (len(jobs) == 1 and len(spill_tasks) <= 1):
        if shuffled is not None:
            _spilled(problem, shuffled, spill_tasks, map(_worker_spill, spill_tasks), progress_every)
        start = last = time.time()
        for i, job in enumerate(jobs, 1):
            report(i, run_shard_job(problem, data_dir, tmp_dir, seed, job, spills))
        return
    if "forkserver" in multiprocessing.get_all_start_methods():
        # The fork server imports the problem's module once (and TensorFlow if this process uses it: a
        # remote data_dir, a problem that needs it); workers fork from it instead of each paying the imports.
        ctx = multiprocessing.get_context("forkserver")
        preload = ["tensorflow"] if lazy_tf.loaded() else []
        ctx.set_forkserver_preload(preload + [type(problem).__module__])
    else:
        ctx = multiprocessing.get_context("spawn")
    init = (ProblemRecipe.of(problem), data_dir, tmp_dir, seed)
    workers = min(num_workers, max(len(jobs), len(spill_tasks)))
    with ctx.Pool(workers, initializer=_init_worker, initargs=init) as pool:
        if shuffled is not None:
            _spilled(problem, shuffled, spill_tasks, pool.imap(_worker_spill, spill_tasks), progress_every)
        start = last = time.time()
        tasks = [(job, spills) for job in jobs]
        for i, stats in enumerate(pool.imap_unordered(_worker_run, tasks), 1):
            report(i, stats)
