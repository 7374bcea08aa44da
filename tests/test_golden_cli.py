"""Goldens: the command-line surface. Each CLI's own flags (name, default, choices, as
`--helpfull` shows them; absl's and TensorFlow's flags left out), the gin parameters of every textrain
configurable (name and default). (That every shipped configs/*.gin parses is tests/test_finetune_cli.py's.)

tests/golden/cli.json was written by `python3 tests/test_golden_cli.py --write` on the code before the
refactors. A flag that moves to another module stays the same flag here; one renamed, dropped or given a new
default fails, with the difference in the message. New flags and bindings pass (a task may add them).
"""
from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
GOLDEN = os.path.join(HERE, "golden", "cli.json")
CLIS = {  # console script -> module run by `python -m`
    "textrain-datagen": "textrain.framework.datagen",
    "textrain-train-gpu": "textrain.trainers.train_gpu",
    "textrain-train-tpu": "textrain.trainers.train_tpu",
    "textrain-finetune": "textrain.trainers.finetune",
    "textrain-decode": "textrain.trainers.decode",
    "textrain-avg-checkpoints": "textrain.trainers.avg_checkpoints",
}
_SECTION = re.compile(r"^(\S.*):$")
_FLAG = re.compile(r"^  (?:-\S+,)?--(\[no\])?([\w.]+):(?: <([^>]*)>:)?")
_DEFAULT = re.compile(r"^    \(default: (.*)\)$")


def flag_surface(helpfull: str) -> dict[str, dict]:
    """--helpfull text -> {flag: {"default": str | None, "choices": str | None, "bool": bool}} for the flags
    of sections other than absl's and TensorFlow's."""
    flags, section, current = {}, "", None
    for line in helpfull.splitlines():
        m = _SECTION.match(line)
        if m:
            section, current = m.group(1), None
            continue
        if section.startswith(("absl.", "tensorflow.")) or section in ("flags", "Decisions"):
            continue
        m = _FLAG.match(line)
        if m:
            current = flags[m.group(2)] = {"default": None, "choices": m.group(3), "bool": bool(m.group(1))}
            continue
        m = _DEFAULT.match(line)
        if m and current is not None:
            current["default"] = m.group(1)
    return dict(sorted(flags.items()))


def cli_surface(cli: str) -> dict[str, dict]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-m", CLIS[cli], "--helpfull"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert "--[no]helpfull" in proc.stdout, proc.stderr[-2000:]
    return flag_surface(proc.stdout)


def gin_surface() -> dict[str, dict[str, str]]:
    """{configurable name: {parameter: repr(default)}} for textrain's gin configurables."""
    import gin

    from textrain.framework import registry
    from textrain.trainers import finetune  # noqa: F401  (registers `finetune`)

    registry.import_builtins()
    out = {}
    for _, configurable in gin.config._REGISTRY.items():
        if not configurable.module.startswith("textrain"):
            continue
        params = inspect.signature(configurable.wrapped).parameters
        out[configurable.name] = {p.name: "REQUIRED" if p.default is gin.REQUIRED else repr(p.default)
                                  for p in params.values()}
    return dict(sorted(out.items()))


def _golden() -> dict:
    with open(GOLDEN, encoding="utf-8") as f:
        return json.load(f)


def _lost(got: dict, want: dict) -> list[str]:
    """What the golden has that `got` lost or changed. New entries are allowed: a task may add a flag or a
    binding (the golden is rewritten when it is merged); none may go or change."""
    lines = [f"gone: {k} {want[k]}" for k in sorted(set(want) - set(got))]
    return lines + [f"changed: {k} {want[k]} -> {got[k]}" for k in sorted(set(got) & set(want)) if got[k] != want[k]]


@pytest.mark.parametrize("cli", sorted(CLIS))
def test_cli_flags_are_unchanged(cli):
    lost = _lost(cli_surface(cli), _golden()["flags"][cli])
    assert not lost, f"{cli}: " + "; ".join(lost)


def test_gin_parameters_are_unchanged():
    got, want = gin_surface(), _golden()["gin"]
    assert set(want) <= set(got), f"gin configurables gone: {sorted(set(want) - set(got))}"
    for name in want:
        lost = _lost(got[name], want[name])
        assert not lost, f"{name}: " + "; ".join(lost)


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python3 tests/test_golden_cli.py --write   (only on the code the goldens pin)")
    sys.path.insert(0, os.path.dirname(REPO))
    golden = {"flags": {cli: cli_surface(cli) for cli in sorted(CLIS)}, "gin": gin_surface()}
    with open(GOLDEN, "w", encoding="utf-8") as f:
        json.dump(golden, f, indent=1, sort_keys=True)
        f.write("\n")


@pytest.mark.parametrize("cli,flag", [("textrain-train-gpu", "--problem"), ("textrain-datagen", "--text_field")])
def test_help_lists_the_cli_flags(cli: str, flag: str) -> None:
    """absl's --help shows the main module's key flags only; ours live in other modules (framework/cli.py adopts
    them), so --help names them under the CLI's docstring (absl's --help exits 1, as in the originals)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-m", CLIS[cli], "--help"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stdout.startswith(cli + ":"), proc.stdout[:300]
    assert re.search(rf"^\s+{flag}:", proc.stdout, re.M), proc.stdout[-2000:]
