"""`textrain-datagen --runner=beam`: a problem's generation as an Apache Beam pipeline.

    textrain-datagen --problem=bert_pretrain --input_file=corpus.txt --data_dir=data --runner=beam \
        --beam_pipeline_options="--runner=DirectRunner --direct_num_workers=2 \
                                 --direct_running_mode=multi_processing"

Flink, Spark and Dataflow are chosen by the pipeline options alone (docs/BEAM.md has a command line
for each). This module imports apache_beam at the top: framework/datagen.py imports it only for
--runner=beam, so the core package does not need the `[beam]` extra.

The pipeline is the local driver's steps (framework/generator.py), not a second implementation:
1. `plan_generation` runs in the launching process: vocabulary building (`problem.prepare`, once,
   before any shard), the list of shard jobs still to do (complete shards are kept on re-runs), and the
   partitions of a problem's document corpus (framework/shuffle.py).
2. `Create(partitions) | Reshuffle | FlatMap(read)`: each partition read once, each document keyed by the
   (split, shard) its text hashes to, with its corpus position; `{jobs, documents} | CoGroupByKey`: the
   engine's shuffle brings each shard job its documents, sorted back into corpus order, and `WriteShard`
   rebuilds the problem from a `ProblemRecipe` and calls `run_shard_job` -- the function `--num_workers`
   datagen calls -- so for the same seed the shards are byte-identical whatever the runner and the number
   of workers. A shard is written as `<name>.incomplete` and renamed when whole (shards.write_shard); a
   retried or speculative duplicate bundle rewrites the same bytes under the same name.
3. `ToList | ParDo(WriteManifests)`: a global combine emits only after EVERY shard write of the
   pipeline has finished, so the manifests are written by the pipeline's last stage, on a worker.
   Why there and not by the launcher after `wait_until_finish()`: on distributed runners the
   launcher may not wait (Dataflow templates, Flink `--detached`, a laptop that disconnects) and the
   job still completes; the last stage always runs after the shards, wherever the pipeline runs.
   `write_manifests` does not trust the collected stats either: it re-reads every shard's stats
   sidecar from the file system and writes a manifest only when all of them exist. A pipeline killed
   part way therefore leaves no manifest, and re-running finishes the missing shards only.

Memory per worker: one shard job at a time per worker thread, holding its own documents (the engine's
group: ~corpus bytes / num_shards; bert_pretrain also the shard's token ids, ~4 bytes x corpus tokens /
num_shards), written through the bounded-memory shuffler of shards.write_shard; a partition job holds
one partition's documents. Worker memory is thus set by --num_shards, not by the corpus size: raise
--num_shards with the corpus (docs/BEAM.md gives the rule).
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging as std_logging  # Beam logs through the standard library: quietened at its logger
import os
import shlex
import time
from typing import Iterator, Sequence

import apache_beam as beam
from absl import logging
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState

from textrain.framework import corpus_formats, fileio, shuffle
from textrain.framework.errors import UserError
from textrain.framework.generator import (
    GenerationPlan,
    ProblemRecipe,
    ShardJob,
    Shuffled,
    generation_lock,
    plan_generation,
    plan_shuffle,
    run_shard_job,
    write_manifests,
)
from textrain.framework.problem import Problem

_COUNTERS = "textrain"  # the Beam metrics namespace of the stage counters (progress)


def failures_dir(problem: Problem, data_dir: str) -> str:
    """Where a worker leaves a user's error (bad input) for the launcher: the problem directory is on a file
    system every worker writes to (the shards go there)."""
    return os.path.join(problem.problem_dir(data_dir), ".beam-failures")


@contextlib.contextmanager
def reported(directory: str, order: tuple) -> Iterator[None]:
    """A UserError in the block (bad input named by file and place) is also written to `directory` as data,
    keyed by `order` (stage, then position), so the launcher prints it as the one line local datagen
    prints: a runner hands the launcher a worker's exception as a traceback's text at best."""
    try:
        yield
    except UserError as e:
        record_failure(directory, order, str(e))
        raise


def record_failure(directory: str, order: tuple, message: str) -> None:
    fileio.makedirs(directory)
    name = "-".join(f"{x:08d}" if isinstance(x, int) else str(x) for x in order) + ".json"
    fileio.write_json_atomic(os.path.join(directory, name), {"message": message})


def first_failure(directory: str) -> str | None:
    """The message of the first user's error the workers reported (by stage, then corpus position)."""
    if not fileio.exists(directory):
        return None
    names = sorted(n for n in fileio.listdir(directory) if n.endswith(".json"))  # zero-padded: sorted by order
    return fileio.read_json(os.path.join(directory, names[0]))["message"] if names else None


class _ProblemDoFn(beam.DoFn):
    """A DoFn holding the problem, rebuilt once per worker (DoFn.setup) from its spec."""

    def __init__(self, spec: ProblemRecipe, data_dir: str, tmp_dir: str):
        super().__init__()
        self.spec, self.data_dir, self.tmp_dir = spec, data_dir, tmp_dir
        self.problem: Problem | None = None

    def setup(self) -> None:
        import os
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        self.problem = self.spec.build()


class WriteShard(_ProblemDoFn):
    """One shard job -> one shard file written atomically; emits the shard's stats."""

    def __init__(self, spec: ProblemRecipe, data_dir: str, tmp_dir: str, seed: int, shuffled: bool):
        super().__init__(spec, data_dir, tmp_dir)
        self.seed, self.shuffled = seed, shuffled

    def process(self, keyed: tuple, checked: CorpusCheck) -> Iterator[dict]:
        """`checked`: the corpus check, decided before any shard (on an error no shard is written)."""
        if checked.error is not None:
            return
        (split, shard_id), grouped = keyed
        for job in grouped["job"]:
            with reported(failures_dir(self.problem, self.data_dir), (2, split, shard_id)):
                texts = None
                if self.shuffled:
                    docs = sorted(d for docs in grouped["docs"] for d in docs)  # (partition, position): corpus order
                    check_delivery(split, shard_id, docs, checked.sent.get((split, shard_id), 0))
                    texts = shuffle.GroupedTexts(split, shard_id, tuple(text for _, _, text in docs))
                yield self._write(job, texts)

    def _write(self, job: ShardJob, texts: shuffle.GroupedTexts | None) -> dict:
        stats = run_shard_job(self.problem, self.data_dir, self.tmp_dir, self.seed, job, texts)
        beam.metrics.Metrics.counter(_COUNTERS, "shards").inc()
        beam.metrics.Metrics.counter(_COUNTERS, "examples").inc(stats["count"])
        logging.info("datagen %s on Beam: shards: %s-%d of %d: %d examples in %.1fs", self.problem.name, job.split,
                     job.shard_id, job.num_shards, stats["count"], stats["seconds"])
        return stats


class WriteManifests(_ProblemDoFn):
    """The last stage: runs once, after all shard writes (its input is the ToList of their stats)."""

    def __init__(self, spec: ProblemRecipe, data_dir: str, tmp_dir: str, plan: GenerationPlan):
        super().__init__(spec, data_dir, tmp_dir)
        self.plan = plan

    def process(self, all_stats: list[dict]) -> Iterator[str]:
        yield from sorted(write_manifests(self.problem, self.data_dir, self.plan))


class ReadPartition(beam.DoFn):
    """A partition job: read one partition; each document keyed by the (split, shard) its text hashes to,
    with its corpus position (partition, index in it), grouped per key so that a partition emits one
    element per shard; its bad records (--skip_bad_records) to the output "bad", checked per file once
    every partition is read (`check_bad_records`), as local datagen checks them."""

    def __init__(self, corpus: shuffle.DocumentCorpus, shards: dict[str, int], num_partitions: int,
                 failures: str):
        super().__init__()
        self.corpus, self.shards, self.num_partitions, self.failures = corpus, shards, num_partitions, failures

    def process(self, part: shuffle.Partition) -> Iterator:
        start = time.time()
        groups: dict[tuple[str, int], list[tuple[int, int, str]]] = {}
        bad: list[tuple[str, str]] = []
        try:
            for i, (text, fixed) in enumerate(shuffle.partition_units(self.corpus, part, bad)):
                key = shuffle.assign(text, self.corpus.dev_fraction, self.shards, fixed)
                groups.setdefault(key, []).append((part.index, i, text))
        except UserError as e:  # bad input: data for the check stage, not a worker's failure
            yield beam.pvalue.TaggedOutput("bad", (part.index, part.path, bad, str(e), {}))
            return
        count = sum(map(len, groups.values()))
        beam.metrics.Metrics.counter(_COUNTERS, "partitions").inc()
        beam.metrics.Metrics.counter(_COUNTERS, "documents").inc(count)
        logging.info("datagen on Beam: shuffle: partition %d of %d read: %d documents in %.1fs", part.index + 1,
                     self.num_partitions, count, time.time() - start)
        yield beam.pvalue.TaggedOutput("bad", (part.index, part.path, bad, None,
                                               {key: len(docs) for key, docs in groups.items()}))
        yield from groups.items()


@dataclasses.dataclass(frozen=True)
class CorpusCheck:
    """What the shard stage learns once every partition is read: the corpus's error (None: good) and how
    many documents the partitions sent to each (split, shard)."""

    error: str | None
    sent: dict[tuple[str, int], int]


def check_corpus(read: list[tuple[int, str, list, str | None, dict]], failures: str) -> CorpusCheck:
    """After every partition: the first partition's error (corpus order), else each file's bad records
    against its --skip_bad_records (the error names the first past it). The error is kept in `failures`
    for the launcher (the shard stage then writes nothing)."""
    read = sorted(read, key=lambda r: r[0])
    message = next((error for *_, error, _ in read if error is not None), None)
    if message is None:
        try:
            corpus_formats.check_bad_records([(path, places) for _, path, places, *_ in read])
        except UserError as e:
            message = str(e)
    if message is not None:
        record_failure(failures, (1,), message)
    sent: collections.Counter = collections.Counter()
    for *_, counts in read:
        sent.update(counts)
    return CorpusCheck(message, dict(sent))


class IncompleteDeliveryError(UserError, RuntimeError):
    """The engine's shuffle gave a shard job other documents than the partitions sent it (seen on the
    DirectRunner with 2 worker processes: a partition's groups missing for some shards)."""


def check_delivery(split: str, shard: int, docs: list[tuple[int, int, str]], sent: int) -> None:
    """A shard is written from exactly the documents the partitions sent it, each once: the engine's shuffle
    delivering fewer, more or repeated ones fails the run, never writes a shard with other bytes."""
    unique = len({(part, i) for part, i, _ in docs})
    if unique != len(docs) or len(docs) != sent:
        raise IncompleteDeliveryError(
            f"shard {split}-{shard}: the runner's shuffle delivered {len(docs)} documents "
            f"({len(docs) - unique} repeated), the partitions sent {sent}; the shard was not written "
            f"(run again: the finished shards are kept)")


def pipeline_args(options: str | Sequence[str]) -> list[str]:
    """--beam_pipeline_options in either form users write: command-line arguments
    ("--runner=DirectRunner --direct_num_workers=2", as Beam's own programs take them) or TFDS's comma list
    ("runner=DirectRunner,direct_num_workers=2", as `tfds build --beam_pipeline_options` takes it), or a list."""
    if not isinstance(options, str):
        return list(options)
    args = shlex.split(options)
    if args and not any(a.startswith("-") for a in args):
        return ["--" + item.strip() for item in options.split(",") if item.strip()]
    return args


def pipeline_options(options: str | Sequence[str]) -> PipelineOptions:
    """--beam_pipeline_options (`pipeline_args`). With no runner in them, Beam's DirectRunner is used
    (in-process, one worker)."""
    return PipelineOptions(pipeline_args(options))


def build_pipeline(pipeline: beam.Pipeline, problem: Problem, data_dir: str, tmp_dir: str,
                   plan: GenerationPlan, shuffled: Shuffled | None = None) -> None:
    """Add the shuffle, shard and manifest stages of `plan` to `pipeline` (`shuffled`: the document
    corpus's partitions)."""
    spec = ProblemRecipe.of(problem)
    failures = failures_dir(problem, data_dir)
    jobs = (pipeline
            | "ShardJobs" >> beam.Create([((job.split, job.shard_id), job) for job in plan.jobs])
            | "Spread" >> beam.Reshuffle())
    if shuffled is not None:
        read = (pipeline
                | "Partitions" >> beam.Create(shuffled.partitions)
                | "SpreadPartitions" >> beam.Reshuffle()
                | "ReadPartitions" >> beam.ParDo(ReadPartition(shuffled.corpus, shuffled.shards,
                                                               len(shuffled.partitions), failures)
                                                 ).with_outputs("bad", main="docs"))
        documents = read.docs
        checked = (read.bad
                   | "AfterAllPartitions" >> beam.combiners.ToList()
                   | "CheckCorpus" >> beam.Map(check_corpus, failures))
    else:
        documents = pipeline | "NoDocuments" >> beam.Create([])
        checked = pipeline | "NoCorpus" >> beam.Create([CorpusCheck(None, {})])
    _ = ({"job": jobs, "docs": documents}
         | "ShuffleToShards" >> beam.CoGroupByKey()
         | "WriteShards" >> beam.ParDo(WriteShard(spec, data_dir, tmp_dir, plan.seed, shuffled is not None),
                                       beam.pvalue.AsSingleton(checked))
         | "AfterAllShards" >> beam.combiners.ToList()
         | "WriteManifests" >> beam.ParDo(WriteManifests(spec, data_dir, tmp_dir, plan)))


def generate_data(problem: Problem, data_dir: str, tmp_dir: str, *, options: str | Sequence[str] = "",
                  seed: int = 0, overwrite: bool = False, num_shards: dict[str, int] | None = None,
                  partition_mb: float = shuffle.DEFAULT_PARTITION_MB) -> dict[str, dict]:
    """Plan here, generate on the Beam runner, return {split: manifest} of the complete splits.

    Waits for the pipeline (Beam's `with` block calls run().wait_until_finish()); the manifests are
    read back from data_dir, where the pipeline's last stage wrote them."""
    with generation_lock(problem, data_dir):  # one writer per problem directory, as local datagen
        return _generate_locked(problem, data_dir, tmp_dir, options, seed, overwrite, num_shards, partition_mb)


def log_stages(problem: Problem, result: beam.runners.runner.PipelineResult, seconds: float, jobs: int) -> None:
    """One line per stage from the workers' counters (a stage's rate over the pipeline's time: the stages
    overlap on the engine); the workers log each partition and shard as they finish them."""
    counts: dict[str, int] = {}
    for counter in result.metrics().query(beam.metrics.MetricsFilter().with_namespace(_COUNTERS))["counters"]:
        counts[counter.key.metric.name] = counter.committed or counter.attempted or 0
    seconds = max(seconds, 1e-9)
    logging.info("datagen %s on Beam: shuffle (partitions read): %d partitions, %d documents, %.0f documents/s",
                 problem.name, counts.get("partitions", 0), counts.get("documents", 0),
                 counts.get("documents", 0) / seconds)
    logging.info("datagen %s on Beam: shards: %d/%d, %d examples, %.0f examples/s", problem.name,
                 counts.get("shards", 0), jobs, counts.get("examples", 0), counts.get("examples", 0) / seconds)


def _generate_locked(problem: Problem, data_dir: str, tmp_dir: str, options: str | Sequence[str], seed: int,
                     overwrite: bool, num_shards: dict[str, int] | None, partition_mb: float) -> dict[str, dict]:
    plan = plan_generation(problem, data_dir, tmp_dir, seed=seed, overwrite=overwrite,
                           num_shards=num_shards)
    if not plan.jobs:  # every shard exists already: only manifests (if any) are missing
        return write_manifests(problem, data_dir, plan)
    start = time.time()
    # Beam logs every worker-harness event at INFO (through the launcher); keep its warnings only.
    std_logging.getLogger("apache_beam").setLevel(std_logging.WARNING)
    failures = failures_dir(problem, data_dir)
    fileio.rmtree(failures) if fileio.exists(failures) else None  # a killed run's
    try:
        shuffled = plan_shuffle(problem, data_dir, tmp_dir, plan, partition_mb, spill=False)
        logging.info("datagen %s on Beam: %d partitions, %d shard jobs", problem.name,
                     len(shuffled.partitions) if shuffled else 0, len(plan.jobs))
        with beam.Pipeline(options=pipeline_options(options)) as pipeline:
            build_pipeline(pipeline, problem, data_dir, tmp_dir, plan, shuffled)
    except BaseException:
        message = first_failure(failures)
        if fileio.exists(failures):
            fileio.rmtree(failures)
        if message is not None:
            raise UserError(message) from None
        raise
    if PipelineState.is_terminal(pipeline.result.state):  # a detached pipeline's failures and counters come later
        message = first_failure(failures)
        if message is not None:  # bad input: the pipeline wrote no shard
            fileio.rmtree(failures)
            raise UserError(message)
        log_stages(problem, pipeline.result, time.time() - start, len(plan.jobs))
    logging.info("datagen %s on Beam: pipeline finished in %.1fs", problem.name, time.time() - start)
    manifests = {}
    for split in (s for s, _ in plan.splits):
        try:
            manifests[split] = problem.read_manifest(data_dir, split)
        except FileNotFoundError:
            pass
    return manifests
