"""Folders that stand for corpus files: a `datasets` save_to_disk directory or a folder of corpus files."""
from __future__ import annotations

import json
import json.scanner
import os

from textrain.framework import fileio
from textrain.framework.corpus_formats.base import _EXTENSIONS, FormatError, _compression


def _corpus_name(name: str) -> bool:
    """A file name a folder of corpus files may hold: a known format's extension, maybe compressed."""
    base = name[:-len(_compression(name))] if _compression(name) else name
    return not name.startswith(".") and any(base.endswith(e) for e in _EXTENSIONS)


def directory_files(path: str) -> list[str]:
    """The corpus files a directory stands for: a `datasets` save_to_disk directory's Arrow files in their
    order, or else the files of a folder of corpus files named by their format (sorted); anything else is
    the error saying what each of the two needs."""
    found = dataset_dir_files(path)
    if found is not None:
        return found
    names = sorted(n for n in fileio.listdir(path) if not fileio.isdir(os.path.join(path, n)))
    files = [os.path.join(path, n) for n in names if _corpus_name(n)]
    if files:
        return files
    shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "") if names else "no files"
    kinds = ", ".join(sorted({"*" + e for e in _EXTENSIONS}))
    raise FormatError(f"{path}: a directory that is not a corpus: neither a `datasets` save_to_disk directory "
                      f"(it needs state.json and the Arrow files it lists) nor a folder of corpus files (it "
                      f"needs files named {kinds}, maybe .gz/.bz2/.zst); it holds {shown}")


def dataset_dir_files(path: str) -> list[str] | None:
    """The Arrow files of a `datasets` save_to_disk directory in their order (None: not such a directory)."""
    state = os.path.join(path, "state.json")
    if not fileio.exists(state):
        if fileio.exists(os.path.join(path, "dataset_dict.json")):
            raise FormatError(f"{path}: a DatasetDict directory; name one split's directory "
                              f"(e.g. {os.path.join(path, 'train')})")
        return None
    with fileio.open_file(state, "r") as f:
        files = [d["filename"] for d in json.load(f).get("_data_files", [])]
    if not files:
        raise FormatError(f"{path}/state.json lists no data files")
    return [os.path.join(path, name) for name in files]
