"""ELECTRA datagen side by side (bench_electra.py, tests/test_golden_originals.py): the original
build_pretraining_dataset.py and ours with the same settings, and what their records kept."""
from __future__ import annotations

import glob
import os
import shutil
import sys

from benchmarks.lib import same_run

REPO = same_run.REPO


SETTINGS = dict(max_seq_length=128)  # lower-case, blank lines separate documents: both sides' defaults, passed


def content_tokens(files: list[str], length: int) -> tuple[int, int]:
    """(examples, tokens other than [CLS]/[SEP]) in ELECTRA records: what the builder kept."""
    import tensorflow as tf
    spec = {"input_mask": tf.io.FixedLenFeature([length], tf.int64),
            "segment_ids": tf.io.FixedLenFeature([length], tf.int64)}
    examples = kept = 0
    for batch in tf.data.TFRecordDataset(files).batch(4096):
        parsed = tf.io.parse_example(batch, spec)
        mask, seg = parsed["input_mask"].numpy(), parsed["segment_ids"].numpy()
        examples += len(mask)
        kept += int(mask.sum()) - 2 * len(mask) - int((seg.max(axis=1) == 1).sum())
    return examples, kept


def run_original(corpus: str, vocab: str, work: str, tag: str) -> dict:
    """The original, unchanged, on a folder holding only `corpus` (it reads every file of --corpus-dir)."""
    folder = os.path.join(work, f"corpus_{tag}")
    os.makedirs(folder, exist_ok=True)
    link = os.path.join(folder, os.path.basename(corpus))
    if not os.path.exists(link):
        os.symlink(os.path.abspath(corpus), link)
    out = os.path.join(work, f"original_{tag}")
    result = same_run.run_measured(same_run.original_cmd("electra/build_pretraining_dataset.py", [
        f"--corpus-dir={folder}", f"--vocab-file={vocab}", f"--output-dir={out}",
        f"--max-seq-length={SETTINGS['max_seq_length']}", "--num-processes=1", "--do-lower-case"]),
        adopt_orphans=True)
    result["files"] = sorted(glob.glob(os.path.join(out, "pretrain_data.tfrecord-*")))
    return result


def run_ours(corpus: str, vocab: str, work: str, tag: str, workers: int, repo: str = REPO) -> dict:
    """`python -m framework.datagen --problem=electra_pretrain ...`, as a user runs it (from `repo`)."""
    data_dir = os.path.join(work, f"ours_{tag}_w{workers}" + ("" if repo == REPO else "_baseline"))
    shutil.rmtree(data_dir, ignore_errors=True)
    result = same_run.run_measured([
        sys.executable, "-m", "textrain.framework.datagen", "--problem=electra_pretrain", f"--data_dir={data_dir}",
        f"--input_file={corpus}", f"--vocab_file={vocab}", f"--num_workers={workers}",
        f"--max_seq_length={SETTINGS['max_seq_length']}", "--do_lower_case", "--blanks_separate_docs"],
        cwd=repo, adopt_orphans=True)
    import glob
    result["files"] = sorted(glob.glob(os.path.join(data_dir, "electra_pretrain", "*.tfrecord")))
    result["data_dir"] = data_dir
    return result
