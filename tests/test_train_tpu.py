"""trainers/train_tpu.py: the TPU trainer's whole code path on CPU (`--use_tpu=false`), as real processes.

- iterations_per_loop 5 gives the same checkpoint as iterations_per_loop 1 (the device loop changes only
  where the host looks in), on 2 logical CPU replicas;
- 4 logical CPU devices (`--num_core_per_host=4`) in a fresh process;
- kill -9 mid-run, then the same command resumes from the last checkpoint and ends with the weights of an
  uninterrupted run; SIGTERM saves and exits 143;
- the replica step compiles with XLA (jit_compile=True) on CPU: the HLO of the step's cluster;
- `--use_tpu` with a local path is refused with one line naming the flag.
The problem and model are the --usr_dir package tests/usr_toy (datagen-made records).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers import cli_env, final_figures
from helpers.processes import recorded_step, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
USR = os.path.join(HERE, "usr_toy")


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory) -> str:
    data = str(tmp_path_factory.mktemp("tpu_toy") / "data")
    proc = subprocess.run([sys.executable, "-m", "textrain.framework.datagen", f"--usr_dir={USR}", "--problem=usr_toy_problem",
                           f"--data_dir={data}"], cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return data


def _tpu_cmd(data: str, model_dir: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "textrain.trainers.train_tpu", "--use_tpu=false", f"--usr_dir={USR}",
            "--problem=usr_toy_problem", f"--data_dir={data}", "--model=usr_toy_model", f"--model_dir={model_dir}",
            "--train_batch_size=16", "--num_warmup_steps=2", "--learning_rate=0.1", "--seed=3", *extra]


def _checkpoint_weights(model_dir: str) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(model_dir))
    names = [n for n in reader.get_variable_to_shape_map() if n.startswith("model/") and "OPTIMIZER" not in n]
    assert names, reader.get_variable_to_shape_map()
    return {n: reader.get_tensor(n) for n in names}


def _run(cmd: list[str], **env) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=REPO, env=cli_env(**env), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def reference(toy_data, tmp_path_factory) -> str:
    """An uninterrupted run: 2 replicas, 20 steps, one step per device loop."""
    run = str(tmp_path_factory.mktemp("tpu_ref") / "run")
    proc = _run(_tpu_cmd(toy_data, run, "--num_core_per_host=2", "--num_train_steps=20",
                         "--iterations_per_loop=1", "--save_checkpoints_steps=5"))
    assert final_figures(proc.stdout)["step"] == 20
    return run


@pytest.mark.slow
def test_iterations_per_loop_5_equals_1(toy_data, reference, tmp_path):
    run = str(tmp_path / "ipl5")
    proc = _run(_tpu_cmd(toy_data, run, "--num_core_per_host=2", "--num_train_steps=20",
                         "--iterations_per_loop=5", "--save_checkpoints_steps=5", "--log_steps=5"))
    out = final_figures(proc.stdout)
    assert out["step"] == 20 and np.isfinite(out["loss"]) and "MirroredStrategy" in proc.stderr
    # 4 device calls of 5 steps, a progress line between calls (at most one per call).
    assert [proc.stderr.count(f"step {s}/20") for s in (5, 10, 15, 20)] == [1, 1, 1, 1]
    assert "step 1/20" not in proc.stderr and "step 6/20" not in proc.stderr
    ref, got = _checkpoint_weights(reference), _checkpoint_weights(run)
    assert ref.keys() == got.keys()
    for name in ref:
        np.testing.assert_allclose(got[name], ref[name], atol=1e-6, err_msg=name)
    assert max(np.abs(v).max() for v in got.values()) > 0


@pytest.mark.slow
def test_four_logical_cpu_devices(toy_data, tmp_path):
    run = str(tmp_path / "four")
    proc = _run(_tpu_cmd(toy_data, run, "--num_core_per_host=4", "--num_train_steps=4", "--iterations_per_loop=2"))
    assert final_figures(proc.stdout)["step"] == 4
    assert "MirroredStrategy" in proc.stderr and "CPU:3" in proc.stderr and "CPU:4" not in proc.stderr


@pytest.mark.slow
def test_kill_minus_9_then_resume_matches_an_uninterrupted_run(toy_data, reference, tmp_path):
    run = str(tmp_path / "killed")
    cmd = _tpu_cmd(toy_data, run, "--num_core_per_host=2", "--num_train_steps=20", "--iterations_per_loop=1",
                   "--save_checkpoints_steps=5")
    # 0.3 s per batch, so the run is still going when ckpt-5 appears.
    proc = subprocess.Popen(cmd, cwd=REPO, env=cli_env(TOY_SLOW_INPUT="0.3"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    wait_until(lambda: recorded_step(run) >= 5, f"ckpt-5 recorded in {run}", [proc], timeout=120)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    last = tf.train.latest_checkpoint(run)
    assert last and int(last.rsplit("-", 1)[1]) < 20
    again = _run(cmd)
    assert f"restored {last}" in again.stderr and final_figures(again.stdout)["step"] == 20
    ref, got = _checkpoint_weights(reference), _checkpoint_weights(run)
    for name in ref:
        np.testing.assert_allclose(got[name], ref[name], atol=1e-6, err_msg=name)


@pytest.mark.slow
def test_sigterm_saves_and_exits_143(toy_data, tmp_path):
    run = str(tmp_path / "term")
    proc = subprocess.Popen(_tpu_cmd(toy_data, run, "--num_train_steps=100000", "--iterations_per_loop=1",
                                     "--save_checkpoints_steps=2"),
                            cwd=REPO, env=cli_env(TOY_SLOW_INPUT="0.2"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    wait_until(lambda: recorded_step(run) >= 2, f"ckpt-2 recorded in {run}", [proc], timeout=120)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr[-3000:]
    out = final_figures(stdout)
    assert out["preempted"] and tf.train.latest_checkpoint(run).endswith(f"ckpt-{out['step']}")


def test_use_tpu_refuses_local_paths_with_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "textrain.trainers.train_tpu", "--use_tpu", "--tpu=my-tpu",
                           "--problem=bert_pretrain", f"--data_dir={tmp_path}", "--model=bert",
                           "--model_dir=gs://bucket/run"], cwd=REPO, env=cli_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if "error:" in line or line.startswith("textrain")]
    assert errors == [f"textrain-train-tpu: error: --data_dir={tmp_path} is a local path, but --use_tpu reads and "
                      f"writes through Google Cloud Storage (a TPU cannot see this machine's disk): copy it to a gs:// "
                      f"bucket and pass --data_dir=gs://..."], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("flag", ["model_dir", "init_checkpoint", "bert_config_file"])
def test_use_tpu_names_each_local_path_flag(flag):
    from absl import flags

    from textrain.framework import errors
    from textrain.trainers import launch, train_tpu

    launch.define_all_flags([])
    argv = ["textrain-train-tpu", "--use_tpu", "--data_dir=gs://b/data", "--model_dir=gs://b/run",
            "--init_checkpoint=gs://b/ckpt", "--bert_config_file=gs://b/c.json", f"--{flag}=local/{flag}"]
    flags.FLAGS.unparse_flags()
    flags.FLAGS(argv)
    try:
        with pytest.raises(errors.UserError, match=rf"^--{flag}=local/{flag} is a local path"):
            train_tpu.check_tpu_paths()
        flags.FLAGS[flag].value = f"gs://b/{flag}"
        train_tpu.check_tpu_paths()  # all gs://: accepted
    finally:
        flags.FLAGS.unparse_flags()


def test_the_tpu_replica_step_compiles_with_xla_on_cpu(tmp_path):
    """The TrainConfig the TPU trainer uses (train_tpu.TPU_CONFIG) on the one loop: the step's forward and
    backward pass is one XLA program on CPU (its HLO), and training with it runs."""
    from tests.test_trainer_core import Toy, make_dataset_fn, one_device, write_records
    from textrain.trainers import core, optimization, train_tpu
    from textrain.trainers.strategy import input_context
    from textrain.trainers.train_config import TrainConfig

    assert train_tpu.TPU_CONFIG["jit_compile"] is True and train_tpu.TPU_CONFIG["input_mode"] == "distributed"
    paths = write_records(str(tmp_path / "data"))
    trainer = core.Trainer(one_device(), Toy, lambda: optimization.create_optimizer(0.1, 10, 1),
                           make_dataset_fn(paths, 16),
                           TrainConfig(model_dir=str(tmp_path / "run"), num_train_steps=4, iterations_per_loop=2,
                                            **train_tpu.TPU_CONFIG))
    features = next(iter(make_dataset_fn(paths, 16)(input_context(trainer.strategy))))
    state = trainer.model.initial_state(16)
    hlo = trainer._forward_fn.experimental_get_compiler_ir(features, state)(stage="hlo")
    assert "HloModule" in hlo and "dot(" in hlo  # the dense layer, compiled by XLA
    assert trainer.train().step == 4


def _one_error_line(proc) -> str:
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("textrain-train-")]
    assert len(lines) == 1, proc.stderr[-2000:]
    return lines[0]


def test_use_tpu_without_a_tpu_name_is_one_line():
    proc = subprocess.run([sys.executable, "-m", "textrain.trainers.train_tpu", "--use_tpu", "--problem=bert_pretrain",
                           "--data_dir=gs://b/data", "--model=bert", "--model_dir=gs://b/run"], cwd=REPO, env=cli_env(),
                          capture_output=True, text=True, timeout=120)
    assert _one_error_line(proc).startswith("textrain-train-tpu: error: --use_tpu needs --tpu=NAME")


@pytest.mark.parametrize("flag", ["--input_mode=host", "--nojit_compile"])
def test_a_flag_the_tpu_preset_would_override_is_refused(toy_data, tmp_path, flag):
    proc = subprocess.run(_tpu_cmd(toy_data, str(tmp_path / "run"), "--num_train_steps=2", flag), cwd=REPO,
                          env=cli_env(), capture_output=True, text=True, timeout=120)
    name = flag.lstrip("-").split("=")[0].removeprefix("no")
    assert f"--{name}=" in _one_error_line(proc) and "textrain-train-tpu runs with" in proc.stderr


@pytest.mark.parametrize("flag", ["--use_tpu", "--strategy=tpu"])
def test_train_gpu_refuses_the_tpu_naming_textrain_train_tpu(toy_data, tmp_path, flag):
    proc = subprocess.run([sys.executable, "-m", "textrain.trainers.train_gpu", flag, f"--usr_dir={USR}",
                           "--problem=usr_toy_problem", f"--data_dir={toy_data}", "--model=usr_toy_model",
                           f"--model_dir={tmp_path / 'run'}", "--num_train_steps=2"], cwd=REPO, env=cli_env(),
                          capture_output=True, text=True, timeout=120)
    line = _one_error_line(proc)
    assert line.startswith(f"textrain-train-gpu: error: {flag}:") and "textrain-train-tpu" in line
    assert not os.path.exists(tmp_path / "run")
