"""The CLIs start quietly: TensorFlow's C++ start-up lines (`I0000 ... oneDNN custom operations are on`, the
CPU-feature notice) are hidden unless --verbose or the user's own TF_CPP_MIN_LOG_LEVEL asks for them
(framework/lazy_tf.quiet_start). Each CLI runs as a subprocess with the environment a user has."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from helpers import cli_env

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
STARTUP = re.compile(r"^I\d{4} |oneDNN custom operations|absl::InitializeLog", re.M)


def _stderr(module: str, *args: str, **env: str) -> str:
    proc = subprocess.run([sys.executable, "-m", module, "--helpfull", *args], cwd=REPO,
                          env=cli_env(drop=("TF_CPP_MIN_LOG_LEVEL",), **env), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and "--[no]helpfull" in proc.stdout, proc.stderr[-2000:]
    return proc.stderr


@pytest.mark.parametrize("module", ["textrain.trainers.train_gpu", "textrain.trainers.finetune"])
def test_a_cli_hides_tensorflows_startup_lines_unless_asked(module):
    quiet = _stderr(module)
    assert not STARTUP.search(quiet), quiet[-2000:]
    shown = _stderr(module, "--verbose")
    if not STARTUP.search(shown):
        pytest.skip("this TensorFlow build prints no start-up lines to hide")
    assert STARTUP.search(_stderr(module, TF_CPP_MIN_LOG_LEVEL="0"))  # the user's own level: nothing hidden
