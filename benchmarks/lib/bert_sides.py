"""BERT datagen side by side (bench_bert_datagen.py, tests/test_golden_originals.py): the original
create_pretraining_data.py and ours with the same settings, and the statistics their records are compared by."""
from __future__ import annotations

import os
import shutil
import sys

from benchmarks.lib import same_run

REPO = same_run.REPO


PREDS = 20


def settings(args) -> list[str]:
    return [f"--max_seq_length={args.max_seq_length}", f"--max_predictions_per_seq={PREDS}",
            "--masked_lm_prob=0.15", "--short_seq_prob=0.1", f"--dupe_factor={args.dupe_factor}",
            "--random_seed=12345", "--do_lower_case=True"]


def ours(args, corpus: str, vocab_file: str, workers: int, out_dir: str) -> dict:
    shutil.rmtree(out_dir, ignore_errors=True)
    code = ("import sys; import textrain.problems.bert_pretrain; from textrain.framework import datagen; "
            "sys.argv[0] = 'textrain-datagen'; datagen.run()")
    cmd = [sys.executable, "-c", code, "--problem=bert_pretrain", f"--data_dir={out_dir}",
           f"--input_file={corpus}", f"--vocab_file={vocab_file}", f"--num_workers={workers}", *settings(args)]
    result = same_run.run_measured(cmd, adopt_orphans=True)  # the forkserver's workers count too
    from textrain.framework import fileio
    manifest = fileio.read_json(os.path.join(out_dir, "bert_pretrain", "bert_pretrain-train.manifest.json"))
    result.update(instances=manifest["num_examples"], workers=workers)
    return result


def original(args, corpus: str, vocab_file: str, out: str) -> dict:
    cmd = same_run.original_cmd("bert/create_pretraining_data.py", [
        f"--input_file={corpus}", f"--output_file={out}", f"--vocab_file={vocab_file}", *settings(args)])
    result = same_run.run_measured(cmd)
    import tensorflow as tf
    result.update(instances=sum(1 for _ in tf.data.TFRecordDataset(out)), workers=1)
    return result


def record_statistics(files: list[str], max_seq_length: int, mask_id: int, limit: int = 50_000
                      ) -> dict[str, float]:
    """NSP balance, lengths, masked share and the 80/10/10 split over the first `limit` records."""
    import numpy as np
    import tensorflow as tf
    spec = {"input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
            "input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
            "masked_lm_positions": tf.io.FixedLenFeature([PREDS], tf.int64),
            "masked_lm_ids": tf.io.FixedLenFeature([PREDS], tf.int64),
            "masked_lm_weights": tf.io.FixedLenFeature([PREDS], tf.float32),
            "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64)}
    ds = tf.data.TFRecordDataset(files).take(limit).map(lambda r: tf.io.parse_single_example(r, spec))
    d = {k: v.numpy() for k, v in next(iter(ds.batch(limit))).items()}
    n, w = d["input_mask"].sum(1), d["masked_lm_weights"] > 0
    now = d["input_ids"][np.nonzero(w)[0], d["masked_lm_positions"][w]]
    label = d["masked_lm_ids"][w]
    return {"random next (NSP label 1)": d["next_sentence_labels"].mean(),
            "full length": (n == max_seq_length).mean(), "mean length": n.mean(),
            "masked per token": w.sum() / n.sum(), "[MASK]": (now == mask_id).mean(),
            "kept": (now == label).mean(), "random id": ((now != mask_id) & (now != label)).mean()}
