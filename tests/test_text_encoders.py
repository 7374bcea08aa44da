"""Tests of framework/encoders.py on real text (Emma) and small multilingual samples.

Comparisons with the original implementations run when they are available and are skipped otherwise:
google-research/bert's FullTokenizer is its own tokenization.py from ../shared/originals (unchanged, loaded
by benchmarks/lib/same_run.import_original), tensor2tensor's SubwordTextEncoder the PyPI package.
"""
import hashlib
import logging
import os
import re
import sys
import unicodedata

import numpy as np
import pytest

from textrain.framework import encoders as te

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
EMMA = os.path.join(DATA, "austen_emma.txt")

# Small samples for the classes of input where tokenizers tend to disagree.
MULTILINGUAL = [
    "Héllo Wörld! Ça va? naïve café, façade, São Paulo, Ångström, Øresund, Dvořák",
    "ΟΔΟΣ ΚΑΙ ΣΟΦΙΑ: Σίσυφος ὁδός — Greek capitals end in final sigma when lowered",
    "中文分词测试：北京大学的学生喜欢读书。我们在2019年去了上海。",
    "日本語のテキスト、カタカナとひらがな。한국어 문장도 있습니다.",
    "control\x00chars\x07here\x1b and\u200bzero\u200dwidth\ufeffmarks\ufffd end",
    "tabs\tnew\nlines\r\nnbsp\u00a0thin\u2009ideographic\u3000space\u2028line",
    "combining e\u0301 a\u0300 o\u0308 vs precomposed é à ö; İstanbul ǅ ﬁ ligature",
    "private\ue000use \U000f0000 and emoji 😀🤣🥰 and unassigned \u0378 and surrogate-free",
    "a" * 199 + " " + "b" * 200 + " " + "c" * 201 + " " + "supercalifragilistic" * 12,
    "punctuation$^`~|<>=+ «quotes» „low“ ‘single’ … – — ¿¡ 1,000.50% @user #tag",
    "Arabic العربية and Hebrew עברית and Devanagari हिन्दी and Thai ภาษาไทย",
    "",
    "   ",
]


def _emma_lines(limit=None):
    with open(EMMA, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]
    return lines[:limit] if limit else lines


# ------------------------------------------------------------------------------------------------
# WordPiece

@pytest.fixture(scope="module")
def wp_vocab(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("wp") / "vocab.txt")
    # Emma plus the samples, so accented, CJK and Greek pieces are in the vocabulary, not just [UNK].
    te.build_wordpiece_vocab(iter(_emma_lines() + MULTILINGUAL * 3), 3000, out,
                             do_lower_case=True, min_frequency=1)
    return out


@pytest.fixture(scope="module")
def wp_vocab_cased(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("wpc") / "vocab.txt")
    te.build_wordpiece_vocab(iter(_emma_lines(2000) + MULTILINGUAL * 3), 2000, out,
                             do_lower_case=False, min_frequency=1)
    return out


def test_build_wordpiece_vocab_writes_bert_vocab(wp_vocab):
    tokens = open(wp_vocab, encoding="utf-8").read().split("\n")
    assert tokens[-1] == ""  # ends with a newline
    tokens = tokens[:-1]
    assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert len(tokens) == len(set(tokens)) and 1000 < len(tokens) <= 3000
    assert "emma" in tokens and any(t.startswith("##") for t in tokens)
    assert not [f for f in os.listdir(os.path.dirname(wp_vocab)) if "incomplete" in f]
    enc = te.WordpieceEncoder(wp_vocab)
    assert enc.special_ids == {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}
    assert enc.vocab_size == len(tokens)
    assert isinstance(enc, te.Encoder)


def test_build_wordpiece_vocab_reads_files(tmp_path):
    out = str(tmp_path / "v.txt")
    te.build_wordpiece_vocab(EMMA, 500, out)
    assert te.WordpieceEncoder(out).vocab_size <= 500
    with pytest.raises(Exception, match="no_such_file"):
        te.build_wordpiece_vocab([str(tmp_path / "no_such_file.txt")], 500, out)


def test_full_tokenizer_facts(tmp_path):
    # The example of google-research/bert's own tests: accents stripped, then greedy pieces.
    vocab = ["[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa", "un", "runn", "##ing", ","]
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(vocab) + "\n", encoding="utf-8")
    enc = te.WordpieceEncoder(str(path))
    assert enc.tokenize("UNwant\u00e9d,running") == ["un", "##want", "##ed", ",", "runn", "##ing"]
    assert enc.encode("UNwant\u00e9d,running") == [7, 4, 5, 10, 8, 9]
    assert enc.tokenize("unwantedX running") == ["[UNK]", "runn", "##ing"]
    assert enc.reference.tokenize("UNwant\u00e9d,running") == enc.tokenize("UNwant\u00e9d,running")
    assert te.bert_basic_tokenize(" \tHeLLo!how  \n Are yoU?  ") == ["hello", "!", "how", "are",
                                                                     "you", "?"]
    assert te.bert_basic_tokenize("HäLLo!how", do_lower_case=False) == ["HäLLo", "!", "how"]
    assert te.bert_basic_tokenize("ah\u535a\u63a8zz") == ["ah", "\u535a", "\u63a8", "zz"]
    assert te.bert_basic_tokenize("a\x00b\ufffdc\x07d") == ["abcd"]
    with pytest.raises(ValueError, match="backend"):
        te.WordpieceEncoder(str(path), backend="tf")


@pytest.mark.parametrize("backend", ["regex", "hf"])
@pytest.mark.parametrize("lower", [True, False])
def test_fast_wordpiece_equals_reference(wp_vocab, wp_vocab_cased, lower, backend):
    enc = te.WordpieceEncoder(wp_vocab if lower else wp_vocab_cased, do_lower_case=lower,
                              backend=backend)
    texts = _emma_lines() + MULTILINGUAL
    # Mixed: every sample also glued to English, so fast and fallback paths meet in one batch.
    texts += [f"{a} {b}" for a, b in zip(_emma_lines(len(MULTILINGUAL)), MULTILINGUAL)]
    expected = [enc.reference.encode(t) for t in texts]
    assert enc.encode_batch(texts) == expected
    assert [enc.encode(t) for t in texts] == expected
    if backend == "hf":  # only the texts with characters HF treats differently took the reference
        assert 0 < enc.fallback_texts < len(MULTILINGUAL) * 4
    else:
        assert enc.fallback_texts == 0
    ids = enc.encode(MULTILINGUAL[2])
    assert len(ids) > 20 and ids.count(enc.special_ids["[UNK]"]) < len(ids) // 2


def test_words_fast_equals_basic_tokenize():
    for text in _emma_lines(500) + MULTILINGUAL + ["ΑΣ中Β ΑΣ.Β ΑΣ", "x\u037ey \uf900\u0301"]:
        for lower in (True, False):
            assert te.bert_words_fast(text, lower) == te.bert_basic_tokenize(text, lower)


def test_hf_fallback_catches_known_differences(wp_vocab):
    enc = te.WordpieceEncoder(wp_vocab, backend="hf")
    # Python lowers a word-final capital sigma to "ς", HF to "σ"; HF drops private-use characters.
    for text in ["ΟΔΟΣ", "x\ue000y"]:
        before = enc.fallback_texts
        assert enc.encode(text) == enc.reference.encode(text)
        assert enc.fallback_texts == before + 1
    assert "\u03a3" in enc._unsafe_chars and "\ue000" in enc._unsafe_chars


def test_audit_agrees_on_every_bmp_character(wp_vocab):
    """BMP characters (every 3rd) the audit calls safe really give BERT's words through HF."""
    enc = te.WordpieceEncoder(wp_vocab, backend="hf")
    chars = [chr(cp) for cp in range(0x80, 0x10000, 3) if not 0xD800 <= cp <= 0xDFFF]
    enc._audit(chars)
    assert len(enc._safe_chars) + len(enc._unsafe_chars) >= len(chars)
    sample = "".join(sorted(enc._safe_chars)[::7])
    text = " ".join(sample[i:i + 5] for i in range(0, len(sample), 5))
    assert enc._hf_words(text) == te.bert_basic_tokenize(text)


# Strings where a fast path could part from FullTokenizer: characters BERT deletes inside words (Cc, Cf,
# NUL, U+FFFD; among them \x0b \x0c \x1c-\x1f \x85, which Python's str.split() would split at), BERT's
# whitespace (Zs) and what str.split() splits at but BERT keeps (U+2028/9), leading/trailing/double spaces,
# CJK beside Latin, accents precomposed and combining (also a mark alone after a space), final sigma with
# every kind of neighbour, words at the 200-character limit before and after lower-casing and NFD,
# punctuation ASCII and Unicode.
ADVERSARIAL = [
    "con\x0btrol a\x0cb x\x1cy\x1dz\x1e\x1fw in\x85side soft\xadhyphen zero\u200bwidth \ufeffbom a\u2060b d\x7fel",
    "\x0b\x0c\x1c\x85 \x0bword\x0b word\x85. (\x1cparen\x1d)",
    "nul\x00inside rep\ufffdlacement \x00 \ufffd \x07\x07 \x1b[0m",
    "zs\u00a0no-break ogham\u1680mark en\u2002em\u2003thin\u2009hair\u200a narrow\u202fmath\u205fideo\u3000end",
    "line\u2028sep para\u2029sep tab\there cr\rlf\r\nnl\nend",
    "  leading and trailing  ", " ", "", "\t", "\u3000", "\x00", "\u0301", "double  space   triple",
    "abc\u4e2ddef \u4e2d\u6587 \U00020000x \uf900y \u3400z \u2f800 \ud55c\uad6d\uc5b4 \u3072\u3089\u304c\u306a",
    "\u00c9cole e\u0301cole \u0301alone x \u0301 \u00e9\u0301 \u0130stanbul \u1e9e \u01c5 \ufb01 \u00c5\u030a",
    "\u039f\u0394\u039f\u03a3 \u0391\u03a3.\u0392 \u0391\u03a3\u4e2d\u0392 \u0391\u03a3\u00a0\u0392 "
    "\u0391\u03a3\x0b\u0392 \u0391\u03a3'\u0392 \u0391\u03a3\u200b\u0392 \u03a3 \u03a3\u03a3 \u0391\u03a3\t\u0392",
    "a" * 200 + " " + "A" * 201 + " " + "\u00e9" * 150 + " " + "e\u0301" * 120 + " " + "a" * 150 + "." + "b" * 150,
    "\u0130" * 120 + " " + "\u0130" * 201 + " " + "x" * 199 + "\x0b" + "y",
    "$^`~|<>=+ \u00abquotes\u00bb \u201elow\u201c \u2018single\u2019 \u2026 \u2013 \u2014 \u00bf\u00a1 1,000.50% @user",
    "emoji \U0001f600\U0001f923 private\ue000use \U000f0000 unassigned \u0378 ZWJ\u200d\u200cjoin",
]


@pytest.fixture(scope="module")
def original_tokenization():
    """google-research/bert tokenization.py itself (../shared/originals, unchanged); skip when absent."""
    try:
        from benchmarks.lib.same_run import import_original
        return import_original("bert/tokenization.py")
    except (ImportError, FileNotFoundError) as e:
        pytest.skip(f"the original tokenization.py is not available: {e}")


@pytest.mark.parametrize("lower", [True, False])
def test_against_the_original_full_tokenizer(wp_vocab, wp_vocab_cased, original_tokenization, lower):
    """Ids of the default encoder == google-research/bert FullTokenizer's, on Emma, the multilingual
    samples and the adversarial strings (alone, glued to English, and twice so the second is a cache hit)."""
    vocab = wp_vocab if lower else wp_vocab_cased
    original = original_tokenization.FullTokenizer(vocab, do_lower_case=lower)
    enc = te.WordpieceEncoder(vocab, do_lower_case=lower)
    texts = _emma_lines(3000) + MULTILINGUAL + ADVERSARIAL
    texts += [f"Emma {t} said" for t in ADVERSARIAL] + ADVERSARIAL
    expected = [original.convert_tokens_to_ids(original.tokenize(t)) for t in texts]
    assert enc.encode_batch(texts) == expected
    assert [enc.encode(t) for t in reversed(texts)] == expected[::-1]
    assert enc.encode(ADVERSARIAL[0].encode("utf-8")) == expected[len(texts) - len(ADVERSARIAL)]


@pytest.mark.parametrize("lower", [True, False])
def test_adversarial_strings_equal_the_reference(wp_vocab, wp_vocab_cased, lower, monkeypatch):
    """The same strings against the pure-Python reference (runs without ../shared), with a chunk cache
    so small that it is emptied many times: the ids never depend on the cache's state."""
    monkeypatch.setattr(te.wordpiece, "_CHUNK_CACHE_LIMIT", 16)
    monkeypatch.setattr(te.wordpiece, "_PIECE_CACHE_LIMIT", 8)
    enc = te.WordpieceEncoder(wp_vocab if lower else wp_vocab_cased, do_lower_case=lower)
    texts = ADVERSARIAL + [f"{a} {b}" for a, b in zip(ADVERSARIAL, reversed(ADVERSARIAL))] + _emma_lines(300)
    expected = [enc.reference.encode(t) for t in texts]
    for _ in range(2):
        assert enc.encode_batch(texts) == expected
        assert len(enc._chunks) <= 16 and len(enc._word_cache) <= 8
    unk = enc.special_ids["[UNK]"]
    long_words = enc.encode("a" * 200 + " " + "a" * 201)
    assert long_words[-1] == unk and unk not in long_words[:-1]


@pytest.mark.parametrize("backend", ["regex", "hf"])
def test_encode_flat_packs_encode_batch(wp_vocab, backend):
    """encode_flat == encode_batch, packed: the same ids in one int32 array and each text's count (texts
    joined at spaces, empty texts, texts of spaces only, leading/trailing spaces)."""
    enc = te.WordpieceEncoder(wp_vocab, backend=backend)
    texts = _emma_lines(200) + ADVERSARIAL + MULTILINGUAL + ["", " ", "  a  ", "b"]
    # Newlines inside texts (the chunk "\n" marks text ends inside encode_flat): the reference's ids.
    texts += ["a \n b", "\n", " \n ", "x\ny", "Emma\n\nsaid \n", "\n\n"]
    assert [enc.encode(t) for t in texts[-6:]] == [enc.reference.encode(t) for t in texts[-6:]]
    per_text = enc.encode_batch(texts)
    ids, lengths = enc.encode_flat(texts)
    assert ids.dtype == np.int32 and lengths.dtype == np.int64
    assert lengths.tolist() == [len(x) for x in per_text]
    assert ids.tolist() == [i for x in per_text for i in x]
    empty_ids, empty_lengths = enc.encode_flat([])
    assert len(empty_ids) == 0 and len(empty_lengths) == 0
    # encode_lines_flat: every line of one text (split at "\n", not stripped), as encode_flat of the lines.
    text = "\n".join(texts[:-6]) + "\n\n \n"
    lines_ids, lines_lengths = enc.encode_lines_flat(text)
    flat_ids, flat_lengths = enc.encode_flat(text.split("\n"))
    assert lines_ids.tolist() == flat_ids.tolist() and lines_lengths.tolist() == flat_lengths.tolist()
    assert len(lines_lengths) == text.count("\n") + 1


def test_wordpiece_decode_and_conversions(wp_vocab):
    enc = te.WordpieceEncoder(wp_vocab)
    text = "Emma Woodhouse, handsome, clever, and rich."
    ids = enc.encode(text)
    assert enc.decode(ids) == "emma woodhouse , handsome , clever , and rich ."
    tokens = enc.tokenize(text)
    assert enc.convert_tokens_to_ids(tokens) == ids and enc.convert_ids_to_tokens(ids) == tokens
    assert enc.convert_tokens_to_ids(["no-such-token"]) == [enc.special_ids["[UNK]"]]
    with pytest.raises(ValueError, match="outside the vocabulary"):
        enc.convert_ids_to_tokens([10 ** 6])
    assert enc.fingerprint() == hashlib.sha256(open(wp_vocab, "rb").read()).hexdigest()


def test_wordpiece_bad_files(tmp_path):
    missing = str(tmp_path / "missing_vocab.txt")
    with pytest.raises(te.EncoderError, match="missing_vocab.txt"):
        te.WordpieceEncoder(missing)
    dup = tmp_path / "dup_vocab.txt"
    dup.write_text("[PAD]\n[UNK]\nthe\nof\nthe\n", encoding="utf-8")
    with pytest.raises(te.EncoderError, match=r"dup_vocab.txt:5: token 'the' already on line 3"):
        te.WordpieceEncoder(str(dup))
    no_unk = tmp_path / "no_unk.txt"
    no_unk.write_text("a\nb\n", encoding="utf-8")
    with pytest.raises(te.EncoderError, match="no_unk.txt.*no \\[UNK\\]"):
        te.WordpieceEncoder(str(no_unk))
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"[UNK]\n\xff\xfe\n")
    with pytest.raises(te.EncoderError, match="binary.txt:2: not UTF-8"):
        te.WordpieceEncoder(str(binary))


# ------------------------------------------------------------------------------------------------
# SentencePiece (XLNet)

def _sp_training_lines():
    # Emma has few numbers; add lines where "<number>," is frequent enough to become one piece.
    numbers = [f"In 1815, {i % 7 + 2},000 people came to {i % 50}, and 7, said so in 2000, not {i}."
               for i in range(600)]
    return _emma_lines(3000) + numbers


@pytest.fixture(scope="module")
def sp_model(tmp_path_factory):
    prefix = str(tmp_path_factory.mktemp("sp") / "spiece")
    return te.train_sentencepiece(iter(_sp_training_lines()), prefix, vocab_size=1200,
                                  num_threads=2)


def test_train_sentencepiece_gives_xlnet_ids(sp_model):
    assert sp_model.endswith("spiece.model") and os.path.exists(sp_model[:-6] + ".vocab")
    assert not [f for f in os.listdir(os.path.dirname(sp_model)) if "incomplete" in f]
    enc = te.SentencePieceEncoder(sp_model)
    assert enc.special_ids == te.XLNET_SPECIAL_IDS
    assert enc.vocab_size == 1200 and isinstance(enc, te.Encoder)
    # The user-defined symbols follow, one piece each (the string form would glue '"', "-", ... ).
    pieces = enc.convert_ids_to_tokens(range(9, 17))
    assert pieces == [".", "(", ")", '"', "-", "\u2013", "\u00a3", "\u20ac"]


def test_sentencepiece_refuses_other_special_ids(tmp_path):
    prefix = str(tmp_path / "other")
    model = te.train_sentencepiece(iter(_emma_lines(1500)), prefix, vocab_size=600, num_threads=2,
                                   control_symbols=["<pad>", "<cls>", "<sep>", "<mask>", "<eod>"])
    with pytest.raises(te.EncoderError, match=r"other.model: special ids differ.*<cls>: 4"):
        te.SentencePieceEncoder(model)
    assert te.SentencePieceEncoder(model, check_xlnet_ids=False).special_ids["<pad>"] == 3


def test_xlnet_preprocess_text():
    assert te.xlnet_preprocess_text("  ``Hello''  naïve\tCafé  ") == '"Hello" naive Cafe'
    assert te.xlnet_preprocess_text("ÅNGSTRÖM ﬁ ①", lower=True) == "angstrom fi 1"
    assert te.xlnet_preprocess_text("a\u0301b", keep_accents=True) == "a\u0301b"


def test_digit_comma_rule(sp_model):
    enc = te.SentencePieceEncoder(sp_model)
    sp = enc.sp
    text = "In 1815, 3,000 people came, and 7, said so."
    raw = sp.encode(text, out_type=str)
    glued = [p for p in raw if len(p) > 1 and p[-1] == "," and p[-2].isdigit()]
    assert glued, f"the model should have a '<digit>,' piece: {raw}"
    pieces = enc.tokenize(text)
    assert not [p for p in pieces if len(p) > 1 and p[-1] == "," and p[-2].isdigit()]
    # Each glued piece became the pieces of its number, then a lone ","; a piece inside a word
    # ("5," of "1815,") does not gain a word-start mark.
    expected = []
    for p in raw:
        if p in glued:
            number = sp.encode(p[:-1].replace("\u2581", ""), out_type=str)
            if not p.startswith("\u2581") and number[0].startswith("\u2581"):
                number = [number[0][1:]] + number[1:] if len(number[0]) > 1 else number[1:]
            expected += number + [","]
        else:
            expected.append(p)
    assert pieces == expected
    assert enc.encode(text) == [sp.piece_to_id(p) for p in pieces]
    i = raw.index("5,")  # mid-word ("1815," -> "181" "5,"): no word-start mark may be added
    assert not [p for p in raw[:i] if p in glued] and pieces[i:i + 2] == ["5", ","]
    # Inside a word the re-encoded number loses the word-start mark XLNet's rule removes.
    sub = sp.encode("9", out_type=str)
    inner = enc._resplit("9,")
    assert inner[-1] == "," and "".join(inner[:-1]) == "".join(sub).lstrip("\u2581")
    assert not inner[0].startswith("\u2581")


def test_sentencepiece_on_emma_and_samples(sp_model):
    enc = te.SentencePieceEncoder(sp_model)
    cased, uncased = enc, te.SentencePieceEncoder(sp_model, uncased=True)
    for text in _emma_lines(500) + MULTILINGUAL:
        ids = cased.encode(text)
        assert ids == [cased.sp.piece_to_id(p) for p in cased.tokenize(text)]
        if text.isascii() and te.XLNET_SPECIAL_IDS["<unk>"] not in ids:
            assert cased.decode(ids) == " ".join(text.replace("``", '"').replace("''", '"').split())
        assert uncased.encode(text) == cased.encode(text.lower()) or not text.isascii()
    assert enc.fingerprint() == hashlib.sha256(open(sp_model, "rb").read()).hexdigest()


@pytest.mark.parametrize("uncased", [False, True])
def test_sentencepiece_batch_equals_encode(sp_model, uncased):
    """encode_batch / encode_batch_flat give `encode`'s ids text by text (the per-text path is the
    reference), on Emma, the multilingual samples and texts that take the piece path."""
    enc = te.SentencePieceEncoder(sp_model, uncased=uncased)
    texts = (_emma_lines(2500) + MULTILINGUAL + ["In 1815, 3,000 people came, and 7, said so.",
             "x\ny with a newline", "😀 unknown 𝄞 astral", "ΟΔΟΣ\u2028ΣΟΦΟΣ", ""])
    want = [enc.encode(t) for t in texts]
    assert sum(0 in w for w in want) > 2  # <unk>: the piece path is exercised
    assert enc.encode_batch(texts) == want
    flat, lengths = enc.encode_batch_flat(texts)
    assert flat.dtype == np.int32 and lengths.tolist() == [len(w) for w in want]
    assert flat.tolist() == [i for w in want for i in w]
    assert enc.encode_batch([]) == [] and enc.encode_batch_flat([])[0].size == 0


def test_combining_marks_pattern_matches_unicodedata():
    marks = te.sentencepiece._combining_re()
    text = "".join(chr(cp) for cp in range(sys.maxunicode + 1) if not 0xD800 <= cp <= 0xDFFF)
    kept = marks.sub("", text)
    assert kept == "".join(c for c in text if not unicodedata.combining(c))


def test_sentencepiece_bad_files(tmp_path):
    with pytest.raises(te.EncoderError, match="nope.model does not exist"):
        te.SentencePieceEncoder(str(tmp_path / "nope.model"))
    bad = tmp_path / "text.model"
    bad.write_text("this is not a model\n")
    with pytest.raises(te.EncoderError, match="text.model: not a SentencePiece model"):
        te.SentencePieceEncoder(str(bad))


# ------------------------------------------------------------------------------------------------
# tensor2tensor SubwordTextEncoder

SUBWORD_SAMPLES = MULTILINGUAL + [
    "under_score and back\\slash and \\u and 12; digits;", " leading space", "trailing space ",
    "two  spaces", "\n", "x\ny", "😀", "ǅ" * 3, "\u3013", "tab\tseparated\tvalues",
]


@pytest.fixture(scope="module")
def subword(tmp_path_factory):
    counts = te.count_tokens(_emma_lines(1500))
    enc = te.SubwordTextEncoder.build_to_target_size(600, counts, 1, 1000)
    path = str(tmp_path_factory.mktemp("sub") / "vocab.subwords")
    enc.store_to_file(path)
    return enc, path


def test_t2t_tokenizer_facts():
    assert te.t2t_tokenize("Dude - that's so cool.") == [
        "Dude", " - ", "that", "'", "s", "so", "cool", "."]
    assert te.t2t_tokenize(" a b ") == [" ", "a", "b", " "]
    assert te.t2t_tokenize("") == []
    assert te.t2t_detokenize(["Dude", " - ", "that", "'", "s", "so", "cool", "."]) == (
        "Dude - that's so cool.")
    alphabet = set("abc") | te.subword._ESCAPE_CHARS
    assert te.subword._escape_token("a_b\\c!", alphabet) == "a\\ub\\\\c\\33;_"
    assert te.subword._unescape_token("a\\ub\\\\c\\33;_") == "a_b\\c!"
    assert te.subword._unescape_token("\\99999999999;_") == "\u3013"


def test_subword_build_and_round_trip(subword):
    enc, _ = subword
    assert abs(enc.vocab_size - 600) <= 6
    assert enc.special_ids == {"<pad>": 0, "<EOS>": 1}
    assert enc.all_subtoken_strings[:2] == ("<pad>_", "<EOS>_")
    assert isinstance(enc, te.Encoder)
    for text in _emma_lines(2000) + SUBWORD_SAMPLES:
        ids = enc.encode(text)
        assert all(2 <= i < enc.vocab_size for i in ids)
        assert enc.decode(ids) == text
    ids = enc.encode("Emma Woodhouse")
    assert enc.decode(ids + [te.EOS_ID, te.PAD_ID], strip_extraneous=True) == "Emma Woodhouse"
    assert enc.convert_tokens_to_ids(enc.tokenize("Emma")) == enc.encode("Emma")


def test_subword_file_round_trip(subword):
    enc, path = subword
    lines = open(path, encoding="utf-8").read().split("\n")
    assert lines[:2] == ["'<pad>_'", "'<EOS>_'"] and lines[-1] == ""
    assert all(line.startswith("'") and line.endswith("'") for line in lines[:-1])
    assert not [f for f in os.listdir(os.path.dirname(path)) if "incomplete" in f]
    loaded = te.SubwordTextEncoder(path)
    assert loaded.all_subtoken_strings == enc.all_subtoken_strings
    for text in _emma_lines(300) + SUBWORD_SAMPLES:
        assert loaded.encode(text) == enc.encode(text)
    assert loaded.fingerprint() == hashlib.sha256(open(path, "rb").read()).hexdigest()
    assert loaded.fingerprint() == enc.fingerprint()  # in memory: the bytes it would store


def test_subword_matches_tensor2tensor_if_installed(subword, tmp_path):
    pytest.importorskip("tensorflow")
    try:
        from tensor2tensor.data_generators import text_encoder as t2t
    except Exception:  # not installed, or its imports need packages that are absent
        pytest.skip("tensor2tensor is not importable")
    _, path = subword
    original = t2t.SubwordTextEncoder(path)
    ours = te.SubwordTextEncoder(path)
    for text in _emma_lines(1000) + SUBWORD_SAMPLES:
        assert ours.encode(text) == original.encode(text)
    counts = te.count_tokens(_emma_lines(400))
    theirs = t2t.SubwordTextEncoder()
    theirs.build_from_token_counts(dict(counts), 3)
    mine = te.SubwordTextEncoder()
    mine.build_from_token_counts(counts, 3)
    assert mine.all_subtoken_strings == theirs.all_subtoken_strings


def test_subword_target_unreachable_warns(caplog):
    counts = te.count_tokens(_emma_lines(30))
    with caplog.at_level(logging.WARNING):
        enc = te.SubwordTextEncoder.build_to_target_size(50_000, counts, 1, 10)
    assert enc.vocab_size < 50_000
    assert "not within 1% of the target 50000" in caplog.text


def test_subword_bad_files(tmp_path, wp_vocab):
    with pytest.raises(te.EncoderError, match="missing.subwords does not exist"):
        te.SubwordTextEncoder(str(tmp_path / "missing.subwords"))
    with pytest.raises(te.EncoderError, match=r"vocab.txt:1: expected '<pad>_'"):
        te.SubwordTextEncoder(wp_vocab)  # a bert vocab is not a t2t vocab
    partial = tmp_path / "partial.subwords"
    partial.write_text("'<pad>_'\n'<EOS>_'\n'the_'\n't'\n", encoding="utf-8")
    with pytest.raises(te.EncoderError, match="partial.subwords: not a complete subword vocab"):
        te.SubwordTextEncoder(str(partial))
    with pytest.raises(te.EncoderError, match="no vocabulary"):
        te.SubwordTextEncoder().encode("text")
    with pytest.raises(ValueError, match="must start with"):
        te.SubwordTextEncoder().build_from_token_counts({"a": 1}, 1, reserved_tokens=["<EOS>"])


def test_t2t_token_classes_are_unicode_letters_and_numbers():
    """t2t's alphanumeric set is L* and N*; the tokenizer's regex must agree on every code point."""
    import sys
    token_re = te.subword._t2t_token_re()
    text = "".join(chr(cp) for cp in range(sys.maxunicode) if not 0xD800 <= cp <= 0xDFFF)
    tokens = token_re.findall(text)
    assert "".join(tokens) == text
    alnum_runs = {c for t in tokens if re.fullmatch(r"[^\W_]+", t) for c in t}
    assert alnum_runs == {c for c in text if unicodedata.category(c)[0] in "LN"}


def test_wordpiece_vocab_is_deterministic(tmp_path):
    """The same corpus gives the same vocab file (HF's own trainer breaks ties by hash order)."""
    from textrain.framework.encoders import build_wordpiece_vocab

    emma = os.path.join(os.path.dirname(__file__), "data", "austen_emma.txt")
    a = build_wordpiece_vocab(emma, 1500, str(tmp_path / "a.txt"))
    b = build_wordpiece_vocab(emma, 1500, str(tmp_path / "b.txt"))
    assert open(a, "rb").read() == open(b, "rb").read()
    tokens = open(a).read().split("\n")[:-1]
    assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] and len(tokens) == 1500
    assert len(set(tokens)) == len(tokens)


def test_learn_wordpiece_merges_most_frequent_pair_first():
    from textrain.framework.encoders import learn_wordpiece

    counts = {"low": 5, "lower": 2, "newest": 6, "widest": 3}
    vocab = learn_wordpiece(counts, 100, min_frequency=2)
    alphabet = {"l", "n", "w", "##o", "##w", "##e", "##r", "##s", "##t", "##i", "##d"}
    assert set(vocab[:len(alphabet)]) == alphabet  # single characters come first
    # ##e+##s and ##s+##t both occur 6 (newest) + 3 (widest) = 9 times, more than any other pair;
    # the tie goes to the pieces' text, so ##es is the first merge.
    assert vocab[len(alphabet)] == "##es"
    assert learn_wordpiece(counts, 100, min_frequency=2) == vocab  # deterministic
    # A size limit stops the merges.
    assert len(learn_wordpiece(counts, 14)) == 14


def test_bert_char_classes_cache_round_trips(tmp_path, monkeypatch):
    """Worker processes read BERT's Unicode classes from a disk cache; it must equal a fresh scan."""
    from textrain.framework import encoders as te

    monkeypatch.setenv("TEXTRAIN_CACHE", str(tmp_path))
    first = te.wordpiece._cached_bert_char_classes()  # computes and writes the cache
    assert len(list(tmp_path.iterdir())) == 1
    assert te.wordpiece._cached_bert_char_classes() == first == te.wordpiece._bert_char_classes()
