"""What the tests share about running a textrain CLI as a real subprocess and reading what it printed."""
from __future__ import annotations

import json
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EMMA = os.path.join(REPO, "tests", "data", "austen_emma.txt")


def cli_env(*, drop: tuple[str, ...] = (), **extra: str) -> dict:
    """The environment of a CLI subprocess: TensorFlow's C++ logging quiet, the repository importable, and
    none of the caller's TF_CONFIG (a multi-worker test sets its own), TEXTRAIN_VERBOSE (errors must be one
    line) or the names in `drop`; `extra` on top."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
    for name in ("TF_CONFIG", "TEXTRAIN_VERBOSE", *drop):
        env.pop(name, None)
    env.update(extra)
    return env


def final_figures(stdout: str) -> dict:
    """The figures of a trainer CLI's last `final {json}` line."""
    lines = [line for line in stdout.splitlines() if line.startswith("final ")]
    assert lines, stdout[-2000:]
    return json.loads(lines[-1][len("final "):])


def emma_speech_rows() -> list[tuple[str, str]]:
    """The fine-tuning tests' task: (sentence without quote marks, speech|narration) for each line of Emma."""
    rows = []
    for line in open(EMMA, encoding="utf-8"):
        line = line.strip()
        if line:
            rows.append((line.replace('"', "").replace("\t", " "), "speech" if '"' in line else "narration"))
    return rows
