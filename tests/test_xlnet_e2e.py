"""XLNet end to end: problems/xlnet_pretrain.py + models/xlnet.py + trainers/core.py + trainers/train_gpu.py.

What is proved, on records made from tests/data/austen_emma.txt (seq_len 64, reuse_len 32, num_predict 10,
bsz_per_host 4, num_core_per_host 2, bi_data) and a MirroredStrategy over the 2 logical CPUs of conftest.py:
- Row continuity through the real trainer (both input modes): a probe model keeps, per replica, every batch
  it received. Replica r at step t holds exactly rows [2r, 2r+1] of host batch t in file order (the data's
  per-core slice), the first of them forward text and the second reversed text, and at step t+1 it holds the
  rows that continue them: batch t's segment A is the start of batch t+1's reuse part, row by row, and the
  reuse parts of all steps decode to one contiguous passage of the novel.
- Each replica gets back its own memories: the real XLNetPretrainer trained with learning rate 0 and no
  dropout; each replica's memories equal a host replay of that replica's rows only (and differ from the
  other replica's replay and from a replay reset at a host-loop boundary). `mem_reset="every_loop"` restarts
  them from zeros at the start of a host loop.
- The trainer's CLI (its `main`, in-process) refuses flags that disagree with the manifest or a replica count
  that does not match the data's per-core layout, naming the values.
- Slow: the datagen CLI and `python -m trainers.train_gpu` as real processes, 1200 steps of a tiny XLNet
  (mem_len 32, 2 replicas): the mean loss of the last 200 steps is well below that of the first 200 AND below
  the unigram entropy of the targets (the model uses context), a checkpoint exists, a disagreeing flag is
  refused by the real process, and the figures are printed (run with -s to see them).
"""
from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers import cli_env

from textrain.framework.problem import DataParams
from textrain.models import xlnet
from textrain.models.base import StepOutput, Term, TrainableModel
from textrain.problems import xlnet_pretrain as xp
from textrain.trainers import core, optimization, strategy
from textrain.trainers.strategy import input_context, make_strategy
from textrain.trainers.train_config import TrainConfig

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
EMMA = os.path.join(HERE, "data", "austen_emma.txt")
SEQ_LEN, REUSE_LEN, NUM_PREDICT, BSZ_PER_HOST, CORES = 64, 32, 10, 4, 2
ROWS_PER_REPLICA = BSZ_PER_HOST // CORES
DATA_FLAGS = [f"--seq_len={SEQ_LEN}", f"--reuse_len={REUSE_LEN}", f"--num_predict={NUM_PREDICT}",
              f"--bsz_per_host={BSZ_PER_HOST}", f"--num_core_per_host={CORES}", "--bi_data"]
PROBE_STEPS = 6
FIRST_PLAIN_ID = 9  # ids below are XLNet's special symbols (<unk> 0 ... <eop> 8)


def _hparams(**overrides) -> xp.XlnetPretrainHParams:
    base = dict(input_file=EMMA, vocab_size=500, seq_len=SEQ_LEN, reuse_len=REUSE_LEN, num_predict=NUM_PREDICT,
                bsz_per_host=BSZ_PER_HOST, num_core_per_host=CORES, bi_data=True)
    base.update(overrides)
    return xp.XlnetPretrainHParams(**base)


_make_strategy = make_strategy  # the real one (the CLI tests patch make_strategy)


@functools.lru_cache(maxsize=None)
def two_replicas() -> tf.distribute.Strategy:
    # make_strategy hands out one MirroredStrategy per process (trainers/core.py), shared with other test files.
    return _make_strategy("mirrored", 2)


@functools.lru_cache(maxsize=None)
def one_device() -> tf.distribute.Strategy:
    return _make_strategy("one_device", 0)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """(problem, data_dir): records in 2 shards and the SentencePiece model trained by prepare()."""
    root = tmp_path_factory.mktemp("xlnet_e2e")
    problem = xp.XlnetPretrain(_hparams())
    data_dir = str(root / "data")
    problem.generate_data(data_dir, str(root / "tmp"), num_shards={"train": 2}, seed=0)
    return problem, data_dir


def _dataset_fn(problem: xp.XlnetPretrain, data_dir: str, global_batch: int = BSZ_PER_HOST):
    params = DataParams(batch_size=global_batch, seed=3)  # seeded: the permutations are reproducible
    return lambda ctx: problem.dataset("train", data_dir, params, input_context=ctx)


def _records_in_file_order(problem: xp.XlnetPretrain, data_dir: str, n: int) -> dict[str, np.ndarray]:
    """The first n records as written (shards in manifest order), parsed without the pipeline."""
    spec = problem.example_reading_spec()
    ds = tf.data.TFRecordDataset(problem.data_files(data_dir, "train")).take(n)
    parsed = [tf.io.parse_single_example(r, spec) for r in ds]
    return {k: np.stack([p[k].numpy() for p in parsed]) for k in ("input", "seg_id")}


# ------------------------------------------------------------------------------------- row continuity
class StreamProbe(TrainableModel):
    """Keeps, as per-replica state, the input_k and seg_id of every batch its replica received."""

    def __init__(self):
        super().__init__(name="probe")
        self.scale = self.add_weight(name="scale", shape=(), initializer="ones")

    def initial_state(self, batch_size):
        return {"input_k": tf.zeros([PROBE_STEPS, batch_size, SEQ_LEN], tf.int32),
                "seg_id": tf.zeros([PROBE_STEPS, batch_size, SEQ_LEN], tf.int32),
                "step": tf.zeros([], tf.int32)}

    def step_output(self, features, state, training):
        t = state["step"]

        def put(buffer, value):
            return tf.tensor_scatter_nd_update(buffer, [[t]], tf.cast(value, tf.int32)[None])

        count = tf.reduce_sum(features["target_mask"])
        return StepOutput(losses={"probe": Term(tf.square(self.scale) * count, count)}, metrics={},
                          state={"input_k": put(state["input_k"], features["input_k"]),
                                 "seg_id": put(state["seg_id"], features["seg_id"]), "step": t + 1})


def segment_a(input_k: np.ndarray, seg_id: np.ndarray) -> np.ndarray:
    """Segment A of a record: it starts where the reuse part ends, i.e. where the next batch's reuse part
    starts in the same stream (seg_id 0 covers the reuse part, A and A's <sep>)."""
    a_len = int((seg_id == 0).sum()) - REUSE_LEN - 1
    return input_k[REUSE_LEN:REUSE_LEN + a_len]


def continues(prev_input, prev_seg, next_input) -> bool:
    a = segment_a(prev_input, prev_seg)
    return len(a) > 0 and np.array_equal(next_input[:len(a)], a[:REUSE_LEN])


def _passage(encoder, ids) -> str:
    return " ".join(encoder.decode([int(i) for i in ids if i >= FIRST_PLAIN_ID]).split())


@pytest.mark.parametrize("input_mode", ["host", "distributed"])
def test_each_replica_receives_its_cores_rows_and_they_continue(data, tmp_path, input_mode):
    problem, data_dir = data
    trainer = core.Trainer(
        two_replicas(), StreamProbe, lambda: optimization.create_optimizer(0.0, 100, 0),
        _dataset_fn(problem, data_dir),
        TrainConfig(model_dir=str(tmp_path / "run"), num_train_steps=PROBE_STEPS, iterations_per_loop=3,
                         global_batch_size=BSZ_PER_HOST, input_mode=input_mode))
    trainer.train()
    local = trainer.strategy.experimental_local_results
    got = [v.numpy() for v in local(trainer._state_vars["input_k"])]
    segs = [v.numpy() for v in local(trainer._state_vars["seg_id"])]
    assert [int(v.numpy()) for v in local(trainer._state_vars["step"])] == [PROBE_STEPS] * CORES

    # Replica r, step t: rows [2r, 2r+1] of host batch t, in the order the generator wrote them.
    records = _records_in_file_order(problem, data_dir, PROBE_STEPS * BSZ_PER_HOST)
    for r in range(CORES):
        for t in range(PROBE_STEPS):
            rows = slice(t * BSZ_PER_HOST + r * ROWS_PER_REPLICA, t * BSZ_PER_HOST + (r + 1) * ROWS_PER_REPLICA)
            np.testing.assert_array_equal(got[r][t], records["input"][rows], err_msg=f"replica {r} step {t}")
            np.testing.assert_array_equal(segs[r][t], records["seg_id"][rows])

    # Row j of replica r at step t+1 continues row j of replica r at step t (same stream) ...
    for r in range(CORES):
        for j in range(ROWS_PER_REPLICA):
            for t in range(PROBE_STEPS - 1):
                assert continues(got[r][t, j], segs[r][t, j], got[r][t + 1, j]), (r, j, t)
    # ... which is not true of the other replica's rows (the check discriminates).
    crossed = [continues(got[0][t, j], segs[0][t, j], got[1][t + 1, j])
               for t in range(PROBE_STEPS - 1) for j in range(ROWS_PER_REPLICA)]
    assert not any(crossed)

    # Each replica's slice is [forward | backward]: the reuse parts of all steps are one passage of the
    # novel, read forwards in row 0 and backwards in row 1 (what the model's bi_data halves assume).
    text = " ".join(open(EMMA, encoding="utf-8").read().split())
    encoder = problem.encoder(data_dir)
    for r in range(CORES):
        forward = np.concatenate([got[r][t, 0, :REUSE_LEN] for t in range(PROBE_STEPS)])
        backward = np.concatenate([got[r][t, 1, :REUSE_LEN] for t in range(PROBE_STEPS)])
        assert _passage(encoder, forward) in text, r
        assert _passage(encoder, backward[::-1]) in text, r
        assert _passage(encoder, backward) not in text, r


# ------------------------------------------------------------------------------ per-replica memories
def _tiny_config(n_token: int) -> xlnet.XLNetConfig:
    # mem_len > reuse_len: after two steps the memory holds tokens of both, so carrying is visible at layer 0.
    return xlnet.XLNetConfig(n_layer=2, d_model=32, n_head=2, d_head=16, d_inner=64, n_token=n_token,
                             mem_len=48, reuse_len=REUSE_LEN, bi_data=True, dropout=0.0, dropatt=0.0)


def _replay(model: xlnet.XLNetPretrainer, batches, state=None) -> dict:
    """The memories one replica ends with after `batches`, computed on the host, one step after another."""
    state = state if state is not None else model.initial_state(ROWS_PER_REPLICA)
    for batch in batches:
        state = model.step_output(batch, state, training=False).state
    return state


def _max_diff(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


def test_each_replica_gets_back_its_own_memories_and_reset_policy(data, tmp_path):
    problem, data_dir = data
    n_token = int(problem.read_manifest(data_dir)["settings"]["vocab_size"])
    tf.keras.utils.set_random_seed(0)
    dataset_fn = _dataset_fn(problem, data_dir)
    # Learning rate 0: the weights stay, so the host can replay each replica's steps exactly.
    trainer = core.Trainer(
        two_replicas(), lambda: xlnet.XLNetPretrainer(_tiny_config(n_token), name="model"),
        lambda: optimization.create_optimizer(0.0, 100, 0), dataset_fn,
        TrainConfig(model_dir=str(tmp_path / "run"), num_train_steps=4, iterations_per_loop=2,
                         global_batch_size=BSZ_PER_HOST, mem_reset="never"))
    trainer.train()  # two host loops of two steps
    mems = [v.numpy() for v in trainer.strategy.experimental_local_results(trainer._state_vars["mems"])]
    assert mems[0].shape == (2, ROWS_PER_REPLICA, 48, 32)

    # The same pipeline, iterated on the host: element 2t + r is replica r's batch of step t.
    it = iter(dataset_fn(input_context(trainer.strategy)))
    elements = [next(it) for _ in range(6 * CORES)]
    own = [elements[r::CORES] for r in range(CORES)]
    model = trainer.model
    carried = [_replay(model, own[r][:4]) for r in range(CORES)]
    for r in range(CORES):
        np.testing.assert_allclose(mems[r], carried[r]["mems"].numpy(), atol=1e-5, err_msg=f"replica {r}")
        assert _max_diff(mems[r], carried[1 - r]["mems"]) > 0.1  # not the other replica's memories
        # "never": the memories crossed the host-loop boundary (a reset there gives other values).
        assert _max_diff(mems[r], _replay(model, own[r][2:4])["mems"]) > 1e-3

    # "every_loop": the next host loop (steps 5-6) starts again from zeros. The policy is read by the host
    # loop at run time, so the same (already traced) trainer goes on with it.
    trainer.config.mem_reset, trainer.config.num_train_steps = "every_loop", 6
    assert trainer.train().step == 6
    mems = [v.numpy() for v in trainer.strategy.experimental_local_results(trainer._state_vars["mems"])]
    for r in range(CORES):
        np.testing.assert_allclose(mems[r], _replay(model, own[r][4:6])["mems"].numpy(), atol=1e-5)
        assert _max_diff(mems[r], _replay(model, own[r][4:6], carried[r])["mems"]) > 1e-3


# -------------------------------------------------------------------------------------- refusals
def _main_in_process(monkeypatch, tmp_path, data_dir: str, *extra: str):
    """textrain.trainers.train_gpu.main on these flags, with this file's strategies (one MirroredStrategy per process)."""
    from absl import flags

    from textrain.trainers import launch, train_gpu

    launch.define_all_flags([])
    monkeypatch.setattr(strategy, "make_strategy",
                        lambda kind="auto", num_gpus=0, **_: two_replicas() if num_gpus > 1 else one_device())
    argv = ["textrain-train-gpu", "--problem=xlnet_pretrain", f"--data_dir={data_dir}", "--model=xlnet",
            f"--model_dir={tmp_path / 'run'}", "--num_gpus=2", f"--train_batch_size={BSZ_PER_HOST}",
            "--mem_len=32", "--n_layer=1", "--d_model=16", "--n_head=2", "--d_head=8", "--d_inner=32",
            "--num_train_steps=1", *extra]
    flags.FLAGS.unparse_flags()
    flags.FLAGS(argv)
    try:
        train_gpu.main([])
    finally:
        flags.FLAGS.unparse_flags()


@pytest.mark.parametrize("flag, says", [
    ("--seq_len=128", ["seq_len", "says 128", "made with 64"]),
    ("--reuse_len=16", ["reuse_len", "says 16", "made with 32"]),
    ("--nobi_data", ["bi_data", "says False", "made with True"]),
    ("--num_predict=12", ["num_predict", "says 12", "made with 10"]),
    ("--num_core_per_host=4", ["num_core_per_host", "says 4", "made with 2"]),
    ("--num_core_per_host=1", ["num_core_per_host", "says 1", "made with 2"]),
    ("--bsz_per_host=8", ["bsz_per_host", "says 8", "made with 4"]),
    ("--train_batch_size=8", ["--train_batch_size=8", "bsz_per_host=4"]),
])
def test_cli_refuses_flags_that_disagree_with_the_manifest(data, tmp_path, monkeypatch, flag, says):
    from textrain.framework import errors

    _, data_dir = data
    # main raises the user error; the console entry point (framework.cli.run_main) prints it as one line.
    with pytest.raises(errors.UserError) as refused:
        _main_in_process(monkeypatch, tmp_path, data_dir, flag)
    message = str(refused.value)
    for part in says:
        assert part in message, message


def test_cli_refuses_a_replica_count_other_than_the_datas_cores(data, tmp_path, monkeypatch):
    from textrain.framework import errors

    problem, data_dir = data
    # Data for 2 cores per host, one replica: its 4 rows would be [fwd, bwd, fwd, bwd], not [fwd, fwd | bwd, bwd].
    # A user error (framework.errors.UserError: one line from the CLI), not a traceback.
    with pytest.raises(errors.UserError, match=r"--num_core_per_host=2 replicas per host with 2 rows each.*"
                                            r"1 replicas per input pipeline with 4 rows each"):
        _main_in_process(monkeypatch, tmp_path, data_dir, "--num_gpus=1")
    # Data for 1 core per host, two replicas: each would get half of a core's rows.
    one_core_dir = str(tmp_path / "one_core")
    one_core = xp.XlnetPretrain(_hparams(num_core_per_host=1, sp_model=problem.sp_model_path(data_dir)))
    one_core.generate_data(one_core_dir, str(tmp_path / "tmp"), num_shards={"train": 1}, seed=0)
    with pytest.raises(errors.UserError, match=r"--num_core_per_host=1 replicas per host with 4 rows each.*"
                                            r"2 replicas per input pipeline with 2 rows each"):
        _main_in_process(monkeypatch, tmp_path, one_core_dir)


# ------------------------------------------------------------------------------- the real processes
PROGRESS = re.compile(r"step (\d+)/\d+ \| loss ([0-9.]+) .*?([0-9.]+) steps/s \| ([0-9.]+) ex/s")


def unigram_entropy_of_targets(problem: xp.XlnetPretrain, data_dir: str) -> float:
    """Entropy (nats) of the predicted tokens' unigram distribution: the loss of the best model that ignores
    context. The targets are the masked tokens other than <sep>/<cls> (the parser drops those)."""
    spec = problem.example_reading_spec()
    counts = np.zeros(int(problem.read_manifest(data_dir)["settings"]["vocab_size"]), np.int64)
    for batch in tf.data.TFRecordDataset(problem.data_files(data_dir, "train")).batch(1024):
        ex = tf.io.parse_example(batch, spec)
        inp, masked = ex["input"].numpy(), ex["is_masked"].numpy() == 1
        keep = masked & (inp != xp.SEP_ID) & (inp != xp.CLS_ID)
        counts += np.bincount(inp[keep], minlength=len(counts))
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


@pytest.mark.slow
def test_datagen_then_train_gpu_cli_learns_from_context(tmp_path):
    data_dir = str(tmp_path / "data")
    gen = subprocess.run([sys.executable, "-m", "textrain.framework.datagen", "--problem=xlnet_pretrain",
                          f"--data_dir={data_dir}", f"--tmp_dir={tmp_path}", f"--input_file={EMMA}",
                          "--vocab_size=500", "--num_shards=2", *DATA_FLAGS],
                         cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=300)
    assert gen.returncode == 0, gen.stderr[-3000:]
    assert os.path.exists(os.path.join(data_dir, "xlnet_pretrain", "spiece.model"))

    # lr 1e-3: the trainer's AdamW is BERT's (no bias correction: early updates are several times lr);
    # at 2e-3 and above this tiny model stalls at the unigram loss.
    steps, every = 1200, 100
    run = str(tmp_path / "run")
    train = [sys.executable, "-m", "textrain.trainers.train_gpu", "--problem=xlnet_pretrain", f"--data_dir={data_dir}",
             "--model=xlnet", f"--model_dir={run}", "--n_layer=2", "--d_model=64", "--n_head=2", "--d_head=32",
             "--d_inner=128", "--mem_len=32", "--num_gpus=2", f"--train_batch_size={BSZ_PER_HOST}",
             f"--num_train_steps={steps}", "--num_warmup_steps=50", "--learning_rate=1e-3",
             f"--iterations_per_loop={every}", f"--log_steps={every}", f"--save_checkpoints_steps={steps // 2}",
             "--seed=1", *[f for f in DATA_FLAGS if "bsz_per_host" not in f]]  # agreeing flags are accepted
    proc = subprocess.run(train, cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "MirroredStrategy" in proc.stderr
    progress = [(int(s), float(loss), float(sps), float(eps)) for s, loss, sps, eps in PROGRESS.findall(proc.stderr)]
    assert [p[0] for p in progress] == list(range(every, steps + 1, every)), proc.stderr[-3000:]
    early = float(np.mean([p[1] for p in progress[:2]]))   # steps 1-200
    late = float(np.mean([p[1] for p in progress[-2:]]))   # the last 200 steps
    unigram = unigram_entropy_of_targets(xp.XlnetPretrain(_hparams()), data_dir)
    final = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("final ")][-1][len("final "):])
    rate = float(np.mean([p[3] for p in progress[1:]]))    # the first loop includes tracing
    print(f"\nxlnet e2e (2 replicas, n_layer 2, d_model 64, mem_len 32, seq_len {SEQ_LEN}, batch {BSZ_PER_HOST}, "
          f"{steps} steps): mean loss steps 1-{2 * every} {early:.3f}, steps {steps - 2 * every + 1}-{steps} "
          f"{late:.3f}, unigram entropy of the targets {unigram:.3f}; last loop: lm_accuracy "
          f"{final['lm_accuracy']:.3f}, {final['examples_per_sec']:.1f} ex/s; after the first loop "
          f"{rate:.1f} ex/s on average")
    assert np.isfinite(late) and late < early - 0.3, (early, late)
    assert late < unigram - 0.1, (late, unigram)  # it predicts from context, not just token frequencies
    assert final["step"] == steps and final["skipped_steps"] == 0
    assert tf.train.latest_checkpoint(run).endswith(f"ckpt-{steps}")
    assert os.path.exists(os.path.join(run, f"ckpt-{steps // 2}.index"))

    # A flag that disagrees with the data, as a real process: exit 1, one clear line, no traceback.
    bad_cmd = [f"--model_dir={tmp_path / 'bad'}" if arg == f"--model_dir={run}" else arg for arg in train]
    bad = subprocess.run([*bad_cmd, "--reuse_len=16"], cwd=REPO, env=cli_env(), capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode == 1
    assert "textrain-train-gpu: error:" in bad.stderr and "reuse_len: the command line says 16" in bad.stderr
    assert "Traceback" not in bad.stderr
