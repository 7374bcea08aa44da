"""Benchmark: is the input pipeline ever the bottleneck? Each problem's training `dataset()` vs the step.

    python benchmarks/bench_input_pipeline.py                          # every problem, tiny steps, BERT-base step
    python benchmarks/bench_input_pipeline.py --problems=xlnet_pretrain --base=none --seconds=3

For each registered problem whose records the trainers read for training (bert_pretrain, electra_pretrain,
xlnet_pretrain, tsv_classification — the GLUE tasks share its reading code —, squad_v1, translate_enzh_sub8k;
race is left out: no RACE-format data in ../shared/corpora), the run
1. makes a small real dataset from ../shared/corpora with the real CLI (`python -m framework.datagen ...`,
   once, kept in --work_dir);
2. measures `problem.dataset("train", ...)` — the trainers' own reading path, at the batch size a user trains
   with (table below) — in a fresh process pinned to ONE core (os.sched_setaffinity) and in one with every
   core: examples per second of wall time after a warm-up, and CPU seconds per 1000 examples;
3. measures the training step's consumption in a fresh process: the model the trainers build for that problem
   (`registry.models.get(name).from_settings`, tiny: 2 layers, hidden 128 where the family has it),
   forward + backward + Adam on a real batch of that dataset held in memory (so the pipeline is not in it),
   examples/s after warm-up steps; and the BERT-base shapes (L128, batch 32) for the problems in --base.
Headroom = pipeline ex/s on one core / step ex/s: above 1, one core of input feeds the step with room to
spare. The machine is shared (2 cores, other engineers' jobs): the load average is printed.
"""
from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
CORPORA = os.path.join(os.path.dirname(REPO), "shared", "corpora")


@dataclasses.dataclass
class Case:
    """A problem, how its data is made, how a user reads it and which model trains on it."""

    problem: str
    datagen: list[str]                 # flags after --problem/--data_dir ({work}, {corpus} ... filled in)
    batch_size: int
    model: str
    tiny: dict                         # model flags of the tiny model
    base: dict                         # model flags of the base shapes
    params: dict = dataclasses.field(default_factory=dict)   # extra DataParams (batching, max_length)
    problem_flags: dict = dataclasses.field(default_factory=dict)  # hparams the reading side needs


CASES = {
    "bert_pretrain": Case(
        "bert_pretrain", ["--input_file={en}", "--vocab_size=8000", "--dupe_factor=2", "--max_seq_length=128",
                          "--num_workers=2"], 32, "bert", {"model_size": "tiny"}, {"model_size": "base"}),
    "electra_pretrain": Case(
        "electra_pretrain", ["--input_file={en}", "--vocab_size=8000", "--max_seq_length=128", "--num_workers=2"],
        128, "electra", {"electra_config_file": "{work}/electra_tiny.json"}, {"model_size": "base"}),
    "xlnet_pretrain": Case(
        "xlnet_pretrain", ["--input_file={en}", "--vocab_size=8000", "--seq_len=128", "--reuse_len=64",
                           "--num_predict=21", "--bsz_per_host=32", "--num_core_per_host=1", "--num_workers=2"],
        32, "xlnet", {"n_layer": 2, "d_model": 128, "n_head": 2, "d_head": 64, "d_inner": 512, "mem_len": 64},
        {"mem_len": 64},
        problem_flags={"seq_len": 128, "reuse_len": 64, "num_predict": 21, "bsz_per_host": 32,
                       "num_core_per_host": 1}),
    "tsv_classification": Case(
        "tsv_classification", ["--train_file={cls}", "--dev_fraction=0.1", "--vocab_file={vocab}",
                               "--max_seq_length=128"], 32, "bert_classifier", {"model_size": "tiny"},
        {"model_size": "base"}),
    "squad_v1": Case(
        "squad_v1", ["--train_file={squad}", "--vocab_file={vocab}", "--max_seq_length=384"], 32, "bert_squad",
        {"model_size": "tiny"}, {"model_size": "base"}),
    "translate_enzh_sub8k": Case(
        "translate_enzh_sub8k", ["--tmp_dir={parallel}", "--num_workers=2"], 4096, "transformer",
        {"hparams_set": "transformer_tiny"}, {"hparams_set": "transformer_base"},
        params={"batching": "tokens", "max_length": 256}),
}
ELECTRA_TINY = {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 512,
                "embedding_size": 128, "generator_hidden_size": 0.25, "max_position_embeddings": 512,
                "type_vocab_size": 2, "hidden_act": "gelu"}


# ----------------------------------------------------------------------------------------------- #
# data
# ----------------------------------------------------------------------------------------------- #
def inputs(work: str, mb: float) -> dict[str, str]:
    """Small real inputs from ../shared/corpora: an English text, a TSV, the SQuAD-like file, 20k parallel pairs."""
    from benchmarks.lib import same_run
    os.makedirs(work, exist_ok=True)
    en = same_run.plain_corpus(os.path.join(work, f"en_{mb:g}mb.txt"), mb)
    parallel = os.path.join(work, "parallel")
    if not os.path.exists(os.path.join(parallel, "train.zh")):
        os.makedirs(parallel, exist_ok=True)
        for lang in ("en", "zh"):
            with gzip.open(os.path.join(CORPORA, "parallel", f"train.{lang}.gz"), "rt", encoding="utf-8") as f:
                lines = [next(f) for _ in range(20000)]
            with open(os.path.join(parallel, f"train.{lang}.tmp"), "w", encoding="utf-8") as f:
                f.writelines(lines)
            os.replace(os.path.join(parallel, f"train.{lang}.tmp"), os.path.join(parallel, f"train.{lang}"))
    return {"en": en, "cls": os.path.join(CORPORA, "cls", "movie_sentences_pang_lee.tsv.gz"),
            "squad": os.path.join(CORPORA, "qa", "squad_like.json"), "parallel": parallel, "work": work}


def make_data(case: Case, paths: dict, data_dir: str) -> None:
    """The real datagen CLI, once per problem (a complete split is skipped by datagen itself)."""
    flags = [f.format(**paths) for f in case.datagen]
    cmd = [sys.executable, "-m", "textrain.framework.datagen", f"--problem={case.problem}", f"--data_dir={data_dir}", *flags]
    start = time.time()
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"datagen {case.problem} failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    print(f"  datagen {case.problem}: {time.time() - start:.0f} s", flush=True)


# ----------------------------------------------------------------------------------------------- #
# child processes
# ----------------------------------------------------------------------------------------------- #
def _problem(case: Case, data_dir: str):
    from textrain.framework import registry
    registry.import_builtins()
    kind = registry.problems.get(case.problem)
    hparams = dataclasses.replace(kind.HParams(), **case.problem_flags)
    problem = kind(hparams)
    if hasattr(problem, "bind_data"):
        problem.bind_data(data_dir)
    return problem


def _dataset(case: Case, problem, data_dir: str):
    from textrain.framework.problem import DataParams
    params = DataParams(batch_size=case.batch_size, seed=1, **case.params)
    return problem.dataset("train", data_dir, params)


def _examples(batch: dict) -> int:
    first = next(iter(batch.values()))
    return int(first.shape[0])


def child_pipeline(case: Case, data_dir: str, seconds: float, cores: str) -> dict:
    if cores == "1":
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    import tensorflow as tf  # noqa: F401  (imported after pinning, so its thread pools see one core)
    problem = _problem(case, data_dir)
    it = iter(_dataset(case, problem, data_dir))
    for _ in range(5):  # warm-up: graph tracing, file opening, shuffle buffer filling
        next(it)
    n = batches = 0
    wall0, cpu0 = time.perf_counter(), time.process_time()
    while time.perf_counter() - wall0 < seconds or batches < 20:
        n += _examples(next(it))
        batches += 1
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return {"examples_per_s": n / wall, "cpu_ms_per_1000": cpu / n * 1e6, "batches": batches,
            "examples": n, "cores": len(os.sched_getaffinity(0))}


def child_step(case: Case, data_dir: str, size: str, warmup: int, steps: int) -> dict:
    import types

    import tensorflow as tf

    from textrain.framework import registry
    from textrain.models.base import weighted_loss
    from textrain.trainers.trainer_flags import model_settings_from_flags

    problem = _problem(case, data_dir)
    manifest = problem.read_manifest(data_dir, "train")
    flags = dict(case.tiny if size == "tiny" else case.base)
    flags = {k: (v.format(work=os.path.dirname(data_dir)) if isinstance(v, str) else v)
             for k, v in flags.items()}
    if "electra_config_file" in flags:  # the tiny ELECTRA's json, with the data's vocabulary size
        with open(flags["electra_config_file"], "w") as f:
            json.dump(dict(ELECTRA_TINY, vocab_size=int(manifest["settings"]["vocab_size"])), f)
    # As the trainers build it: its one constructor, settings from the flags (trainers/trainer_flags.py).
    model = registry.models.get(case.model).from_settings(
        manifest=manifest, **model_settings_from_flags(types.SimpleNamespace(**flags)))
    batch = next(iter(_dataset(case, problem, data_dir)))
    n = _examples(batch)
    optimizer = tf.keras.optimizers.Adam(1e-4)
    state = model.initial_state(n)

    @tf.function
    def train_step(features, state):
        with tf.GradientTape() as tape:
            out = model.step_output(features, state, training=True)
            loss = weighted_loss(out.losses)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss, out.state

    for _ in range(warmup):
        loss, state = train_step(batch, state)
        float(loss)
    times = []
    cpu0 = time.process_time()
    for _ in range(steps):
        start = time.perf_counter()
        loss, state = train_step(batch, state)
        float(loss)
        times.append(time.perf_counter() - start)
    step_s = sum(times) / len(times)
    cpu = (time.process_time() - cpu0) / steps
    return {"examples_per_s": n / step_s, "step_s": step_s, "cpu_ms_per_1000": cpu / n * 1e6, "examples": n,
            "loss": float(loss)}


def run_child(kind: str, case: str, data_dir: str, args: argparse.Namespace, extra: list[str]) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--_child", kind, "--_case", case, "--_data_dir", data_dir,
           "--seconds", str(args.seconds), "--warmup", str(args.warmup), "--steps", str(args.steps), *extra]
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if out.returncode:
        return {"error": (out.stderr or out.stdout).strip().splitlines()[-1][:160]}
    return json.loads(out.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------------------------- #
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", default=",".join(CASES))
    ap.add_argument("--base", default="bert_pretrain", help="problems whose step is also timed at base shapes "
                    "('none': none; a base step is ~45 s on a 2-core CPU)")
    ap.add_argument("--work_dir", default="/tmp/textrain_bench_input_pipeline")
    ap.add_argument("--mb", type=float, default=2, help="size of the English corpus for the pretraining data")
    ap.add_argument("--seconds", type=float, default=5, help="timed seconds of reading per measurement")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps (tracing)")
    ap.add_argument("--steps", type=int, default=3, help="timed steps (tiny; base times 1)")
    ap.add_argument("--_child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--_case", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--_data_dir", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--_cores", default="all", help=argparse.SUPPRESS)
    ap.add_argument("--_size", default="tiny", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._child:
        case = CASES[args._case]
        if args._child == "pipeline":
            result = child_pipeline(case, args._data_dir, args.seconds, args._cores)
        else:
            steps = args.steps if args._size == "tiny" else 1
            result = child_step(case, args._data_dir, args._size, args.warmup if args._size == "tiny" else 1,
                                steps)
        print(json.dumps(result))
        return
    if not os.path.isdir(CORPORA):
        sys.exit(f"{CORPORA} not found: the benchmark reads its data from ../shared/corpora")

    paths = inputs(args.work_dir, args.mb)
    names = [n for n in args.problems.split(",") if n]
    base = set() if args.base == "none" else set(args.base.split(","))
    print(f"{os.cpu_count()} cores, machine shared (load average {os.getloadavg()[0]:.1f}); work dir {args.work_dir}")
    if {"tsv_classification", "squad_v1"} & set(names):  # a WordPiece vocab for the task problems
        vocab_dir = os.path.join(args.work_dir, "data")
        if "bert_pretrain" not in names:
            make_data(CASES["bert_pretrain"], paths, vocab_dir)
        paths["vocab"] = os.path.join(vocab_dir, "bert_pretrain", "vocab.txt")
    rows = []
    for name in names:
        case = CASES[name]
        data_dir = os.path.join(args.work_dir, "data")
        if name in ("tsv_classification", "squad_v1") and "vocab" not in paths:
            paths["vocab"] = os.path.join(data_dir, "bert_pretrain", "vocab.txt")
        make_data(case, paths, data_dir)
        one = run_child("pipeline", name, data_dir, args, ["--_cores", "1"])
        every = run_child("pipeline", name, data_dir, args, ["--_cores", "all"])
        tiny = run_child("step", name, data_dir, args, ["--_size", "tiny"])
        big = run_child("step", name, data_dir, args, ["--_size", "base"]) if name in base else None
        rows.append((name, case, one, every, tiny, big))
        print(f"  {name}: pipeline 1 core {one}, all cores {every}, tiny step {tiny}, base {big}", flush=True)

    def rate(d: dict | None) -> str:
        if d is None:
            return "-"
        return "error" if "error" in d else f"{d['examples_per_s']:,.1f}"

    print(f"\n{'problem':21s} {'batch':>8s} {'pipeline ex/s':>13s} {'all cores':>9s} {'CPU ms/1k':>9s} "
          f"{'step ex/s tiny':>14s} {'base':>5s} {'CPU ms/1k tiny':>14s} {'headroom tiny':>13s} {'(CPU)':>7s} "
          f"{'base':>7s}")
    def ok(*ds: dict | None) -> bool:
        return all(d and "error" not in d for d in ds)

    def num(value: float, good: bool, suffix: str = "") -> str:
        return f"{value:,.0f}{suffix}" if good else "-"

    for name, case, one, every, tiny, big in rows:
        unit = " tokens" if case.params.get("batching") == "tokens" else ""
        print(f"{name:21s} {str(case.batch_size) + unit:>8s} {rate(one):>13s} {rate(every):>9s} "
              f"{num(one.get('cpu_ms_per_1000', 0), ok(one)):>9s} {rate(tiny):>14s} {rate(big):>5s} "
              f"{num(tiny.get('cpu_ms_per_1000', 0), ok(tiny)):>14s} "
              f"{num(ok(one, tiny) and one['examples_per_s'] / tiny['examples_per_s'], ok(one, tiny), 'x'):>13s} "
              f"{num(ok(one, tiny) and tiny['cpu_ms_per_1000'] / one['cpu_ms_per_1000'], ok(one, tiny), 'x'):>7s} "
              f"{num(ok(one, big) and one['examples_per_s'] / big['examples_per_s'], ok(one, big), 'x'):>7s}")
    print("(pipeline: problem.dataset('train') pinned to ONE core [and on all cores], examples/s of wall time; "
          "step: forward + backward + Adam on a real batch held in memory; headroom = one-core pipeline ex/s / "
          "step ex/s, (CPU) = step CPU per example / pipeline CPU per example (less distorted by a loaded "
          "machine); translate batches hold 4096 tokens)")
    for name, *_, tiny, big in rows:
        for what, d in (("tiny", tiny), ("base", big)):
            if d and "error" in d:
                print(f"{name} {what} step: {d['error']}")


if __name__ == "__main__":
    main()
