"""A resumed run is the same run: kill -9 mid-run, resume, and the losses and final weights equal the
uninterrupted run's bit for bit (with --seed), for BERT, ELECTRA and XLNet (memories included), through the
trainer CLI.

Everything that draws randomness during training must come from checkpointed state: dropout's and ELECTRA's
Keras seed generators (trainers/checkpointing.seed_states), the input iterator, XLNet's per-replica memories. With any
of them missing the resumed run is close to, not equal to, the uninterrupted one.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from helpers import cli_env, final_figures
from helpers.cluster import free_ports

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
EMMA = os.path.join(HERE, "data", "austen_emma.txt")
STEPS, SAVE_EVERY = 40, 10

CASES = {
    "bert": dict(
        datagen=["--problem=bert_pretrain", "--vocab_size=600", "--max_seq_length=32", "--max_predictions_per_seq=5",
                 "--dupe_factor=1"],
        train=["--problem=bert_pretrain", "--model=bert", "--model_size=tiny", "--max_seq_length=32",
               "--max_predictions_per_seq=5", "--train_batch_size=8", "--num_gpus=2"]),
    "electra": dict(
        datagen=["--problem=electra_pretrain", "--vocab_size=600", "--max_seq_length=32"],
        config=dict(vocab_size=600, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                    embedding_size=32, max_position_embeddings=64, type_vocab_size=2),
        train=["--problem=electra_pretrain", "--model=electra", "--max_seq_length=32",
               "--train_batch_size=8", "--num_gpus=1"]),
    "xlnet": dict(
        datagen=["--problem=xlnet_pretrain", "--vocab_size=500", "--seq_len=32", "--reuse_len=16",
                 "--num_predict=5", "--bsz_per_host=4", "--num_core_per_host=2", "--bi_data"],
        train=["--problem=xlnet_pretrain", "--model=xlnet", "--n_layer=2", "--d_model=32", "--n_head=2",
               "--d_head=16", "--d_inner=64", "--mem_len=16", "--dropout=0.1", "--dropatt=0.1",
               "--num_gpus=2", "--train_batch_size=4", "--seq_len=32", "--reuse_len=16", "--num_predict=5"]),
}


def _cli(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", f"textrain.{module}", *args]


PROGRESS = re.compile(r"step (\d+)/\d+ \| loss (\S+)")


def _final(stdout: str) -> dict:
    """The final line's figures, less the timings and paths."""
    return {k: v for k, v in final_figures(stdout).items()
            if not k.endswith("_per_sec") and k not in ("checkpoint", "restored_from")}

def _losses(stderr: str) -> dict[int, str]:
    return {int(step): loss for step, loss in PROGRESS.findall(stderr)}


def _variables(model_dir: str) -> dict[str, np.ndarray]:
    path = tf.train.latest_checkpoint(model_dir)
    out = {}
    for name, _ in tf.train.list_variables(path):
        try:
            out[name] = np.asarray(tf.train.load_variable(path, name))
        except tf.errors.InternalError:  # the input iterator's state (a variant): not comparable as numbers
            pass
    return out


@pytest.mark.slow
@pytest.mark.parametrize("model", sorted(CASES))
def test_kill_minus_9_and_resume_equals_the_uninterrupted_run(model, tmp_path):
    case = CASES[model]
    data = str(tmp_path / "data")
    gen = subprocess.run(_cli("framework.datagen", f"--input_file={EMMA}", f"--data_dir={data}",
                              f"--tmp_dir={tmp_path}", "--seed=3", *case["datagen"]),
                         cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=300)
    assert gen.returncode == 0, gen.stderr[-3000:]

    flags = list(case["train"])
    if "config" in case:
        with open(tmp_path / "config.json", "w") as f:
            json.dump(case["config"], f)
        flags.append(f"--electra_config_file={tmp_path / 'config.json'}")

    def train(model_dir: str) -> list[str]:
        return _cli("trainers.train_gpu", *flags, f"--data_dir={data}", f"--model_dir={model_dir}",
                    f"--num_train_steps={STEPS}", f"--save_checkpoints_steps={SAVE_EVERY}", "--iterations_per_loop=1",
                    "--log_steps=1", "--num_warmup_steps=5", "--learning_rate=1e-3", "--seed=7")

    reference = str(tmp_path / "reference")
    ref = subprocess.run(train(reference), cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=600)
    assert ref.returncode == 0, ref.stderr[-3000:]

    killed = str(tmp_path / "killed")
    proc = subprocess.Popen(train(killed), cwd=REPO, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    start = time.time()
    while not tf.train.latest_checkpoint(killed):  # a checkpoint whole and recorded
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.time() - start < 600, "timed out waiting for the first checkpoint"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL  # killed mid-run, not finished
    last = tf.train.latest_checkpoint(killed)
    assert last and int(last.rsplit("-", 1)[1]) < STEPS

    resumed = subprocess.run(train(killed), cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"restored {last}" in resumed.stderr

    # The same loss at every step the resumed run logged, the same final figures and weights.
    resumed_losses, ref_losses = _losses(resumed.stderr), _losses(ref.stderr)
    assert sorted(resumed_losses) == list(range(int(last.rsplit("-", 1)[1]) + 1, STEPS + 1))
    assert {s: ref_losses[s] for s in resumed_losses} == resumed_losses
    assert _final(resumed.stdout) == _final(ref.stdout)
    want, got = _variables(reference), _variables(killed)
    assert sorted(want) == sorted(got)
    assert any(name.startswith("rng/") for name in want)  # the random streams are in the checkpoint
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def _two_workers(cmd: list[str]) -> list[subprocess.Popen]:
    """The same command as 2 MultiWorkerMirroredStrategy workers on 127.0.0.1 (one input pipeline each)."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    return [subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=dict(cli_env(), TF_CONFIG=json.dumps({"cluster": cluster,
                                                                    "task": {"type": "worker", "index": i}})))
            for i in range(2)]


def _finish(procs: list[subprocess.Popen]) -> list[tuple[str, str]]:
    outputs = [p.communicate(timeout=600) for p in procs]
    for p, (_, stderr) in zip(procs, outputs):
        assert p.returncode == 0, stderr[-3000:]
    return outputs


@pytest.mark.slow
def test_xlnet_on_two_workers_kill_minus_9_and_resume_equals_the_uninterrupted_run(tmp_path):
    """XLNet with per-host (bsz_per_host) data and memories on 2 real worker processes, killed with -9 and
    restarted: the same losses and final weights as the uninterrupted 2-worker run (each worker's iterator and
    memories come back from its own input-pipeline checkpoint)."""
    data = str(tmp_path / "data")
    gen = subprocess.run(_cli("framework.datagen", f"--input_file={EMMA}", f"--data_dir={data}",
                              f"--tmp_dir={tmp_path}", "--seed=3", "--problem=xlnet_pretrain", "--vocab_size=500",
                              "--seq_len=32", "--reuse_len=16", "--num_predict=5", "--bsz_per_host=4",
                              "--num_core_per_host=1", "--bi_data"),
                         cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=300)
    assert gen.returncode == 0, gen.stderr[-3000:]

    def train(model_dir: str) -> list[str]:
        return _cli("trainers.train_gpu", "--problem=xlnet_pretrain", "--model=xlnet", "--n_layer=2", "--d_model=32",
                    "--n_head=2", "--d_head=16", "--d_inner=64", "--mem_len=16", "--dropout=0.1", "--dropatt=0.1",
                    "--strategy=multi_worker", "--train_batch_size=8", "--seq_len=32", "--reuse_len=16",
                    "--num_predict=5", f"--data_dir={data}", f"--model_dir={model_dir}",
                    f"--num_train_steps={STEPS}", f"--save_checkpoints_steps={SAVE_EVERY}", "--iterations_per_loop=1",
                    "--log_steps=1", "--num_warmup_steps=5", "--learning_rate=1e-3", "--seed=7")

    reference = str(tmp_path / "reference")
    ref = _finish(_two_workers(train(reference)))
    killed = str(tmp_path / "killed")
    first = _two_workers(train(killed))
    start = time.time()
    while not (tf.train.latest_checkpoint(killed)
               and tf.io.gfile.glob(os.path.join(killed, "input_pipeline_1", "*.index"))):
        assert all(p.poll() is None for p in first), [p.communicate()[1][-3000:] for p in first]
        assert time.time() - start < 600, "timed out waiting for the first checkpoint"
        time.sleep(0.02)
    for p in first:
        p.send_signal(signal.SIGKILL)
    for p in first:
        p.communicate()
        assert p.returncode == -signal.SIGKILL
    last = int(tf.train.latest_checkpoint(killed).rsplit("-", 1)[1])
    assert last < STEPS
    resumed = _finish(_two_workers(train(killed)))

    for (_, want), (_stdout, got) in zip(ref, resumed):
        losses = _losses(got)
        assert sorted(losses) == list(range(last + 1, STEPS + 1))
        assert {s: _losses(want)[s] for s in losses} == losses
    assert _final(resumed[0][0]) == _final(ref[0][0])
    want_vars, got_vars = _variables(reference), _variables(killed)
    assert sorted(want_vars) == sorted(got_vars)
    for name in want_vars:
        np.testing.assert_array_equal(got_vars[name], want_vars[name], err_msg=name)
