"""Text problem base classes, as tensor2tensor has them.

- `Text2TextProblem`: `inputs` -> `targets` (translation, summarisation), a SubwordTextEncoder per
  side (or one shared), EOS appended to both.
- `Text2ClassProblem`: `inputs` -> integer `label`.
- `Text2SelfProblem`: language modelling on `targets` only; `chop_length > 0` concatenates the encoded
  text of a shard and chops it into rows of that length (tensor2tensor's ChoppedTextProblem).

Vocabularies are built in `prepare` (once, before any shard) from the training samples' text, stored
in the problem's folder and reused when they exist.
"""
from __future__ import annotations

import itertools
import os
from typing import Iterator

import tensorflow as tf
from absl import logging

from framework import text_encoders
from framework.problem import DatasetSplit, Problem


class Text2TextProblem(Problem):
    """Subclasses implement `generate_samples` yielding {"inputs": str, "targets": str}."""

    approx_vocab_size: int = 2**13
    max_subtoken_length: int | None = None
    vocab_byte_budget: int = 10**7  # raw text per side read to count tokens for the vocabulary
    has_inputs: bool = True
    shared_vocab: bool = False

    # ------------------------------------------------------------------ vocabularies
    def vocab_filename(self, side: str) -> str:
        suffix = "shared" if self.shared_vocab else side
        return f"vocab.{self.name}.{suffix}.{self.approx_vocab_size}.subwords"

    def _vocab_sides(self) -> list[str]:
        if self.shared_vocab or not self.has_inputs:
            return ["targets"]
        return ["inputs", "targets"]

    def text_for_vocab(self, data_dir: str, tmp_dir: str, side: str) -> Iterator[str]:
        """Training text of one side (both sides when the vocabulary is shared), within the byte budget."""
        keys = ["inputs", "targets"] if self.shared_vocab and self.has_inputs else [side]
        budget = self.vocab_byte_budget * len(keys)
        for sample in self.generate_samples(data_dir, tmp_dir, DatasetSplit.TRAIN):
            for k in keys:
                budget -= len(sample[k].encode("utf-8"))
                yield sample[k]
            if budget <= 0:
                return

    def prepare(self, data_dir: str, tmp_dir: str) -> None:
        for side in self._vocab_sides():
            path = os.path.join(self.problem_dir(data_dir), self.vocab_filename(side))
            if tf.io.gfile.exists(path):
                continue
            logging.info("building %s (target size %d)", path, self.approx_vocab_size)
            encoder = text_encoders.SubwordTextEncoder.build_from_generator(
                self.text_for_vocab(data_dir, tmp_dir, side), self.approx_vocab_size,
                max_subtoken_length=self.max_subtoken_length)
            encoder.store_to_file(path)

    def feature_encoders(self, data_dir: str) -> dict:
        encoders = {}
        for side in self._vocab_sides():
            path = os.path.join(self.problem_dir(data_dir), self.vocab_filename(side))
            encoders[side] = text_encoders.SubwordTextEncoder(path)
        if self.has_inputs and "inputs" not in encoders:
            encoders["inputs"] = encoders["targets"]
        return encoders

    def encode_sample(self, sample: dict, encoders: dict) -> dict:
        out = dict(sample)
        for side in ("inputs", "targets"):
            if side in sample:
                out[side] = encoders[side].encode(sample[side]) + [text_encoders.EOS_ID]
        return out

    # ------------------------------------------------------------------ reading
    def example_reading_spec(self) -> dict:
        spec = {"targets": tf.io.VarLenFeature(tf.int64)}
        if self.has_inputs:
            spec["inputs"] = tf.io.VarLenFeature(tf.int64)
        return spec

    def example_length(self, example: dict) -> tf.Tensor:
        length = tf.shape(example["targets"])[0]
        if self.has_inputs:
            length = tf.maximum(length, tf.shape(example["inputs"])[0])
        return length


class Text2ClassProblem(Problem):
    """Subclasses implement `generate_samples` yielding {"inputs": str, "label": int} and
    `feature_encoders` returning {"inputs": Encoder}; `class_labels` names the classes."""

    class_labels: list[str] = []

    @property
    def num_classes(self) -> int:
        return len(self.class_labels)

    def encode_sample(self, sample: dict, encoders: dict) -> dict:
        label = int(sample["label"])
        if not 0 <= label < self.num_classes:
            raise ValueError(f"{self.name}: label {label} outside [0, {self.num_classes})")
        return {"inputs": encoders["inputs"].encode(sample["inputs"]), "label": label}

    def manifest_settings(self, data_dir: str) -> dict:
        return dict(super().manifest_settings(data_dir), class_labels=list(self.class_labels))

    def example_reading_spec(self) -> dict:
        return {"inputs": tf.io.VarLenFeature(tf.int64), "label": tf.io.FixedLenFeature([1], tf.int64)}

    def example_length(self, example: dict) -> tf.Tensor:
        return tf.shape(example["inputs"])[0]


class Text2SelfProblem(Problem):
    """Language modelling: `generate_samples` yields {"targets": str}; `chop_length` > 0 chops."""

    chop_length: int = 0

    def generate_shard(self, data_dir, tmp_dir, split, shard_id, num_shards, seed) -> Iterator[dict]:
        encoded = super().generate_shard(data_dir, tmp_dir, split, shard_id, num_shards, seed)
        if self.chop_length <= 0:
            yield from encoded
            return
        stream = itertools.chain.from_iterable(s["targets"] for s in encoded)
        while True:
            row = list(itertools.islice(stream, self.chop_length))
            if len(row) < self.chop_length:
                return  # the ragged tail is dropped, as tensor2tensor does
            yield {"targets": row}

    def encode_sample(self, sample: dict, encoders: dict) -> dict:
        return {"targets": encoders["targets"].encode(sample["targets"]) + [text_encoders.EOS_ID]}

    def example_reading_spec(self) -> dict:
        if self.chop_length > 0:
            return {"targets": tf.io.FixedLenFeature([self.chop_length], tf.int64)}
        return {"targets": tf.io.VarLenFeature(tf.int64)}
