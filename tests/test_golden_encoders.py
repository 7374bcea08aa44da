"""Goldens: the ids each encoder gives a fixed text (WordPiece both backends, cased and
uncased; SentencePiece cased and uncased; the t2t subword encoder, its vocabulary built here from counts).

tests/golden/encoders.json was written by `python3 tests/test_golden_encoders.py --write` on the code before
the refactors that gave a run one assembly: for each encoder the sha256 of its ids (JSON, one list per text) and the ids of the
first text, so a failure shows the first difference. Parity with the original tokenizers is checked in
tests/test_text_encoders.py; this pins that the refactors move the code without changing an id.
"""
from __future__ import annotations

import collections
import hashlib
import json
import os
import re
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from textrain.framework import encoders as te  # noqa: E402

DATA = os.path.join(HERE, "data")
GOLDEN = os.path.join(HERE, "golden", "encoders.json")
SP_MODEL = os.path.join(DATA, "xlnet_spiece_1200.model")
SPECIALS = ["[PAD]"] + [f"[unused{i}]" for i in range(3)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
AWKWARD = [
    "First line of an odd document.\r\nIts second line, with caf\u00e9, na\u00efve and \u00c9COLE words.",
    "Con\x0btrol char\x1cacters in\x85side words, a z\u200bero-width space and a\x00NUL\ufffd.",
    "Spaces:\u00a0no-break,\u3000ideographic,\u2009thin,\u2028line-sep,\ttab,  two.",
    "\u039f\u0394\u039f\u03a3 \u0391\u03a3 \u03a3\u039f\u03a6\u039f\u03a3. "
    "Stra\u00dfe \u0130stanbul e\u0301t\u00e9 \uff21\uff22.",
    "\u4e2d\u6587\u5b57\u7b26 mixed\u4e2dwith latin \ud55c\uad6d\uc5b4 \u3072\u3089\u304c\u306a \U0001f600.",
    "supercalifragilistic" * 11 + " a long word; under_score back\\slash 12,345.67 $100 50% \u2014dash\u2014",
    "", " leading", "trailing ", "x\ny",
]


def texts() -> list[str]:
    with open(os.path.join(DATA, "austen_emma.txt"), encoding="utf-8") as f:
        emma = [line.rstrip("\n") for line in f][:400]
    with open(os.path.join(DATA, "tang_poems_zh.txt"), encoding="utf-8") as f:
        tang = [line.rstrip("\n") for line in f][:60]
    return AWKWARD + emma + tang


def write_vocab(path: str, lower: bool) -> str:
    """Specials, every character alone and as ##, the 500 most frequent words (and some prefixes)."""
    text = "\n".join(texts())
    text = text.lower() if lower else text
    words = collections.Counter(re.findall(r"\w+", text))
    chars = sorted({c for c in text if not c.isspace()})
    common = [w for w, _ in words.most_common(500) if len(w) > 1]
    tokens = SPECIALS + chars + [f"##{c}" for c in chars] + common + [w[:3] for w in common if len(w) > 5]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(dict.fromkeys(tokens)) + "\n")
    return path


def encoders(root: str) -> dict[str, object]:
    uncased, cased = write_vocab(os.path.join(root, "uncased.txt"), True), write_vocab(
        os.path.join(root, "cased.txt"), False)
    subword = te.SubwordTextEncoder()
    subword.build_from_token_counts(te.count_tokens(texts()[:300]), 3)
    return {
        "wordpiece_uncased_regex": te.WordpieceEncoder(uncased, do_lower_case=True, backend="regex"),
        "wordpiece_uncased_hf": te.WordpieceEncoder(uncased, do_lower_case=True, backend="hf"),
        "wordpiece_cased_regex": te.WordpieceEncoder(cased, do_lower_case=False, backend="regex"),
        "wordpiece_cased_hf": te.WordpieceEncoder(cased, do_lower_case=False, backend="hf"),
        "sentencepiece_cased": te.SentencePieceEncoder(SP_MODEL),
        "sentencepiece_uncased": te.SentencePieceEncoder(SP_MODEL, uncased=True),
        "subword": subword,
    }


def summary(encoder) -> dict:
    ids = [list(map(int, encoder.encode(t))) for t in texts()]
    return {"sha256": hashlib.sha256(json.dumps(ids).encode()).hexdigest(), "first": ids[0],
            "num_ids": sum(map(len, ids))}


NAMES = ["wordpiece_uncased_regex", "wordpiece_uncased_hf", "wordpiece_cased_regex", "wordpiece_cased_hf",
         "sentencepiece_cased", "sentencepiece_uncased", "subword"]


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, object]:
    return encoders(str(tmp_path_factory.mktemp("golden_encoders")))


@pytest.mark.parametrize("name", NAMES)
def test_ids_are_unchanged(name, made):
    with open(GOLDEN, encoding="utf-8") as f:
        want = json.load(f)[name]
    got = summary(made[name])
    assert got["first"] == want["first"]
    assert (got["num_ids"], got["sha256"]) == (want["num_ids"], want["sha256"])


def test_every_encoder_has_a_golden(made):
    with open(GOLDEN, encoding="utf-8") as f:
        assert sorted(json.load(f)) == sorted(made) == sorted(NAMES)


if __name__ == "__main__":
    import tempfile
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python3 tests/test_golden_encoders.py --write   (only on the code the goldens pin)")
    with tempfile.TemporaryDirectory() as tmp:
        golden = {name: summary(enc) for name, enc in encoders(tmp).items()}
    with open(GOLDEN, "w", encoding="utf-8") as f:
        json.dump(golden, f, indent=1, sort_keys=True)
        f.write("\n")
