"""bert_pretrain writes the same bytes as before its speed-up: golden sha256 of the shards.

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
    "base_dev": dict(dev_fraction=0.2),
    "whole_word": dict(do_whole_word_mask=True),
    "cased": dict(do_lower_case=False),
    "other_probs": dict(short_seq_prob=0.5, masked_lm_prob=0.3, max_predictions_per_seq=15, random_seed=7,
                        max_seq_length=48),
    "zh_jieba": dict(do_whole_word_mask=True, word_segmenter="jieba", input_file=TANG),  # needs jieba
}

# sha256 of each config's shards (train shards in order, then dev), written when documents went to shards by a
# hash of their text (framework/shuffle.py): an empty shard (e3b0c442...) is a shard no document hashed to.
GOLDEN = {
    "base_dev": ["481a9368f2623b86", "a92c56a2ad0c7b25", "e3b0c44298fc1c14", "0059067cb7e26832",
                 "3f964655f029aeeb", "9165af78507dd99f", "e932489f19ff8563", "7187a04f8dc8aecb",
                 "b2cf2cd29863d37f"],
    "cased": ["e0b6509659e59160", "6f26cc482d300a87", "dc45f8ab8dca4286", "e11ddb23d74a389a",
              "37eb974b1be935e7", "08bfc808d9aec09b", "c38e7bb163f189ba", "6ba37526cb530697"],
    "other_probs": ["3f5872c8d6124d11", "ab1d9021479e61fc", "bcf5778207414513", "527b3dc318f1aa81",
                    "16fd72496027f304", "e1367c2233ef955f", "af7f8c178238d2fd", "5f6926aef62679d1"],
    "whole_word": ["1c4ce24cf0c6f7e7", "0e0cb42b72979b6f", "4db612c19c7323d2", "58fc9098b3be04b1",
                   "a4b2046d363306ff", "f480dbad5a144864", "b88d5c7b45c39320", "ad90dd5c3536cbed"],
    "zh_jieba": ["8c15e12f0ce50308", "189f8e452c23c914", "140ec46729e13790", "3a67571c8b38447c",
                 "e3b0c44298fc1c14", "9256d5a6ca0fb50e", "a62d7e439e80f7a9", "e4916037ef26aca3"],
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
