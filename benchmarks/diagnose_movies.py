"""Why a pretrained start fine-tunes worse on the movie task: two checks on a `bench_finetune_movies.py`
work folder (the readings are in benchmarks/README.md).

    python3 benchmarks/diagnose_movies.py --work /tmp/t11/tapt [--runs electra_pretrained_lr0.0003_seed1,...]

1. Prediction balance: each fine-tuned run in --runs (default: every run folder) is restored from its last
   checkpoint and predicts the TRAIN and DEV records (the fine-tune's own tsv_classification shards) with
   dropout off and on: accuracy and the share predicted as label id 1. A model that fits train but puts
   nearly all of dev on one side has learned to tell seen from unseen text, not the labels.
2. Frozen-feature probe (--probe): the mean of the input word embeddings over each sentence (padding
   excluded), standardised, into a logistic regression fitted on train, accuracy on dev; for the BERT
   pretraining run of the folder and for random BERTs of the same shape (three seeds). It asks whether the pretrained
   embeddings carry more polarity than random ones.
"""
from __future__ import annotations

import argparse
import glob
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.bench_finetune_movies import logistic_regression_accuracy  # noqa: E402

FEATURES = ("input_ids", "input_mask", "segment_ids", "label_ids")


def read_split(work: str, split: str) -> dict[str, np.ndarray]:
    """The fine-tune's records of `split` as `[N, L]` arrays (label_ids `[N]`), in file order."""
    import tensorflow as tf
    files = sorted(glob.glob(os.path.join(work, "ft_data_wp", "tsv_classification",
                                          f"tsv_classification-{split}-*.tfrecord")))
    if not files:
        raise SystemExit(f"{work}: no fine-tuning records of split {split!r} (run bench_finetune_movies.py first)")
    spec = {k: tf.io.VarLenFeature(tf.int64) for k in FEATURES}
    rows = {k: [] for k in FEATURES}
    for batch in tf.data.TFRecordDataset(files).batch(512).map(lambda r: tf.io.parse_example(r, spec)):
        for k in FEATURES:
            rows[k].append(tf.sparse.to_dense(batch[k]).numpy().astype(np.int32))
    out = {k: np.concatenate(v) for k, v in rows.items()}
    out["label_ids"] = out["label_ids"][:, 0]
    return out


def build_classifier(work: str, run: str, vocab_size: int):
    from textrain.models.bert import BertClassifier, BertConfig
    from textrain.models.electra import ElectraClassifier, ElectraConfig
    if run.startswith("electra"):
        return ElectraClassifier(ElectraConfig.from_json_file(os.path.join(work, "electra_config.json")), num_labels=2)
    return BertClassifier(BertConfig.preset("tiny", vocab_size=vocab_size), num_labels=2)


def restore(model, directory: str) -> None:
    import tensorflow as tf
    path = tf.train.latest_checkpoint(directory)
    if path is None:
        raise SystemExit(f"{directory}: no checkpoint")
    tf.train.Checkpoint(model=model).read(path).expect_partial()


def prediction_balance(work: str, runs: list[str], vocab_size: int, splits: dict) -> None:
    print("| run | split | dropout | accuracy | predicted label 1 |\n|---|---|---|---|---|")
    for run in runs:
        model = build_classifier(work, run, vocab_size)
        restore(model, os.path.join(work, "runs", run))
        for split, data in splits.items():
            for training in (False, True):
                logits = np.concatenate([
                    model.logits({k: v[s:s + 256] for k, v in data.items()}, training=training).numpy()
                    for s in range(0, len(data["label_ids"]), 256)])
                pred = logits.argmax(-1)
                print(f"| {run} | {split} | {'on' if training else 'off'} | "
                      f"{np.mean(pred == data['label_ids']):.4f} | {np.mean(pred == 1):.3f} |")


def mean_embedding(model, data: dict) -> np.ndarray:
    table = model.bert.embeddings.weights[0].numpy()  # word embeddings [vocab, hidden]
    mask = data["input_mask"][..., None].astype(np.float32)
    return (table[data["input_ids"]] * mask).sum(1) / mask.sum(1)


def probe(work: str, vocab_size: int, splits: dict) -> None:
    import tensorflow as tf

    from textrain.models.bert import BertConfig, BertPretrainer
    print("| encoder | dev accuracy of a logistic regression on mean input embeddings |\n|---|---|")
    for name, seed in (("pretrained", 1), ("random, seed 1", 1), ("random, seed 2", 2), ("random, seed 3", 3)):
        tf.keras.utils.set_random_seed(seed)
        model = BertPretrainer(BertConfig.preset("tiny", vocab_size=vocab_size))
        if name == "pretrained":
            restore(model, os.path.join(work, "pretrain_bert"))
        x, xd = (mean_embedding(model, splits[s]) for s in ("train", "dev"))
        mu, sd = x.mean(0), x.std(0) + 1e-6
        bias = lambda f: np.c_[(f - mu) / sd, np.ones(len(f))]  # noqa: E731
        acc = logistic_regression_accuracy(bias(x), splits["train"]["label_ids"].astype(np.float32),
                                           bias(xd), splits["dev"]["label_ids"].astype(np.float32),
                                           steps=2000, lr=0.5, l2=1e-3)
        print(f"| BERT tiny, {name} | {acc:.4f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", required=True, help="a bench_finetune_movies.py --work folder")
    ap.add_argument("--runs", default="", help="comma list of run folder names under --work/runs (default: all)")
    ap.add_argument("--probe", action="store_true", help="also the frozen-feature probe (needs pretrain_bert)")
    args = ap.parse_args()
    vocab = os.path.join(args.work, "data", "bert_pretrain", "vocab.txt")
    with open(vocab, encoding="utf-8") as f:
        vocab_size = sum(1 for _ in f)
    splits = {s: read_split(args.work, s) for s in ("train", "dev")}
    runs = [r for r in args.runs.split(",") if r] or sorted(os.listdir(os.path.join(args.work, "runs")))
    prediction_balance(args.work, runs, vocab_size, splits)
    if args.probe:
        probe(args.work, vocab_size, splits)


if __name__ == "__main__":
    main()
