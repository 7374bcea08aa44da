"""XLNet datagen side by side (bench_xlnet_datagen.py, tests/test_golden_originals.py): the original
data_utils.py and ours with the same settings, and the statistics their records are compared by."""
from __future__ import annotations

import glob
import json
import os
import shutil
import sys

from benchmarks.lib import same_run

REPO = same_run.REPO


SETTINGS = dict(seq_len=128, reuse_len=64, num_predict=21, bsz_per_host=8, num_core_per_host=1, bi_data=True,
                mask_alpha=6, mask_beta=1, uncased=False, use_eod=True)


def _flag(v) -> str:
    return str(v) if not isinstance(v, bool) else ("True" if v else "False")


def run_original(corpus: str, sp_model: str, work: str) -> dict:
    save = os.path.join(work, "original")
    shutil.rmtree(save, ignore_errors=True)
    args = [f"--sp_path={sp_model}", f"--input_glob={corpus}", f"--save_dir={save}", "--use_tpu=False",
            "--task=0", "--num_task=1", "--pass_id=0", "--num_passes=1", "--split=train"]
    args += [f"--{k}={_flag(v)}" for k, v in SETTINGS.items()]
    result = _measured(same_run.original_cmd("xlnet/data_utils.py", args))
    [info] = glob.glob(os.path.join(save, "tfrecords", "record_info-*.json"))
    with open(info) as f:
        result["records"] = json.load(f)["num_batch"] * SETTINGS["bsz_per_host"]
    result["files"] = sorted(glob.glob(os.path.join(save, "tfrecords", "*.tfrecords")))
    return result


def run_ours(corpus: str, sp_model: str, work: str, workers: int, tag: str) -> dict:
    data_dir = os.path.join(work, f"ours_{tag}_w{workers}")
    shutil.rmtree(data_dir, ignore_errors=True)
    cmd = [sys.executable, "-m", "textrain.framework.datagen", "--problem=xlnet_pretrain", f"--data_dir={data_dir}",
           f"--input_file={corpus}", f"--sp_model={sp_model}", f"--num_workers={workers}", "--seed=0"]
    cmd += [f"--{k}={_flag(v)}" for k, v in SETTINGS.items()]
    result = _measured(cmd)
    with open(os.path.join(data_dir, "xlnet_pretrain", "xlnet_pretrain-train.manifest.json")) as f:
        result["records"] = json.load(f)["num_examples"]
    result["files"] = sorted(glob.glob(os.path.join(data_dir, "xlnet_pretrain", "*.tfrecord")))
    return result


def _measured(cmd: list[str]) -> dict:
    load0 = os.getloadavg()[0]
    # adopt_orphans: the datagen's multiprocessing fork server outlives it; its and its workers' CPU counts.
    result = same_run.run_measured(cmd, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), adopt_orphans=True)
    result["load"] = (load0, os.getloadavg()[0])
    return result


def record_statistics(files: list[str]) -> dict[str, float]:
    """What the records look like (both sides must agree in distribution, not bytes)."""
    import numpy as np
    import tensorflow as tf
    length = SETTINGS["seq_len"]
    spec = {"input": tf.io.FixedLenFeature([length], tf.int64),
            "is_masked": tf.io.FixedLenFeature([length], tf.int64),
            "seg_id": tf.io.FixedLenFeature([length], tf.int64),
            "label": tf.io.FixedLenFeature([1], tf.int64)}
    ds = tf.data.TFRecordDataset(files).map(lambda r: tf.io.parse_single_example(r, spec)).batch(1 << 16)
    parts = [{k: v.numpy() for k, v in b.items()} for b in ds]
    d = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    masked = d["is_masked"].astype(bool)
    reuse = SETTINGS["reuse_len"]
    return {"label 1 (B continues A)": d["label"].mean(), "masked per record": masked.sum(1).mean(),
            "masked in reuse part": masked[:, :reuse].sum(1).mean(),
            "A share of A+B": ((d["seg_id"][:, reuse:] == 0).sum(1) - 1).mean() / (length - reuse - 3),
            "masked <sep>/<cls> per record": (masked & ((d["input"] == 3) | (d["input"] == 4))).sum(1).mean()}
