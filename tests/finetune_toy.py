"""A tiny sentence-classification problem for the fine-tuning tests (registered as `toy_sentiment`).

Sentences are drawn from two small word lists; the label says which list dominates. Records carry the
fine-tuning features (input_ids, input_mask, segment_ids, label_ids, is_real_example, example_index) in
the BERT layout, or XLNet's (`layout="xlnet"`: left padding, float input_mask 1 = pad, <cls> last); it is a
`framework.tasks.FinetuneTask` (label list, label count, its own metrics; no vocabulary file to export).
"""
from __future__ import annotations

import dataclasses
import random
from typing import Iterator

import numpy as np
import tensorflow as tf

from textrain.framework.registry import register_problem
from textrain.framework.tasks import FinetuneTask

POS = ["good", "great", "fine", "nice", "happy", "bright"]
NEG = ["bad", "awful", "poor", "sad", "dark", "grim"]
FILL = ["the", "a", "film", "was", "and", "very", "story", "plot"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + POS + NEG + FILL


@dataclasses.dataclass
class ToySentimentHParams:
    max_seq_length: int = 16
    layout: str = "bert"        # bert | xlnet
    num_train: int = 96
    num_dev: int = 20


@register_problem(name="toy_sentiment")
class ToySentiment(FinetuneTask):
    HParams = ToySentimentHParams
    task_type = "classification"
    main_metric = "accuracy"

    def dataset_splits(self):
        return [("train", 2), ("dev", 1), ("test", 1)]

    def label_list(self, data_dir):
        return ["neg", "pos"]

    def num_labels(self, data_dir):
        return 2

    def eval_splits(self):
        return ["dev"]

    def predict_splits(self):
        return ["test"]

    def has_labels(self, data_dir, split):
        return True

    def serving_vocab(self, data_dir):
        return None

    def compute_metrics(self, labels, outputs):
        labels = np.reshape(labels, [-1])
        return {"accuracy": float(np.mean(np.argmax(outputs, -1) == labels))}

    def sentences(self, split: str):
        n = {"train": self.hparams.num_train, "dev": self.hparams.num_dev, "test": 7}[split]
        rng = random.Random(f"toy/{split}")
        for i in range(n):
            label = rng.randrange(2)
            words = [rng.choice(POS if label else NEG) for _ in range(2)] + [rng.choice(FILL) for _ in range(rng.randrange(1, 6))]
            rng.shuffle(words)
            yield i, " ".join(words), label

    def encode(self, text: str) -> dict:
        L = self.hparams.max_seq_length
        ids = [VOCAB.index(w) for w in text.split()][: L - 2]
        if self.hparams.layout == "xlnet":  # A <sep> <cls>, left padded, 1 = pad
            ids = ids + [3, 2]
            pad = L - len(ids)
            return {"input_ids": [0] * pad + ids, "input_mask": [1.0] * pad + [0.0] * len(ids),
                    "segment_ids": [4] * pad + [0] * (len(ids) - 1) + [2]}
        ids = [2] + ids + [3]
        pad = L - len(ids)
        return {"input_ids": ids + [0] * pad, "input_mask": [1] * len(ids) + [0] * pad, "segment_ids": [0] * L}

    def generate_samples(self, data_dir, tmp_dir, split) -> Iterator[dict]:
        for i, text, label in self.sentences(split):
            yield dict(self.encode(text), label_ids=label, is_real_example=1, example_index=i)

    def manifest_settings(self, data_dir):
        return dict(super().manifest_settings(data_dir), vocab_size=len(VOCAB), num_labels=2,
                    label_list=["neg", "pos"], task_type="classification")

    def example_reading_spec(self):
        L = self.hparams.max_seq_length
        mask = tf.float32 if self.hparams.layout == "xlnet" else tf.int64
        return {"input_ids": tf.io.FixedLenFeature([L], tf.int64), "input_mask": tf.io.FixedLenFeature([L], mask),
                "segment_ids": tf.io.FixedLenFeature([L], tf.int64), "label_ids": tf.io.FixedLenFeature([], tf.int64),
                "is_real_example": tf.io.FixedLenFeature([], tf.int64),
                "example_index": tf.io.FixedLenFeature([], tf.int64)}
