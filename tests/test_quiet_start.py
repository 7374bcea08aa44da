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


def _stderr(module: str, args: tuple[str, ...], marker: str, **env: str) -> str:
    """The CLI's stderr, run from a user's environment (no TF_CPP_MIN_LOG_LEVEL) until `marker` shows it got past
    its TensorFlow import."""
    proc = subprocess.run([sys.executable, "-m", module, *args], cwd=REPO,
                          env=cli_env(drop=("TF_CPP_MIN_LOG_LEVEL",), **env), capture_output=True, text=True,
                          timeout=300)
    assert marker in proc.stdout + proc.stderr, proc.stderr[-2000:]
    return proc.stderr


# train-gpu's --helpfull lists the problem flags (TensorFlow imported for the registry); finetune without its
# required bindings stops at them, after importing the built-ins.
@pytest.mark.parametrize("module,args,marker", [
    ("textrain.trainers.train_gpu", ("--helpfull",), "--[no]helpfull"),
    ("textrain.trainers.finetune", (), "Required bindings for `finetune`")])
def test_a_cli_hides_tensorflows_startup_lines_unless_asked(module, args, marker):
    quiet = _stderr(module, args, marker)
    assert not STARTUP.search(quiet), quiet[-2000:]
    shown = _stderr(module, (*args, "--verbose"), marker)
    if not STARTUP.search(shown):
        pytest.skip("this TensorFlow build prints no start-up lines to hide")
    assert STARTUP.search(_stderr(module, args, marker, TF_CPP_MIN_LOG_LEVEL="0"))  # the user's own level
