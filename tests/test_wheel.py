"""The package as a user installs it: gin configs by name, and the wheel in a fresh venv.

Fast: `--gin_file=bert_base.gin` resolves to the shipped config from any directory, a path that exists wins
over the shipped name, an unknown name is one line listing the shipped configs.
Slow: the wheel is built from a copy of the tree and installed --no-deps into a `--system-site-packages` venv
(no editable link: the venv's own site-packages comes first); `textrain-finetune --help` runs there, and a
run named only by shipped config names gets past parsing them (it stops at the first required binding).
"""
from __future__ import annotations

import glob
import os
import shutil
import site
import subprocess
import sys

import pytest

from textrain.framework.errors import UserError
from textrain.trainers import gin_configs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_shipped_config_resolves_by_name_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = gin_configs.resolve("bert_base.gin")
    assert os.path.samefile(path, os.path.join(REPO, "configs", "bert_base.gin"))
    assert "glue_mrpc.gin" in gin_configs.shipped() and "_bert.gin" in gin_configs.shipped()


def test_an_existing_path_wins_over_the_shipped_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bert_base.gin").write_text("finetune.model = 'bert_classifier'\n")
    assert gin_configs.resolve("bert_base.gin") == "bert_base.gin"


def test_unknown_name_is_one_line_listing_the_shipped_configs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=r"^--gin_file=bert_huge.gin: no such file, .*bert_base.gin") as e:
        gin_configs.resolve("bert_huge.gin")
    assert "\n" not in str(e.value)


def _copy_tree(dst: str) -> None:
    shutil.copytree(REPO, dst, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", "demo_out"))


def see_outer_venv(python: str, run) -> None:
    """Inside a venv (how most users install), `-m venv --system-site-packages` gives the new venv the BASE
    interpreter's packages, not this venv's, where TensorFlow and gin are: a .pth file adds this venv's
    site-packages after the new venv's own. Plain path lines: the outer venv's own .pth files (an editable
    textrain's finder) are not run, so the wheel installed in the new venv is what imports."""
    if sys.prefix == sys.base_prefix:
        return
    outer = [p for p in site.getsitepackages() if os.path.realpath(p).startswith(os.path.realpath(sys.prefix))]
    purelib = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()
    with open(os.path.join(purelib, "outer_venv.pth"), "w") as f:
        f.write("".join(p + "\n" for p in outer))


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv_and_finds_configs_by_name(tmp_path):
    src, wheels, venv = str(tmp_path / "src"), str(tmp_path / "wheels"), str(tmp_path / "venv")
    _copy_tree(src)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"

    def run(*cmd: str, cwd: str = str(tmp_path)) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)

    built = run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", wheels, src)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = glob.glob(os.path.join(wheels, "textrain-*.whl"))
    assert run(sys.executable, "-m", "venv", "--system-site-packages", venv).returncode == 0
    python, bin_dir = os.path.join(venv, "bin", "python"), os.path.join(venv, "bin")
    see_outer_venv(python, run)
    installed = run(python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", wheel)
    assert installed.returncode == 0, installed.stderr[-3000:]

    where = run(python, "-c", "import textrain, os; print(os.path.realpath(textrain.__file__))")
    assert where.stdout.strip().startswith(os.path.realpath(venv)), where.stdout + where.stderr
    # --help of a console script (whose main module is pip's wrapper, with no flags and no doc) shows the CLI's
    # docstring and its flags (framework/cli.py); --helpfull lists them too.
    helped = run(os.path.join(bin_dir, "textrain-finetune"), "--help")
    assert "--gin_file" in helped.stdout and "fine-tune a pretrained encoder" in helped.stdout, helped.stdout[-3000:]
    assert "Traceback" not in helped.stderr, helped.stderr[-3000:]
    helpfull = run(os.path.join(bin_dir, "textrain-finetune"), "--helpfull")
    assert "--gin_file" in helpfull.stdout and "--gin_param" in helpfull.stdout, helpfull.stderr[-3000:]
    lookup = run(python, "-c", "from textrain.trainers import gin_configs; print(gin_configs.resolve('bert_base.gin'))")
    assert lookup.stdout.strip().startswith(venv) and lookup.stdout.strip().endswith("configs/bert_base.gin")
    # Both files by name (glue_mrpc.gin after bert_base.gin, whose `include '_bert.gin'` is found too): parsing
    # succeeds, and the run stops at the first binding only the user can give.
    by_name = run(os.path.join(bin_dir, "textrain-finetune"), "--gin_file=bert_base.gin", "--gin_file=glue_mrpc.gin")
    assert by_name.returncode != 0
    assert "Required bindings for `finetune` not provided in config: ['data_dir'" in by_name.stderr, \
        by_name.stderr[-3000:]
