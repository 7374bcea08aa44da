"""The README's first command, `bash scripts/demo.sh`, end to end with a short pretraining (slow).

Its first step (`pip install -e .`) is skipped here (DEMO_SKIP_INSTALL=1): the suite runs in the environment
tests/run.sh installed with the same command, and tests/run.sh makes its side venvs from this tree at the
same time (two editable installs at once would write the tree's egg-info together). A fresh clone's install
is test_wheel's."""
from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_demo_runs_every_step_and_classifies_raw_text(tmp_path):
    out = tmp_path / "demo_out"
    env = dict(os.environ, DEMO_OUT=str(out), DEMO_STEPS="20", DEMO_SKIP_INSTALL="1", TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(["bash", os.path.join(REPO, "scripts", "demo.sh")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    steps = [(int(k), int(n)) for k, n in re.findall(r"^== (\d+)/(\d+) ", proc.stdout, flags=re.M)]
    assert steps and [k for k, _ in steps] == list(range(1, steps[0][1] + 1)), steps  # every step, in order
    with open(out / "emma_speech_run" / "eval_results.json", encoding="utf-8") as f:
        last = json.load(f)["dev"][-1]  # one entry per evaluation, the final step last
    assert 0.0 <= last["accuracy"] <= 1.0 and last["num_examples"] > 0
    classified = re.findall(r"^(speech|narration) +\[", proc.stdout, flags=re.M)  # the SavedModel's two lines
    assert len(classified) == 2, proc.stdout[-2000:]
    # The HF directory holds the SavedModel's checkpoint (best/): served back through textrain-convert, it gives
    # the SavedModel's probabilities on the dev sentences; its tokenizer config has the fine-tuning length.
    hf = out / "emma_speech_hf"
    with open(hf / "tokenizer_config.json", encoding="utf-8") as f:
        assert json.load(f)["model_max_length"] == 64
    again = tmp_path / "hf_served"
    subprocess.run(["textrain-convert", f"--from_hf={hf}", f"--to_saved_model={again}", "--max_seq_length=64"],
                   env=env, check=True, capture_output=True, timeout=600)
    import tensorflow as tf
    with open(out / "emma_speech" / "dev.tsv", encoding="utf-8") as f:
        sentences = [line.split("\t")[0] for line in f.read().splitlines()[1:41]]
    text = tf.constant(sentences)
    exported = tf.saved_model.load(str(out / "emma_speech_run" / "export")).signatures["serve_text"](text_a=text)
    served = tf.saved_model.load(str(again)).signatures["serve_text"](text_a=text)
    diff = abs(exported["probabilities"].numpy() - served["probabilities"].numpy()).max()
    assert diff < 1e-5, diff
