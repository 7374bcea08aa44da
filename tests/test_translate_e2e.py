"""Text2text end to end through the command lines a user types: textrain-datagen on tiny parallel files,
textrain-train-gpu --model=transformer, textrain-avg-checkpoints, textrain-decode (file and stdin, BLEU)."""
from __future__ import annotations

import json
import math
import os
import random
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = {"one": "一", "two": "二", "three": "三", "four": "四", "five": "五", "red": "红", "blue": "蓝",
         "cat": "猫", "dog": "狗", "big": "大", "small": "小", "fish": "鱼"}
TINY = "hidden_size=32,filter_size=64,num_heads=2,num_hidden_layers=1"


def run(*args: str, stdin: str | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True,
                          input=stdin, timeout=timeout, env=env)


def pairs(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = rng.choices(sorted(WORDS), k=rng.randint(2, 6))
        out.append((" ".join(words), "".join(WORDS[w] for w in words)))
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """datagen + 6 training steps (checkpoints every 2) of a one-layer Transformer."""
    root = tmp_path_factory.mktemp("t2t")
    raw = root / "raw"
    raw.mkdir()
    data = pairs(300, 0)
    (raw / "train.en").write_text("".join(s + "\n" for s, _ in data))
    (raw / "train.zh").write_text("".join(t + "\n" for _, t in data))
    data_dir, model_dir = str(root / "data"), str(root / "model")
    proc = run("textrain.framework.datagen", "--problem=translate_enzh_sub8k", f"--data_dir={data_dir}",
               f"--tmp_dir={raw}", "--dev_every=10")
    assert proc.returncode == 0, proc.stderr[-3000:]
    common = ["--problem=translate_enzh_sub8k", f"--data_dir={data_dir}", "--model=transformer",
              "--hparams_set=transformer_tiny", f"--hparams={TINY}"]
    proc = run("textrain.trainers.train_gpu", *common, f"--model_dir={model_dir}", "--num_train_steps=6",
               "--save_checkpoints_steps=2", "--iterations_per_loop=2", "--log_steps=2", "--train_batch_size=256",
               "--max_length=32")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(root=root, data_dir=data_dir, model_dir=model_dir, common=common, train=proc)


@pytest.mark.slow
def test_training_through_the_cli_uses_the_hparams_set(trained):
    proc = trained["train"]
    final = json.loads(proc.stdout.split("final ", 1)[1].splitlines()[0])
    assert final["step"] == 6 and math.isfinite(final["cross_entropy"]) and "accuracy" in final
    # The set's schedule reached the optimizer: t2t's rsqrt_decay with constant 2.0, 8000 warmup steps and
    # rsqrt(hidden_size=32) from --hparams; the last logged rate is that of the 6th update (5 done before).
    last_lr = re.findall(r"step 6/6 .*\| lr ([0-9.e+-]+) ", proc.stderr)
    assert last_lr, proc.stderr[-2000:]
    expected = 2.0 * (5 / 8000) * 8000 ** -0.5 * 32 ** -0.5
    assert float(last_lr[0]) == pytest.approx(expected, rel=1e-2)
    assert sorted(p for p in os.listdir(trained["model_dir"]) if p.endswith(".index")) == [
        "ckpt-2.index", "ckpt-4.index", "ckpt-6.index"]


@pytest.mark.slow
def test_average_then_decode_from_a_file_and_stdin(trained):
    model_dir, avg_dir = trained["model_dir"], str(trained["root"] / "avg")
    proc = run("textrain.trainers.avg_checkpoints", f"--model_dir={model_dir}", "--num_last_checkpoints=3",
               f"--output_dir={avg_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    from textrain.trainers.avg_checkpoints import model_variable_keys

    averaged = tf.train.load_checkpoint(tf.train.latest_checkpoint(avg_dir))
    readers = [tf.train.load_checkpoint(os.path.join(model_dir, f"ckpt-{s}")) for s in (2, 4, 6)]
    keys = model_variable_keys(readers[-1])
    # one layer each: 2 tables, encoder 12 (2 norms, 4 attention, 2+2 ffn), decoder 18, 2 final norms
    assert len(keys) == 36 and model_variable_keys(averaged) == keys
    for key in keys:
        np.testing.assert_allclose(averaged.get_tensor(key),
                                   np.mean([r.get_tensor(key) for r in readers], axis=0), rtol=1e-6, atol=1e-7)
    proc = run("textrain.trainers.avg_checkpoints", f"--model_dir={model_dir}", "--num_last_checkpoints=9",
               f"--output_dir={avg_dir}")
    assert proc.returncode == 1 and "has 3 checkpoint(s)" in proc.stderr

    dev = pairs(7, 1) + [("a line with words it never saw", "")]
    src, ref, out = (trained["root"] / n for n in ("dev.en", "dev.zh", "dev.hyp"))
    src.write_text("".join(s + "\n" for s, _ in dev))
    ref.write_text("".join(t + "\n" for _, t in dev))
    proc = run("textrain.trainers.decode", *trained["common"], f"--checkpoint_path={avg_dir}", f"--decode_from_file={src}",
               f"--decode_to_file={out}", f"--reference_file={ref}", "--beam_size=2", "--decode_batch_size=3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    hyps = out.read_text().split("\n")
    assert len(hyps) == len(dev) + 1 and hyps[-1] == ""  # one line per input line
    report = (trained["root"] / "dev.hyp.bleu").read_text()
    assert report.startswith("BLEU = ") and "tok:zh" in report
    assert not [p for p in os.listdir(trained["root"]) if "incomplete" in p]

    proc = run("textrain.trainers.decode", *trained["common"], f"--model_dir={model_dir}", "--beam_size=1",
               stdin="one two\nred cat\n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(proc.stdout.split("\n")) == 3 and "ckpt-6" in proc.stderr  # latest checkpoint, 2 lines

    wrong = [a if not a.startswith("--hparams=") else "--hparams=hidden_size=64,num_heads=2" for a in trained["common"]]
    proc = run("textrain.trainers.decode", *wrong, f"--model_dir={model_dir}", stdin="one\n")
    assert proc.returncode == 1 and "does not hold this model's variables" in proc.stderr
    assert "Traceback" not in proc.stderr
