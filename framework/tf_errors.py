"""TensorFlow's record-reading errors as messages that name the file: the diagnostics of framework/cli.py.

tf.data reports a damaged TFRecord as "corrupted record at N" without the file. `explain_data_loss` finds
the file among the ones the caller says were read (an explicit list: no record of opened files is kept
in this process) by reading each candidate longer than the offset with CRCs checked.
"""
from __future__ import annotations

import os
import re
from typing import Iterable

import numpy as np

from textrain.framework import fileio
from textrain.framework.errors import RecordError
from textrain.framework.lazy_tf import tf


def tf_message(error: Exception) -> str:
    """The first line of a TF error's message without its '{{function_node ...}}' and '[Op:...]' wrapping."""
    text = str(getattr(error, "message", error)).strip().splitlines()[0] if str(error).strip() else ""
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", text)
    return re.sub(r"\s*\[Op:[^\]]*\].*$", "", text).strip()


def verify_hint(path: str) -> str:
    """What to run to regenerate a damaged shard of `path`'s problem directory."""
    problem_dir = os.path.dirname(path)
    return (f"run textrain-datagen --verify --problem={os.path.basename(problem_dir)} "
            f"--data_dir={os.path.dirname(problem_dir) or '.'} (with the settings the data was made with) "
            f"to regenerate the damaged shards")


def count_records(path: str) -> int:
    """Number of records in one file, every record's CRC checked; DataLossError is re-raised naming the file."""
    try:
        return int(tf.data.TFRecordDataset(path).reduce(np.int64(0), lambda n, _: n + 1))
    except tf.errors.DataLossError as e:
        raise RecordError(f"{path}: corrupt TFRecord ({tf_message(e)}); {verify_hint(path)}") from None


def find_corrupt_file(paths: Iterable[str]) -> str | None:
    for p in paths:
        try:
            count_records(p)
        except RecordError:
            return p
        except tf.errors.NotFoundError:  # gone since: not the file that gave the data loss
            continue
    return None


def explain_data_loss(error: Exception, paths: Iterable[str]) -> RecordError:
    """Turn tf.data's file-less 'corrupted record at N' error into one that names the file and offset."""
    message = tf_message(error)
    offset = re.search(r"(corrupted|truncated) record at (\d+)", message)
    if offset:  # the damaged file is longer than the offset: read only those
        paths = [p for p in paths if fileio.exists(p) and fileio.stat(p).length > int(offset.group(2))]
    bad = find_corrupt_file(paths)
    where = bad if bad else "one of the input files"
    at = f" at byte offset {offset.group(2)}" if offset else ""
    kind = offset.group(1) if offset else "corrupt"
    hint = verify_hint(bad) if bad else "run textrain-datagen --verify on the data_dir to find and regenerate it"
    return RecordError(f"{where}: {kind} record{at} ({message}); {hint}")
