"""Small problems used by the framework tests (importable by spawned datagen workers)."""
from __future__ import annotations

import dataclasses
import hashlib
import os
import signal
from typing import Iterator

import tensorflow as tf

from textrain.framework import corpus
from textrain.framework.generator import shard_rng
from textrain.framework.problem import Problem
from textrain.framework.registry import register_problem


class ByteEncoder:
    """Ids = UTF-8 bytes + 2 (0 pad, 1 EOS); enough to exercise the framework."""

    vocab_size = 258
    special_ids = {"<pad>": 0, "<EOS>": 1}

    def encode(self, text: str) -> list[int]:
        return [b + 2 for b in text.encode("utf-8")] + [1]

    def decode(self, ids) -> str:
        return bytes(i - 2 for i in ids if i > 1).decode("utf-8", "replace")

    def fingerprint(self) -> str:
        return hashlib.sha256(b"bytes").hexdigest()


@dataclasses.dataclass
class ToyHParams:
    input_file: str = ""
    max_length: int = 64


@register_problem
class ToyLines(Problem):
    """Each non-empty line is one example: targets = bytes of the line, plus a random draw."""

    HParams = ToyHParams

    def dataset_splits(self):
        return [("train", 4), ("dev", 1)]

    def feature_encoders(self, data_dir):
        return {"targets": ByteEncoder()}

    def generate_samples(self, data_dir, tmp_dir, split) -> Iterator[dict]:
        for doc in corpus.read_documents(self.hparams.input_file):
            for i, line in enumerate(doc):
                if (split == "dev") == (i % 10 == 9):
                    yield {"targets": line[: self.hparams.max_length]}

    def generate_shard(self, data_dir, tmp_dir, split, shard_id, num_shards, seed):
        # Test hook (not a setting): the process SIGKILLs itself on reaching this shard.
        if str(shard_id) == os.environ.get("TOY_DIE_AT_SHARD"):
            os.kill(os.getpid(), signal.SIGKILL)
        rng = shard_rng(seed, split, shard_id)
        for ex in super().generate_shard(data_dir, tmp_dir, split, shard_id, num_shards, seed):
            yield dict(ex, draw=rng.randrange(1000))

    def example_reading_spec(self):
        return {"targets": tf.io.VarLenFeature(tf.int64), "draw": tf.io.FixedLenFeature([1], tf.int64)}

    def example_length(self, example):
        return tf.shape(example["targets"])[0]
