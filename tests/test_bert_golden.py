"""bert_pretrain writes the same bytes as before its speed-up (issue #12): golden sha256 of the shards.

How the hashes were made: this file was copied into an export of commit 13ae266 (`git archive 13ae266`, the
branch point of sp-wp, before the WordPiece and datagen speed-up) and `python3 tests/test_bert_golden.py`
was run there; it prints GOLDEN (the first 16 hex digits of each shard's sha256, train shards in order,
then dev), which is pasted below. Why golden hashes rather than the old code kept alive as the reference:
the old path spans encoders.py, corpus.py, records.py and this problem; a second copy of it in the
tests would freeze four modules' internals, whereas the hashes pin exactly what matters (the files a user
gets). The ids themselves are checked against the original tokenizer in tests/test_text_encoders.py.

The inputs are fixed and independent of parts that may legitimately change:
- the vocab is made here by a plain rule (not by the WordPiece learner): specials, every character alone
  and as "##", the most frequent lower-case (or, cased, as written) words and a few of their prefixes, so
  words split into several pieces and some are [UNK];
- the corpus is tests/data/austen_emma.txt plus a small file written here with the tokenizer's and the
  reader's awkward cases (CRLF, control characters inside words, \\x0b \\x1c \\x85, Zs spaces, U+2028,
  tabs, CJK, accents, final sigma, a word over 200 characters, lines that tokenize to nothing, no final
  newline); the jieba config reads tests/data/tang_poems_zh.txt.
Settings cover a dev split, whole-word masking (## and jieba groups), the cased tokenizer, and truncation
and masking at other probabilities.
"""
from __future__ import annotations

import collections
import hashlib
import os
import re
import sys

import pytest

if __name__ == "__main__":  # run from an export of the branch point to make GOLDEN
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from textrain.problems import bert_pretrain as bp  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
EMMA = os.path.join(DATA, "austen_emma.txt")
TANG = os.path.join(DATA, "tang_poems_zh.txt")

ODD = ("\n\n  \nFirst line of an odd document.\r\nIts second line, with caf\u00e9, na\u00efve and "
       "\u00c9COLE words.\r\n\t \r\n"
       "Con\x0btrol char\x1cacters in\x85side words, a z\u200bero-width space and a\x00NUL\ufffd.\n"
       "Spaces:\u00a0no-break,\u3000ideographic,\u2009thin,\u2028line-sep,\ttab,  two.\n"
       "\u039f\u0394\u039f\u03a3 \u0391\u03a3 \u03a3\u039f\u03a6\u039f\u03a3. Stra\u00dfe \u0130stanbul "
       "\u00c5ngstr\u00f6m e\u0301t\u00e9 \uff21\uff22\uff23.\n"
       "\u4e2d\u6587\u5b57\u7b26 mixed\u4e2dwith latin \ud55c\uad6d\uc5b4 \u3072\u3089\u304c\u306a.\n"
       "\x07\x07\n\n"
       "A new document with " + "supercalifragilistic" * 11 + " a long word and "
       + " ".join(["emma"] * 90) + " many words.\n"
       "Punctuation!? $100, 50% [brackets] {braces} <angle> `tick` ~tilde^ \u00bfqu\u00e9? \u2014dash\u2014\n"
       "\n\u3000\nLast document without a final newline")

CONFIGS = {
    "base_dev": dict(dev_fraction=0.1),
    "whole_word": dict(do_whole_word_mask=True),
    "cased": dict(do_lower_case=False),
    "other_probs": dict(short_seq_prob=0.5, masked_lm_prob=0.3, max_predictions_per_seq=15, random_seed=7,
                        max_seq_length=48),
    "zh_jieba": dict(do_whole_word_mask=True, word_segmenter="jieba", input_file=TANG),  # needs jieba
}

# sha256 of each config's shards (train shards in order, then dev), written by commit 13ae266's code.
GOLDEN = {
    "base_dev": ["ff1c1c0f27fde8a1", "355b4dbe0adf4bec", "272f196e7767602a", "413077ad29e40b46",
                 "dc9ef8ea676a454f", "82feb2174c917922", "59c9a5371ae4f015", "e58461e61dfec218",
                 "5f17e9858cb2a208"],
    "cased": ["79f24ec5070697bb", "60fdb744482ef57b", "884026c35d981cc2", "c4b809a9cd1943db",
              "8db30ff066e3ab1b", "ffcda72679f6e6cd", "920f3dad205c24ce", "2484bf1447e445de"],
    "other_probs": ["3a0b8dafa3796b99", "041ad55ed94df664", "f092084ee0b6f737", "33d481c2ce0f216f",
                    "df77ba20c78e1811", "f30dcfd3a9c55819", "6a9be43b7572d5a0", "bc497c95e2ca98fc"],
    "whole_word": ["8d72e4ce398bb0c1", "1274009fe7780017", "fdc3ef088f148dff", "2a530c4aaa2cebf9",
                   "7e0e96e9323fe2bb", "8f1cff1d7dfca219", "74fb252e48a92e7a", "fedbb4fede16f038"],
    "zh_jieba": ["a77c2a5194011eea", "424c116882ec3f6d", "12a5170c2ed1187e", "2bda8991e806ed85",
                 "58ae6cc7de2c7805", "cc498997b0cb7220", "984780d33f3d1f9d", "55f9e18abbeec5ff"],
}


def make_vocab(path: str, texts: list[str], lower: bool) -> None:
    """Specials, every character (alone and as ##), frequent words and their 3-letter prefixes."""
    text = "\n".join(texts)
    text = text.lower() if lower else text
    chars = sorted({c for c in text if not c.isspace()})
    counts = collections.Counter(re.findall(r"[A-Za-z]+", text))
    words = [w for w, _ in counts.most_common(1500)]
    prefixes = sorted({w[:3] for w in words[600:] if len(w) > 5})
    suffixes = sorted({"##" + w[3:] for w in words[600:900] if len(w) > 5})
    tokens = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars + ["##" + c for c in chars]
              + words[:600] + prefixes + suffixes)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(dict.fromkeys(tokens)) + "\n")


def write_inputs(root: str) -> tuple[str, str, str]:
    """(input_file, uncased vocab, cased vocab) under `root`. Both corpus files are written there, so
    their order (input paths are sorted) does not depend on where the tests live."""
    emma, odd = os.path.join(root, "a_emma.txt"), os.path.join(root, "b_odd.txt")
    with open(odd, "w", encoding="utf-8", newline="") as f:
        f.write(ODD)
    with open(EMMA, "rb") as src, open(emma, "wb") as dst:
        dst.write(src.read())
    texts = [ODD]
    for path in (EMMA, TANG):
        with open(path, encoding="utf-8") as f:
            texts.append(f.read())
    vocabs = []
    for lower in (True, False):
        vocabs.append(os.path.join(root, f"vocab_{'uncased' if lower else 'cased'}.txt"))
        make_vocab(vocabs[-1], texts, lower)
    return f"{emma},{odd}", vocabs[0], vocabs[1]


def run_config(name: str, inputs: tuple[str, str, str], data_dir: str, num_workers: int = 1) -> list[str]:
    input_file, uncased, cased = inputs
    settings = dict(input_file=input_file, vocab_file=uncased, max_seq_length=64, max_predictions_per_seq=10,
                    dupe_factor=2)
    settings.update(CONFIGS[name])
    if not settings.get("do_lower_case", True):
        settings["vocab_file"] = cased
    problem = bp.BertPretrain(bp.BertPretrainHParams(**settings))
    manifests = problem.generate_data(data_dir, os.path.join(data_dir, "tmp"), num_workers=num_workers, seed=5)
    out = []
    for split in ("train", "dev"):
        for shard in manifests.get(split, {}).get("shards", []):
            with open(os.path.join(problem.problem_dir(data_dir), shard["file"]), "rb") as f:
                out.append(hashlib.sha256(f.read()).hexdigest()[:16])
    return out


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> tuple[str, str, str]:
    return write_inputs(str(tmp_path_factory.mktemp("golden")))


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_shards_are_byte_identical_to_the_branch_point(name, inputs, tmp_path):
    if CONFIGS[name].get("word_segmenter"):
        pytest.importorskip("jieba")
    assert run_config(name, inputs, str(tmp_path)) == GOLDEN[name]


if __name__ == "__main__":
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        made = write_inputs(tmp)
        golden = {name: run_config(name, made, os.path.join(tmp, name)) for name in sorted(CONFIGS)}
    print("GOLDEN = {")
    for name, hashes in golden.items():
        print(f"    {name!r}: {hashes!r},")
    print("}")
