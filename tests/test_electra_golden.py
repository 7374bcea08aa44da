"""electra_pretrain writes the same bytes as before its speed-up: golden sha256 of the shards.

How the hashes were made: with this file in a checkout of commit 13ae266 (the branch point of sp-el, before
the datagen was made faster), `run_config(name, ...)` below was run for every config on the inputs of the
`inputs` fixture, and its output (the first 16 hex digits of each shard's sha256) pasted into GOLDEN.
Why golden hashes rather than the old code kept as the reference: the old reading / building / serialising
path spans corpus.py, records.py and this problem; keeping a second copy of it alive in the tests would freeze
three modules' internals, whereas the hashes pin exactly what matters (the files a user gets) at no cost.

The inputs are fixed and independent of parts that may legitimately change:
- the vocab is made here by a plain rule (not by the WordPiece learner, which another part owns);
- the corpus is tests/data/austen_emma.txt plus a small file written here with the reader's awkward cases:
  CRLF endings, whitespace-only lines (tab, form feed, U+3000) between documents, blank lines at the start,
  no newline at the end, accents, a line longer than an example; two input files. The jieba config reads
  tests/data/tang_poems_zh.txt.
The settings cover both document modes, carry_overflow, the whole-word `word_start` feature and a dev split.
The WordPiece ids themselves are pinned elsewhere (tests/test_text_encoders.py); if they ever changed on
purpose, these hashes would change with them and must be remade from the branch point's code.
"""
from __future__ import annotations

import collections
import hashlib
import os
import re
import shutil

import pytest

from textrain.framework import corpus
from textrain.problems import electra_pretrain as ep

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
EMMA = os.path.join(DATA, "austen_emma.txt")
TANG = os.path.join(DATA, "tang_poems_zh.txt")

ODD = ("\n\n  \nFirst line of an odd document.\r\nIts second line, with caf\u00e9 and na\u00efve words.\r\n"
       "\t \r\nA new document after a tab-and-CRLF blank line.\n\x0c\nAfter a form feed.\n"
       "\u3000\nAfter an ideographic space.\n" + " ".join(["longword"] * 400) + "\nshort tail\n\n\n"
       "Last document without a final newline")

CONFIGS = {
    "docs_dev": dict(dev_fraction=0.2),
    "whole_file": dict(blanks_separate_docs=False),
    "carry": dict(carry_overflow=True),
    "word_start": dict(do_whole_word_mask=True, max_seq_length=48),
    "zh_jieba": dict(do_whole_word_mask=True, word_segmenter="jieba", input_file=TANG),  # needs jieba
}

# sha256 of each config's shards (train shards in order, then dev), written when documents went to shards by a
# hash of their text (framework/shuffle.py): an empty shard (e3b0c442...) is a shard no document hashed to.
GOLDEN = {
    "carry": ["c736d9da8f8c9b49", "a8504ea718f830a9", "64ce6eeadcd170db", "fbacd45872334fe7",
              "40eefbcc9f4547d8", "851e7976e3924f4f", "e2671a4cdaf501b4", "d63be45d8eaab564"],
    "docs_dev": ["77d0e4cfe0966f3f", "1e2a574094ed4d97", "734360d4108d23f3", "fb8afbbc107293e1",
                 "e21834353edb5cc5", "58a2461bb0db986a", "e2671a4cdaf501b4", "8644d2d5c505f9ac",
                 "c83dd1f689bf7123"],
    "whole_file": ["e3b0c44298fc1c14", "e3b0c44298fc1c14", "e3b0c44298fc1c14", "e3b0c44298fc1c14",
                   "e3b0c44298fc1c14", "89c15b8856e88ec7", "e3b0c44298fc1c14", "2e0fcc68d70ca47b"],
    "word_start": ["c82b9bd9a17479e5", "2bbaf3d9b905f9de", "25853b71600482d8", "6fe5ad4bcf573f64",
                   "d97e1f3ec8745d17", "ab982248b08bc836", "f59aac76e07a42a5", "3008e631f045f3af"],
    "zh_jieba": ["f6bc1b11db5e4a14", "3a9309bd81794f5b", "51515915070f345c", "0e72df1ae9b36b7e",
                 "e3b0c44298fc1c14", "50a71c5c2d698e5a", "59fd880f58391772", "d2a86ac0fed5b67f"],
}


def make_vocab(path: str, texts: list[str]) -> None:
    """Specials, every character (alone and as ##), then the 1200 most frequent lower-case words."""
    text = "\n".join(texts).lower()
    chars = sorted({c for c in text if not c.isspace()})
    words = [w for w, _ in collections.Counter(re.findall(r"[a-z]+", text)).most_common(1200)]
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars + ["##" + c for c in chars] + words
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(dict.fromkeys(tokens)) + "\n")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> tuple[str, str]:
    root = tmp_path_factory.mktemp("golden")
    # Input files are read in sorted path order, so both live here under names that fix that order (the odd
    # file first, as when the hashes were made); a checkout's own path must not decide it.
    odd = str(root / "1_odd.txt")
    emma = str(root / "2_austen_emma.txt")
    shutil.copyfile(EMMA, emma)
    with open(odd, "w", encoding="utf-8", newline="") as f:
        f.write(ODD)
    vocab = str(root / "vocab.txt")
    texts = [ODD]
    for path in (EMMA, TANG):
        with open(path, encoding="utf-8") as f:
            texts.append(f.read())
    make_vocab(vocab, texts)
    return f"{emma},{odd}", vocab


def shard_hashes(problem: ep.ElectraPretrain, data_dir: str, manifests: dict) -> list[str]:
    out = []
    for split in ("train", "dev"):
        for shard in manifests.get(split, {}).get("shards", []):
            with open(os.path.join(problem.problem_dir(data_dir), shard["file"]), "rb") as f:
                out.append(hashlib.sha256(f.read()).hexdigest()[:16])
    return out


def run_config(name: str, input_file: str, vocab: str, data_dir: str, num_workers: int = 1) -> list[str]:
    settings = dict(input_file=input_file, vocab_file=vocab, max_seq_length=64)
    settings.update(CONFIGS[name])
    problem = ep.ElectraPretrain(ep.ElectraPretrainHParams(**settings))
    manifests = problem.generate_data(data_dir, os.path.join(data_dir, "tmp"), num_workers=num_workers, seed=5)
    return shard_hashes(problem, data_dir, manifests)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_shards_are_byte_identical_to_the_branch_point(name, inputs, tmp_path):
    if CONFIGS[name].get("word_segmenter"):
        pytest.importorskip("jieba")
    input_file, vocab = inputs
    assert run_config(name, input_file, vocab, str(tmp_path)) == GOLDEN[name]


def test_small_read_blocks_give_the_same_shards(inputs, tmp_path, monkeypatch):
    """Documents and lines cut across the reader's blocks (a few hundred bytes here) change nothing."""
    if not hasattr(corpus, "BLOCK_BYTES"):
        pytest.skip("the reader has no blocks")
    monkeypatch.setattr(corpus, "BLOCK_BYTES", 333)
    input_file, vocab = inputs
    assert run_config("docs_dev", input_file, vocab, str(tmp_path)) == GOLDEN["docs_dev"]


# ------------------------------------------------------------------------------------------------ #
# The fast paths against their per-item references (shared by every problem, not only ELECTRA)
# ------------------------------------------------------------------------------------------------ #
def _line_documents(paths: list[str], on_bad_utf8: str) -> list[list[str]]:
    """read_documents' contract computed line by line from corpus.iter_lines (the pre-block reader)."""
    docs, doc = [], []
    for path in paths:
        for _, line in corpus.iter_lines(path, on_bad_utf8):
            if line.strip():
                doc.append(line.strip())
            elif doc:
                docs.append(doc)
                doc = []
        if doc:
            docs.append(doc)
            doc = []
    return docs


def _outcome(fn):
    try:
        return fn()
    except corpus.CorpusError as e:
        return str(e)


def test_block_reader_matches_the_line_reader(tmp_path, monkeypatch):
    """Random text of whitespace kinds, CR/CRLF, bad UTF-8 bytes, .gz/.bz2 and tiny blocks: the same documents,
    lines, errors (file:line, column, bytes) as iter_lines, under every on_bad_utf8 policy."""
    import bz2
    import gzip
    import logging
    import random

    absl_logger = logging.getLogger("absl")  # quiet the per-file bad-UTF-8 warnings, restored after the test
    monkeypatch.setattr(absl_logger, "level", logging.ERROR)
    rng = random.Random(0)
    alphabet = ["a", "b", " ", "\t", "\r", "\n", "\n", "\n", "\x0c", "\u3000", "\u00e9", "\xa0", "\x85", "\u2028"]
    for trial in range(120):
        data = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 160))).encode()
        if trial % 4 == 0:
            data = data.replace(b"b", b"\xff", 2)
        if trial % 5 == 0:
            data = data.replace(b"a", b"\r\xe2\r\x80", 1)  # a CR inside a broken sequence
        plain = tmp_path / "t.txt"
        plain.write_bytes(data)
        paths = [str(plain)]
        if trial % 3 == 0:
            packed = tmp_path / ("t.txt.gz" if trial % 2 else "t.txt.bz2")
            packed.write_bytes(gzip.compress(data) if trial % 2 else bz2.compress(data))
            paths.insert(0, str(packed))
        for block in (1, 3, 64, 1 << 22):
            monkeypatch.setattr(corpus, "BLOCK_BYTES", block)
            for policy in corpus.BAD_UTF8_POLICIES:
                expected = _outcome(lambda: _line_documents(paths, policy))
                assert _outcome(lambda: list(corpus.read_documents(paths, policy))) == expected, (data, block)
                every_third = _outcome(lambda: [corpus.document_lines(t) for t in corpus.iter_document_texts(
                    paths, policy, keep=lambda i: i % 3 == 1)])
                if policy != "error":
                    assert every_third == expected[1::3]
                else:  # bad bytes are reported by the reader that keeps their document, and only by it
                    kept = _line_documents(paths, "replace")[1::3]
                    if any("\ufffd" in line for doc in kept for line in doc):
                        assert isinstance(every_third, str) and "bytes that are not UTF-8" in every_third
                    else:
                        assert every_third == kept
                whole = _outcome(lambda: [corpus.document_lines(corpus.read_text(p, policy)) for p in paths])
                if isinstance(expected, str):
                    assert whole == expected
                else:
                    assert [x for d in whole for x in d] == [x for d in expected for x in d]


def test_partitions_give_the_scan_s_documents(tmp_path, monkeypatch):
    """A file cut into byte ranges at blank lines (datagen's partitions, any size) read range by range gives
    the documents of one scan of the whole file, in order, and the same error (line numbers of the file)."""
    import logging
    import random

    from textrain.framework import shuffle

    monkeypatch.setattr(logging.getLogger("absl"), "level", logging.ERROR)
    rng = random.Random(1)
    alphabet = ["a", "b", " ", "\t", "\n", "\n", "\n", "\x0c", "\u3000", "\u00e9", "\xa0", "\x85", "\u2028", "\r"]
    for trial in range(60):
        data = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 300))).encode()
        if trial % 4 == 0:
            data = data.replace(b"b", b"\xff", 2)
        path = tmp_path / f"{trial}.txt"
        path.write_bytes(data)
        for policy in ("error", "replace", "skip"):
            expected = _outcome(lambda: [corpus.document_lines(t)
                                         for t in corpus.iter_document_texts([str(path)], policy)])
            spec = shuffle.DocumentCorpus((str(path),), policy)
            for size in (1, 5, 17, 64, 1 << 20):
                monkeypatch.setattr(shuffle, "_PROBE_BYTES", 3 if size < 17 else 1 << 16)
                parts = shuffle.plan_partitions(spec, size)
                assert [p.start for p in parts[1:]] == [p.end for p in parts[:-1]]
                got = _outcome(lambda: [corpus.document_lines(t)
                                        for p in parts for t in shuffle.partition_texts(spec, p)])
                assert got == expected, (data, policy, size)


def test_sample_batch_serializes_like_sample_dicts():
    import numpy as np

    from textrain.framework import records
    from textrain.framework.errors import RecordError

    rng = np.random.default_rng(0)
    for high in (2, 300, 1 << 31, 1 << 62):
        n = int(rng.integers(1, 30))
        batch = records.SampleBatch({"ids": rng.integers(-3, high, size=(n, int(rng.integers(1, 70)))),
                                     "flag": rng.integers(0, 2, size=(n, 2)).astype(bool),
                                     "w": rng.normal(size=(n, 3)).astype(np.float32)})
        as_lists = [{k: v.tolist() for k, v in s.items()} for s in batch.samples()]
        assert records.serialize_batch(batch) == records.serialize_samples(as_lists)
    with pytest.raises(RecordError, match="empty"):
        records.SampleBatch({"x": np.zeros((2, 0), np.int64)})
