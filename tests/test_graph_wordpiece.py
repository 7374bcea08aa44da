"""framework/graph_wordpiece.py: ids identical to WordpieceEncoder and features identical to the
records problems/classification.py writes, on real lines and on hand-written hard cases."""
from __future__ import annotations

import glob
import gzip
import itertools
import os

import numpy as np
import pytest
import tensorflow as tf

from textrain.framework.encoders import WordpieceEncoder, bert_basic_tokenize, build_wordpiece_vocab
from textrain.framework.graph_wordpiece import GraphWordpieceTokenizer, truncated_lengths
from textrain.framework.truncation import truncate_seq_pair
from textrain.problems.layouts import bert_layout

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMMA = os.path.join(REPO, "tests", "data", "austen_emma.txt")

# Text the vocab also learns from, so non-ASCII words get real pieces (not only [UNK]).
MULTILINGUAL = [
    "Ο δρόμος ΟΔΟΣ και ΣΑΣ λέξεις ελληνικά σας οδός Σίσυφος",
    "Café naïve résumé Ångström Øresund façade Straße Ünïcödé",
    "中文文本和日本語のテキスト 漢字 한국어 텍스트",
    "İstanbul ﬁne ǅungla Ǆ Москва Россия привет",
]
HARD_CASES = [
    "", " ", "\t\n\r ", "Emma", "EMMA WOODHOUSE, handsome, clever, and rich!",
    "don't stop-believing... (really?) [yes] {no} $5^2 `quoted` ~tilde~ a_b",
    "Café naïve résumé Ångström", "ÀÉÎÕÜ àéîõü", "e\u0301 a\u0300\u0301 \u0301\u0302 alone",
    "ΟΔΟΣ ΣΑΣ. Σ ΑΣ'Β ΑΣ.Β Σ. ΑΣ\u0301 (ΟΔΟΣ) οδοσ ΆΣ",  # final sigma contexts
    "中文文本 日本語のテキスト 中a文b 漢字。", "한국어 텍스트", "İstanbul ﬁne ǅungla ß ẞ",
    "a\x00b\x01c\x7fd\u200be\ufeff f\u00ad g", "ctrl\x1cchars\x1f here", "nbsp\u00a0sep\u2003em\u2028line\u2029para",
    "x" * 199, "y" * 200, "z" * 201, "long " + "ab" * 150 + " word", "supercalifragilisticexpialidocious",
    "emoji 😀 test 🇫🇷 ", "private \ue000 use \U000f0000", "tab\tseparated\tvalues", "\ufffd replacement",
    "мама мыла раму", "Москва!", "ﬀ ﬃ ½ ² ⅓", "Ǳ ǲ ǳ", "ǰ", "Ⅻ ⓐ",
]


@pytest.fixture(scope="module")
def vocab(tmp_path_factory) -> str:
    lines = [line for line in open(EMMA, encoding="utf-8")] + MULTILINGUAL * 3
    path = str(tmp_path_factory.mktemp("gvocab") / "vocab.txt")
    return build_wordpiece_vocab(iter(lines), vocab_size=3000, out_file=path)


def _emma_lines() -> list[str]:
    return [line.rstrip("\n") for line in open(EMMA, encoding="utf-8")]


def _encode_all(tokenizer: GraphWordpieceTokenizer, texts: list[str], batch: int = 512) -> list[list[int]]:
    fn = tf.function(tokenizer.encode)
    out = []
    for i in range(0, len(texts), batch):
        out.extend(r.tolist() for r in fn(tf.constant(texts[i:i + batch])).numpy())
    return out


@pytest.mark.parametrize("lower", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_ids_identical_to_the_encoder(vocab, lower):
    encoder = WordpieceEncoder(vocab, do_lower_case=lower)
    tokenizer = GraphWordpieceTokenizer(vocab, do_lower_case=lower)
    texts = _emma_lines() + HARD_CASES + MULTILINGUAL
    got = _encode_all(tokenizer, texts)
    bad = [(t, g, encoder.encode(t)) for t, g in zip(texts, got) if g != encoder.encode(t)]
    assert not bad, bad[:3]
    assert len(texts) > 2800
    # The hard cases exercise more than [UNK]: Greek, accented and CJK words have real pieces.
    unk = encoder.special_ids["[UNK]"]
    for text in ("οδος", "cafe", "中文"):
        assert unk not in encoder.encode(text), text


def test_hard_cases_tokens_match_the_reference(vocab):
    """Also check the basic tokens themselves against the pure-Python FullTokenizer reference."""
    tokenizer = GraphWordpieceTokenizer(vocab, do_lower_case=True)
    words = tokenizer.basic_tokens(tf.constant(HARD_CASES))
    for text, row in zip(HARD_CASES, words):
        assert [w.decode("utf-8") for w in row.numpy()] == bert_basic_tokenize(text, True), text
    # Word-final capital sigma lower-cases to "ς", else to "σ" (Python's Final_Sigma rule; "." is
    # case-ignorable, so in "ΑΣ.Β" the cased "Β" follows and the sigma is not final).
    row = [w.decode() for w in tokenizer.basic_tokens(tf.constant(["ΟΔΟΣ ΣΑΣ. ΑΣ.Β"]))[0].numpy()]
    assert row == ["οδος", "σας", ".", "ασ", ".", "β"]


def test_invalid_utf8_bytes_are_dropped_as_the_encoder_does(vocab):
    encoder = WordpieceEncoder(vocab)
    tokenizer = GraphWordpieceTokenizer(vocab)
    texts = [b"Emma\xff was \xc3 rich", b"\xe2\x82 handsome\x80", b"clever\xf0\x9f"]
    got = tokenizer.encode(tf.constant(texts)).to_list()
    assert got == [encoder.encode(t) for t in texts]


def test_truncated_lengths_equal_the_loop():
    cases = [(a, b, L) for a, b, L in itertools.product(range(0, 13), range(0, 13), range(3, 16))]
    la, lb, _ = (tf.constant([c[i] for c in cases], tf.int64) for i in range(3))
    for L in range(3, 16):
        sel = [i for i, c in enumerate(cases) if c[2] == L]
        ka, kb = truncated_lengths(tf.gather(la, sel), tf.gather(lb, sel), L)
        for i, x, y in zip(sel, ka.numpy(), kb.numpy()):
            a, b = cases[i][0], cases[i][1]
            if b:
                _, a_back, _, b_back = truncate_seq_pair(a, b, L - 3)
                a, b = a - a_back, b - b_back
            else:
                a = min(a, L - 2)
            assert (x, y) == (a, b), cases[i]


def test_features_identical_to_the_records_layout(vocab):
    encoder = WordpieceEncoder(vocab)
    lines = [line for line in _emma_lines() if line.strip()][:600]
    pairs = list(zip(lines[0::2], lines[1::2])) + [("", ""), ("Emma", ""), ("", "Emma"), ("x" * 300, "a b c")]
    pairs += [(a, "") for a in lines[:50]]  # an empty text_b is the single-text layout
    for length in (8, 40):  # 8: almost every pair is truncated
        tokenizer = GraphWordpieceTokenizer(vocab, max_seq_length=length)
        got = tf.function(tokenizer)(tf.constant([a for a, _ in pairs]), tf.constant([b for _, b in pairs]))
        for i, (a, b) in enumerate(pairs):
            ids_b = encoder.encode(b) if b else None
            want = bert_layout(encoder.encode(a), ids_b, length, encoder.special_ids["[CLS]"], encoder.special_ids["[SEP]"])
            for k in ("input_ids", "input_mask", "segment_ids"):
                assert got[k][i].numpy().tolist() == want[k], (length, a, b, k)
        assert got["input_ids"].dtype == tf.int32 and got["input_ids"].shape[1] == length
    # text_b omitted: single texts.
    single = tokenizer(tf.constant(["Emma was rich.", ""]))
    want = [bert_layout(encoder.encode(t), None, 40, encoder.special_ids["[CLS]"], encoder.special_ids["[SEP]"])
            for t in ("Emma was rich.", "")]
    assert single["input_ids"].numpy().tolist() == [w["input_ids"] for w in want]


@pytest.mark.slow
def test_saved_model_captures_the_tables(vocab, tmp_path):
    import shutil
    copy = str(tmp_path / "vocab_copy.txt")
    shutil.copy(vocab, copy)

    class Serving(tf.Module):
        def __init__(self):
            super().__init__()
            self.tokenizer = GraphWordpieceTokenizer(copy, max_seq_length=16)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.string)])
        def features(self, a, b):
            return self.tokenizer(a, b)

    module = Serving()
    a, b = tf.constant(["Emma was rich.", "Ünïcödé ΟΔΟΣ"]), tf.constant(["She was clever.", ""])
    want = module.features(a, b)
    tf.saved_model.save(module, str(tmp_path / "sm"))
    os.remove(copy)  # the vocab file is not needed after export: the tables are inside the SavedModel
    loaded = tf.saved_model.load(str(tmp_path / "sm"))
    got = loaded.features(a, b)
    for k in want:
        np.testing.assert_array_equal(got[k].numpy(), want[k].numpy())


@pytest.mark.slow
def test_identical_on_the_shared_corpora(corpora_dir, tmp_path):
    """Real text: documentation prose (identifiers, odd punctuation, long lines) and Chinese (news, poems,
    manuals): the first lines of every en/ and zh/ file, with a vocab learned from them, both casings."""
    texts = []
    for folder, per_file in (("en", 150), ("zh", 200)):
        for path in sorted(glob.glob(os.path.join(corpora_dir, folder, "*.gz"))):
            with gzip.open(path, "rt", encoding="utf-8") as f:
                texts.extend(line.rstrip("\n") for line in itertools.islice(f, per_file))
    vocab = build_wordpiece_vocab(iter(texts), vocab_size=6000, out_file=str(tmp_path / "vocab.txt"))
    for lower in (True, False):
        encoder = WordpieceEncoder(vocab, do_lower_case=lower)
        got = _encode_all(GraphWordpieceTokenizer(vocab, do_lower_case=lower), texts)
        bad = [(t, g, encoder.encode(t)) for t, g in zip(texts, got) if g != encoder.encode(t)]
        assert not bad, bad[:3]
    assert len(texts) >= 4000
