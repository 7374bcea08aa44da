"""textrain-datagen: raw text -> sharded TFRecords + manifest for a registered problem.

    textrain-datagen --problem=bert_pretrain --input_file=corpus.txt --data_dir=data --num_workers=2

Runs the problem's vocabulary step first (`prepare`, reused when it exists), then every split's shards
in `--num_workers` processes; with `--num_tasks`/`--task_id` several machines split the shards between
them (run `--vocab_only` once first so they share one vocabulary). Problem settings are flags named
after the problem's HParams fields (framework/flags.py).
"""
from __future__ import annotations

import os
import sys
import time

from absl import app, flags

from textrain.framework import cli, errors, fileio, flag_aliases, lazy_tf, registry
from textrain.framework import flags as problem_flags

FLAGS = flags.FLAGS

flags.DEFINE_string("problem", None, "Registered problem name.")
flags.DEFINE_string("data_dir", None, "Output directory (a folder per problem is made in it).")
flags.DEFINE_string("tmp_dir", "", "Raw input directory (problems that read fixed file names).")
flags.DEFINE_integer("num_workers", 1, "Local worker processes (one output shard is the unit of work).")
flags.DEFINE_integer("task_id", None, "This machine's index when --num_tasks machines share the work.")
flags.DEFINE_integer("num_tasks", 1, "Machines sharing the shards (shard i goes to task i % num_tasks).")
flags.DEFINE_integer("seed", 0, "Decides every random choice; same seed + input = identical shards.")
flags.DEFINE_integer("num_shards", None, "Train shards (default: the problem's choice).")
flags.DEFINE_bool("overwrite", False, "Regenerate even complete splits.")
flags.DEFINE_bool("vocab_only", False, "Only build the vocabulary (run once before multi-task datagen).")
flags.DEFINE_string("usr_dir", None, "Directory (Python package) of your own problems to import.")
flags.DEFINE_enum("runner", "local", ["local", "beam"],
                  "local: --num_workers processes on this machine; beam: an Apache Beam pipeline "
                  "(pip install 'textrain[beam]'; docs/BEAM.md), configured by --beam_pipeline_options.")
flags.DEFINE_string("beam_pipeline_options", "",
                    "With --runner=beam: Beam pipeline options as one string, e.g. \"--runner=DirectRunner "
                    "--direct_num_workers=2 --direct_running_mode=multi_processing\" (docs/BEAM.md).")
flags.DEFINE_float("partition_mb", 64, "The corpus is read once, in partitions of about this many MB of a "
                   "plain text file (a compressed or structured file is one partition), each by one job.",
                   lower_bound=0.001)
flags.DEFINE_float("claim_timeout_s", 600, "With --num_tasks: a corpus partition claimed by a task whose claim "
                   "has not been renewed for this many seconds (a task of another machine that died or hangs) "
                   "is read by another task. Keep it above the clock skew between the machines.",
                   lower_bound=1)
flags.DEFINE_bool("verify", False, "Check every record's CRC and every shard's count against the manifests "
                  "and regenerate only the shards that are missing or damaged (same settings and --seed "
                  "as the original run).")


def _summary(problem, data_dir: str, manifests: dict, seconds: float) -> str:
    lines = [f"{problem.name}: wrote to {problem.problem_dir(data_dir)} in {seconds:.1f}s"]
    for split, m in manifests.items():
        size = sum(int(os_stat(os.path.join(problem.problem_dir(data_dir), s["file"]))) for s in m["shards"])
        lines.append(f"  {split}: {m['num_examples']} examples in {len(m['shards'])} shards, "
                     f"{size / 2**20:.1f} MiB")
    return "\n".join(lines)


def os_stat(path: str) -> int:
    return fileio.stat(path).length


def _generate_with_beam(problem, num_shards: dict | None) -> dict:
    """--runner=beam (framework/beam_datagen.py): Beam is imported here only, so the core package
    does not need it. The runner spreads the shards itself: --num_workers/--task_id do not apply."""
    if FLAGS.num_workers != 1 or FLAGS.task_id is not None or FLAGS.num_tasks != 1:
        raise errors.UserError("--num_workers, --task_id and --num_tasks are for --runner=local; with "
                               "--runner=beam set workers in --beam_pipeline_options (e.g. "
                               "--direct_num_workers=2, or your Flink/Spark/Dataflow cluster's)")
    try:
        from textrain.framework import beam_datagen
    except ImportError as e:
        raise errors.UserError(f"--runner=beam needs Apache Beam ({e}); install it with "
                               f"pip install 'textrain[beam]'") from None
    return beam_datagen.generate_data(problem, FLAGS.data_dir, FLAGS.tmp_dir,
                                      options=FLAGS.beam_pipeline_options, seed=FLAGS.seed,
                                      overwrite=FLAGS.overwrite, num_shards=num_shards,
                                      partition_mb=FLAGS.partition_mb)


def _remove_if_left_empty(directory: str, existed: bool) -> None:
    """After a failed run: a directory this run created and left with nothing but its own lock files
    (names starting with '.') goes too, so a failure leaves nothing behind."""
    if existed or not fileio.isdir(directory):
        return
    if all(name.startswith(".") for name in fileio.listdir(directory)):
        fileio.rmtree(directory)


def main(argv: list[str]) -> None:
    del argv
    if not FLAGS.problem or not FLAGS.data_dir:
        raise app.UsageError("--problem and --data_dir are required")
    if FLAGS.num_workers < 1:
        raise app.UsageError(f"--num_workers must be >= 1, got {FLAGS.num_workers}")
    try:
        cls = registry.problems.get(FLAGS.problem)
    except KeyError as e:
        raise app.UsageError(str(e.args[0])) from None
    try:  # settings checked by the problem (ranges, combinations): one line naming the flag
        problem = cls(problem_flags.problem_hparams_from_flags(cls))
    except errors.UserError:
        raise
    except ValueError as e:
        raise errors.UserError(str(e)) from None
    problem_dir = problem.problem_dir(FLAGS.data_dir)
    existed = fileio.isdir(problem_dir)
    data_dir_existed = fileio.isdir(FLAGS.data_dir)
    try:
        _generate(problem)
    except BaseException:
        _remove_if_left_empty(problem_dir, existed)
        _remove_if_left_empty(FLAGS.data_dir, data_dir_existed)
        raise


def _generate(problem) -> None:
    start = time.time()
    if FLAGS.vocab_only:
        problem.prepare(FLAGS.data_dir, FLAGS.tmp_dir)
        print(f"{problem.name}: vocabulary ready in {problem.problem_dir(FLAGS.data_dir)}")
        return
    num_shards = {"train": FLAGS.num_shards} if FLAGS.num_shards else None
    try:
        if FLAGS.runner == "beam":
            if FLAGS.verify:
                raise errors.UserError("--verify runs with --runner=local only (it reads every record here); "
                                       "verify first, then run the Beam pipeline")
            manifests = _generate_with_beam(problem, num_shards)
        else:
            manifests = problem.generate_data(FLAGS.data_dir, FLAGS.tmp_dir, num_workers=FLAGS.num_workers,
                                              task_id=FLAGS.task_id, num_tasks=FLAGS.num_tasks,
                                              seed=FLAGS.seed, overwrite=FLAGS.overwrite, num_shards=num_shards,
                                              verify=FLAGS.verify, partition_mb=FLAGS.partition_mb,
                                              claim_timeout_s=FLAGS.claim_timeout_s)
    except (ValueError, FileNotFoundError) as e:  # bad input: a clear message, no traceback
        raise errors.UserError(str(e)) from None
    print(_summary(problem, FLAGS.data_dir, manifests, time.time() - start))


def run() -> None:
    lazy_tf.quiet_start(sys.argv, import_now=False)  # datagen may need no TensorFlow at all
    try:  # the originals' flag names (create_pretraining_data.py, data_utils.py, ...): framework/flag_aliases.py
        sys.argv = flag_aliases.translate_argv(sys.argv, flag_aliases.DATAGEN)
    except ValueError as e:
        cli.fail("textrain-datagen", str(e))
    registry.import_builtins(models=False)  # datagen needs no model: no TensorFlow import either
    registry.import_usr_dir(registry.usr_dir_from_argv(sys.argv))
    problem_flags.define_problem_flags()
    cli.run_main("textrain-datagen", main)


if __name__ == "__main__":
    run()
