"""The README's first command, `bash scripts/demo.sh`, end to end with a short pretraining (slow).

It installs the package (`pip install -e .`) as the README says; DEMO_SKIP_INSTALL=1 in the environment skips
that step (a run beside other work that must not re-point the install)."""
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
    env = dict(os.environ, DEMO_OUT=str(out), DEMO_STEPS="20", TF_CPP_MIN_LOG_LEVEL="2")
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
