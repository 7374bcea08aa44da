"""trainers/train_gpu.py: the CLI as a real subprocess, on datagen-made records; multi-worker training with
two real worker processes on 127.0.0.1; BERT end to end (slow)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from helpers import cli_env, final_figures
from helpers.cluster import free_ports
from helpers.processes import recorded_step, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# The --usr_dir package tests/usr_toy: a tiny problem and a tiny linear model, as a user would write them.
# The model dumps its final weights when TOY_DUMP_DIR is set, so a test can compare what each worker holds.
USR_TOY = os.path.join(HERE, "usr_toy")
TOY_INITIAL_WEIGHTS = np.concatenate([np.linspace(-0.5, 0.5, 4 * 3, dtype=np.float32), np.zeros(3, np.float32)])


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory):
    """Records of the usr_dir problem, made by the datagen CLI."""
    root = tmp_path_factory.mktemp("toy")
    data = root / "data"
    proc = subprocess.run([sys.executable, "-m", "textrain.framework.datagen", f"--usr_dir={USR_TOY}",
                           "--problem=usr_toy_problem", f"--data_dir={data}", f"--tmp_dir={root}"],
                          cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return USR_TOY, str(data)


def _train_cmd(usr: str, data: str, model_dir: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "textrain.trainers.train_gpu", f"--usr_dir={usr}", "--problem=usr_toy_problem",
            f"--data_dir={data}", "--model=usr_toy_model", f"--model_dir={model_dir}",
            "--train_batch_size=16", "--num_train_steps=6", "--num_warmup_steps=1", "--learning_rate=0.1",
            "--iterations_per_loop=3", "--save_checkpoints_steps=3", "--seed=1", *extra]


@pytest.mark.slow
def test_cli_trains_on_two_logical_cpus_and_resumes(toy_data, tmp_path):
    usr, data = toy_data
    run = str(tmp_path / "run")
    proc = subprocess.run(_train_cmd(usr, data, run, "--num_gpus=2"), cwd=REPO, env=cli_env(),
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = final_figures(proc.stdout)
    assert out["step"] == 6 and np.isfinite(out["loss"]) and out["examples_per_sec"] > 0
    assert tf.train.latest_checkpoint(run).endswith("ckpt-6")
    assert "MirroredStrategy" in proc.stderr and "step 6/6" in proc.stderr
    # Same command, more steps: restarts from ckpt-6.
    again = subprocess.run(_train_cmd(usr, data, run, "--num_gpus=2", "--num_train_steps=9"), cwd=REPO,
                           env=cli_env(), capture_output=True, text=True, timeout=240)
    assert again.returncode == 0, again.stderr[-3000:]
    assert final_figures(again.stdout)["step"] == 9 and "restored" in again.stderr


def test_cli_refuses_settings_that_disagree_with_the_manifest(toy_data, tmp_path):
    usr, data = toy_data
    proc = subprocess.run(_train_cmd(usr, data, str(tmp_path / "run"), "--toy_dim=5"), cwd=REPO, env=cli_env(),
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode != 0
    assert "toy_dim" in proc.stderr and "5" in proc.stderr and "4" in proc.stderr


def test_cli_requires_its_flags():
    proc = subprocess.run([sys.executable, "-m", "textrain.trainers.train_gpu", "--problem=x"], cwd=REPO, env=cli_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "--data_dir" in proc.stderr and "--model_dir" in proc.stderr


def test_cli_refuses_t2t_hparams_for_a_model_without_an_hparams_set(toy_data, tmp_path):
    usr, data = toy_data
    proc = subprocess.run(_train_cmd(usr, data, str(tmp_path / "run"), '--hparams={"num_train_steps": 3}'),
                          cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
    assert len(lines) == 1 and "--hparams" in lines[0] and "--model=transformer" in lines[0], proc.stderr[-2000:]
    assert "--data-dir" in lines[0]  # says how ELECTRA's JSON --hparams is read


@pytest.mark.slow
def test_multi_worker_two_processes_agree_on_the_weights(toy_data, tmp_path):
    usr, data = toy_data
    cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(2)]}
    run, dump = str(tmp_path / "run"), str(tmp_path / "dump")
    os.makedirs(dump)
    procs = []
    for index in range(2):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        procs.append(subprocess.Popen(_train_cmd(usr, data, run, "--strategy=multi_worker"), cwd=REPO,
                                      env=cli_env(TF_CONFIG=tf_config, TOY_DUMP_DIR=dump),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = [p.communicate(timeout=300) for p in procs]
    for p, (stdout, stderr) in zip(procs, outputs):
        assert p.returncode == 0, stderr[-3000:]
        assert final_figures(stdout)["step"] == 6
    w0, w1 = (np.load(os.path.join(dump, f"worker_{i}.npy")) for i in range(2))
    np.testing.assert_array_equal(w0, w1)
    assert not np.allclose(w0, TOY_INITIAL_WEIGHTS)  # they trained
    assert tf.train.latest_checkpoint(run).endswith("ckpt-6")
    assert not tf.io.gfile.exists(os.path.join(run, ".worker_tmp", "pipeline_1"))
    assert tf.io.gfile.exists(os.path.join(run, "input_pipeline_1", "ckpt-6.index"))


@pytest.mark.slow
def test_multi_worker_kill_one_worker_then_restart_both_resumes(toy_data, tmp_path):
    """2 real MultiWorkerMirroredStrategy workers; worker 1 is killed (-9) mid-run, worker 0 (stuck in a
    collective) too; both restart with the same command: they resume from the last checkpoint and end with
    identical weights."""
    usr, data = toy_data
    run, dump = str(tmp_path / "run"), str(tmp_path / "dump")
    os.makedirs(dump)
    cmd = _train_cmd(usr, data, run, "--strategy=multi_worker", "--num_train_steps=16", "--iterations_per_loop=1",
                     "--save_checkpoints_steps=4")

    def start(slow: str) -> list[subprocess.Popen]:
        cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(2)]}
        return [subprocess.Popen(cmd, cwd=REPO, env=cli_env(TF_CONFIG=json.dumps(
            {"cluster": cluster, "task": {"type": "worker", "index": i}}), TOY_DUMP_DIR=dump, TOY_SLOW_INPUT=slow),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]

    first = start("0.3")  # 0.3 s per batch: still running when ckpt-4 appears
    wait_until(lambda: recorded_step(run) >= 4, f"ckpt-4 recorded in {run}", first, timeout=240)
    first[1].send_signal(signal.SIGKILL)
    first[0].send_signal(signal.SIGKILL)
    for p in first:
        p.communicate()
    last = tf.train.latest_checkpoint(run)
    last_step = int(last.rsplit("-", 1)[1])
    assert 4 <= last_step < 16
    assert not os.listdir(dump)  # killed: no final weights

    second = start("0.3")  # the same dataset definition: a checkpointed iterator restores only into it
    outputs = [p.communicate(timeout=300) for p in second]
    for p, (stdout, stderr) in zip(second, outputs):
        assert p.returncode == 0, stderr[-3000:]
        assert final_figures(stdout)["step"] == 16
    assert f"restored {last} (step {last_step})" in outputs[0][1]
    assert "restored" in outputs[1][1]
    w0, w1 = (np.load(os.path.join(dump, f"worker_{i}.npy")) for i in range(2))
    np.testing.assert_array_equal(w0, w1)
    assert tf.train.latest_checkpoint(run).endswith("ckpt-16")


@pytest.mark.slow
def test_bert_end_to_end_datagen_then_cli(tmp_path):
    corpus = tmp_path / "corpus.txt"
    with open(os.path.join(HERE, "data", "austen_emma.txt"), encoding="utf-8") as f:
        corpus.write_text("".join(f.readlines()[:600]))
    data = tmp_path / "data"
    gen = subprocess.run([sys.executable, "-m", "textrain.framework.datagen", "--problem=bert_pretrain",
                          f"--data_dir={data}", f"--tmp_dir={tmp_path}", f"--input_file={corpus}",
                          "--vocab_size=300", "--max_seq_length=32", "--max_predictions_per_seq=5",
                          "--dupe_factor=1"], cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=300)
    assert gen.returncode == 0, gen.stderr[-3000:]
    manifest = json.loads(next((data / "bert_pretrain").glob("bert_pretrain-train.manifest.json")).read_text())
    vocab = int(manifest["settings"]["vocab_size"])
    config = tmp_path / "bert_config.json"
    config.write_text(json.dumps({"vocab_size": vocab, "hidden_size": 16, "num_hidden_layers": 1,
                                  "num_attention_heads": 2, "intermediate_size": 32,
                                  "max_position_embeddings": 64, "type_vocab_size": 2}))
    run = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "textrain.trainers.train_gpu", "--problem=bert_pretrain",
                           f"--data_dir={data}", "--model=bert", f"--model_dir={run}",
                           f"--bert_config_file={config}", "--train_batch_size=8", "--num_train_steps=4",
                           "--num_warmup_steps=1", "--learning_rate=1e-3", "--iterations_per_loop=2",
                           "--save_checkpoints_steps=2", "--max_seq_length=32"],
                          cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = final_figures(proc.stdout)
    assert out["step"] == 4 and np.isfinite(out["loss"])
    assert tf.train.latest_checkpoint(str(run)).endswith("ckpt-4")
    # A setting that disagrees with the data is refused, naming both values.
    bad = subprocess.run([sys.executable, "-m", "textrain.trainers.train_gpu", "--problem=bert_pretrain",
                          f"--data_dir={data}", "--model=bert", f"--model_dir={tmp_path / 'bad'}",
                          f"--bert_config_file={config}", "--max_seq_length=64"],
                         cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "max_seq_length" in bad.stderr and "64" in bad.stderr


if __name__ == "__main__":
    print(textwrap.dedent(__doc__))


def test_a_run_that_fails_before_its_first_checkpoint_leaves_no_model_dir(toy_data, tmp_path):
    """Without --seed the run records its data seed and opens its summaries before the model is built; when
    building then fails, none of it stays (a later run would otherwise look like a resume)."""
    usr, data = toy_data
    run = tmp_path / "run"
    cmd = [c for c in _train_cmd(usr, data, str(run), "--train_batch_size=15", "--num_gpus=2") if c != "--seed=1"]
    proc = subprocess.run(cmd, cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("textrain-train-gpu: error:")
    assert not run.exists(), sorted(p.name for p in run.iterdir())


def test_a_run_saved_on_two_replicas_resumes_on_one(toy_data, tmp_path):
    """Through the CLI: --num_gpus=2, then the same model_dir with --num_gpus=1 (a GPU job
    moved to a smaller box) resumes; the log says the input position was re-derived from the step."""
    usr, data = toy_data
    run = str(tmp_path / "run")
    first = subprocess.run(_train_cmd(usr, data, run, "--num_gpus=2"), cwd=REPO, env=cli_env(), capture_output=True,
                           text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    moved = subprocess.run(_train_cmd(usr, data, run, "--num_gpus=1", "--num_train_steps=9"), cwd=REPO, env=cli_env(),
                           capture_output=True, text=True, timeout=300)
    assert moved.returncode == 0, moved.stderr[-3000:]
    assert final_figures(moved.stdout)["step"] == 9
    assert "re-derived from the step (exact" in moved.stderr and "Traceback" not in moved.stderr
