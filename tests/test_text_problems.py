"""Text2ClassProblem and Text2SelfProblem (chopped language modelling) through the real driver."""
from __future__ import annotations

import os

import pytest
from helpers.toy_problems import ByteEncoder

from textrain.framework.problem import DataParams, ModeKeys
from textrain.framework.text_problems import Text2ClassProblem, Text2SelfProblem

EMMA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "austen_emma.txt")


def _emma_lines(n: int) -> list[str]:
    with open(EMMA, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()][:n]


class QuestionOrNot(Text2ClassProblem):
    """Label 1 for sentences ending in '?'."""

    class_labels = ["statement", "question"]

    def dataset_splits(self):
        return [("train", 2), ("dev", 1)]

    def feature_encoders(self, data_dir):
        return {"inputs": ByteEncoder()}

    def generate_samples(self, data_dir, tmp_dir, split):
        for i, line in enumerate(_emma_lines(400)):
            if (split == "dev") == (i % 5 == 0):
                yield {"inputs": line, "label": int(line.endswith("?"))}


class ChoppedEmma(Text2SelfProblem):
    chop_length = 32

    def dataset_splits(self):
        return [("train", 2), ("dev", 1)]

    def feature_encoders(self, data_dir):
        return {"targets": ByteEncoder()}

    def generate_samples(self, data_dir, tmp_dir, split):
        for i, line in enumerate(_emma_lines(200)):
            if (split == "dev") == (i % 5 == 0):
                yield {"targets": line}


def test_text2class_labels_and_reading(tmp_path):
    p = QuestionOrNot()
    manifests = p.generate_data(str(tmp_path), "", seed=1)
    assert manifests["train"]["settings"]["class_labels"] == ["statement", "question"]
    assert manifests["train"]["feature_max"]["label"] == 1
    ds = p.dataset(ModeKeys.EVAL, str(tmp_path), DataParams(batch_size=4, max_length=600), split="train")
    labels, texts = [], []
    for b in ds:
        labels += b["label"][:, 0].numpy().tolist()
        texts += [ByteEncoder().decode(row) for row in b["inputs"].numpy().tolist()]
    assert set(labels) == {0, 1}
    assert all((t.endswith("?")) == bool(lab) for t, lab in zip(texts, labels))


def test_text2class_rejects_out_of_range_labels(tmp_path):
    class Bad(QuestionOrNot):
        def generate_samples(self, data_dir, tmp_dir, split):
            yield {"inputs": "x", "label": 2}

    with pytest.raises(ValueError, match=r"label 2 outside \[0, 2\)"):
        Bad().generate_data(str(tmp_path), "")
    assert not list(tmp_path.rglob("*.manifest.json"))


def test_text2self_chops_the_stream_into_fixed_rows(tmp_path):
    p = ChoppedEmma()
    p.generate_data(str(tmp_path), "", seed=1)
    ds = p.dataset(ModeKeys.EVAL, str(tmp_path), DataParams(batch_size=8, drop_remainder=False),
                   split="train")
    rows = [r for b in ds for r in b["targets"].numpy().tolist()]
    assert rows and all(len(r) == 32 for r in rows)
    # Every row is a contiguous piece of its shard's stream: the shard's lines, encoded plus EOS,
    # concatenated (sample i goes to shard i % 2), chopped; the ragged tail is dropped.
    enc = ByteEncoder()
    train = [line for i, line in enumerate(_emma_lines(200)) if i % 5 != 0]
    streams = [bytes(x for line in train[k::2] for x in enc.encode(line) + [1]) for k in (0, 1)]
    assert all(any(bytes(r) in s for s in streams) for r in rows)
    assert len(rows) == sum(len(s) // 32 for s in streams)
