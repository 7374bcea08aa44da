"""The gin configs shipped in the package (`configs/`), found by name.

`--gin_file=bert_base.gin` and `include 'bert_base.gin'` resolve against the installed package's
`textrain/configs` (wheel or editable install alike, through importlib.resources), so a config named
without a folder works from any directory; a path that exists is used as given, so a user's own file of the
same name wins. A name that is neither is one error line listing the shipped configs.
"""
from __future__ import annotations

import os
from importlib import resources

import gin

from textrain.framework.errors import UserError


def configs_dir() -> str:
    """The folder of the shipped configs (a real folder: the wheel installs it unzipped)."""
    return str(resources.files("textrain") / "configs")


def shipped() -> list[str]:
    """The names of the shipped gin configs, sorted."""
    return sorted(f for f in os.listdir(configs_dir()) if f.endswith(".gin"))


def resolve(gin_file: str) -> str:
    """A --gin_file value -> the file to parse: the path itself if it exists, else the shipped config of
    that name."""
    if os.path.exists(gin_file) or "://" in gin_file:  # gs:// and other gfile paths: gin reads them as given
        return gin_file
    packaged = os.path.join(configs_dir(), gin_file)
    if os.path.isfile(packaged):
        return packaged
    raise UserError(f"--gin_file={gin_file}: no such file, and no shipped config of that name "
                    f"(shipped: {', '.join(shipped())})")


def prepare(gin_files: list[str]) -> list[str]:
    """Resolve each --gin_file and let `include` find files beside them and in the shipped configs."""
    resolved = [resolve(f) for f in gin_files]
    gin.add_config_file_search_path(configs_dir())
    for f in resolved:
        if "://" not in f:
            gin.add_config_file_search_path(os.path.dirname(os.path.abspath(f)))
    return resolved
