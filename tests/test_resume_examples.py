"""A killed multi-worker run, resumed, consumes the very examples of an uninterrupted run: none skipped, none
repeated, each at the same step on the same replica.

Real processes: 2 MultiWorkerMirroredStrategy workers on 127.0.0.1 (one input pipeline each, as the hosts of a
pod each feed their own cores), killed with -9 after a checkpoint and started again with the same command. A test
hook (tests/usr_trace: TRACE_EXAMPLES_DIR) logs, per replica and per replica step, a hash of every example the
step trained on; the replica's step count is per-replica state, so it is checkpointed per input pipeline and
restored with the data position.
"""
from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf
from helpers import cli_env
from helpers.cluster import free_ports

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
USR = os.path.join(HERE, "usr_trace")
STEPS, SAVE_EVERY = 16, 4


def _start(data: str, run: str, trace: str, slow: str) -> list[subprocess.Popen]:
    os.makedirs(trace, exist_ok=True)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(2)]}
    cmd = [sys.executable, "-m", "textrain.trainers.train_gpu", f"--usr_dir={USR}", "--problem=usr_toy_problem",
           f"--data_dir={data}", "--model=usr_traced_model", f"--model_dir={run}", "--strategy=multi_worker",
           "--train_batch_size=16", f"--num_train_steps={STEPS}", "--num_warmup_steps=1", "--learning_rate=0.1",
           "--iterations_per_loop=1", f"--save_checkpoints_steps={SAVE_EVERY}", "--seed=5"]
    return [subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(
        TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}), TRACE_TASK=str(i),
        TRACE_EXAMPLES_DIR=trace, TOY_SLOW_INPUT=slow)) for i in range(2)]


def _trace(directory: str, up_to: int | None = None) -> dict[tuple[int, int], list[int]]:
    """{(replica, replica step): example hashes} from a run's logs; with `up_to`, the steps a checkpoint holds."""
    steps = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), encoding="utf-8") as f:
            for line in f:
                replica, count, ids = line.split(" ", 2)
                if up_to is None or int(count) <= up_to:
                    steps[(int(replica), int(count))] = json.loads(ids.replace(" ", ","))
    return steps


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    data = str(tmp_path_factory.mktemp("trace") / "data")
    proc = subprocess.run([sys.executable, "-m", "textrain.framework.datagen", f"--usr_dir={USR}",
                           "--problem=usr_toy_problem", f"--data_dir={data}"], cwd=REPO, env=cli_env(),
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return data


@pytest.mark.slow
def test_multi_worker_kill_minus_9_and_resume_consumes_the_uninterrupted_runs_examples(data, tmp_path):
    reference = _start(data, str(tmp_path / "reference"), str(tmp_path / "trace_reference"), "0")
    for p in reference:
        _, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr[-3000:]
    want = _trace(str(tmp_path / "trace_reference"))
    assert sorted(want) == [(r, c) for r in range(2) for c in range(1, STEPS + 1)]

    run = str(tmp_path / "run")
    first = _start(data, run, str(tmp_path / "trace_killed"), "0.3")  # still running when a checkpoint appears
    deadline = time.time() + 240
    while not tf.train.latest_checkpoint(run) or not tf.io.gfile.glob(os.path.join(run, "input_pipeline_1", "*.index")):
        assert time.time() < deadline and all(p.poll() is None for p in first), \
            [p.communicate()[1][-2000:] for p in first if p.poll() is not None]
        time.sleep(0.1)
    for p in first:
        p.send_signal(signal.SIGKILL)
    for p in first:
        p.communicate()
        assert p.returncode == -signal.SIGKILL
    last = int(tf.train.latest_checkpoint(run).rsplit("-", 1)[1])
    assert SAVE_EVERY <= last < STEPS

    second = _start(data, run, str(tmp_path / "trace_resumed"), "0.3")  # the same dataset definition
    for p in second:
        _, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr[-3000:]
    resumed = _trace(str(tmp_path / "trace_resumed"))
    assert min(c for _, c in resumed) == last + 1  # each replica's step count came back with the checkpoint
    got = {**_trace(str(tmp_path / "trace_killed"), up_to=last), **resumed}

    assert got == want  # the same examples at the same replica step
    consumed = collections.Counter(h for hashes in got.values() for h in hashes)
    assert consumed == collections.Counter(h for hashes in want.values() for h in hashes)
    assert sum(consumed.values()) == STEPS * 16  # every global batch whole: none skipped, none repeated
