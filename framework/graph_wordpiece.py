"""BERT WordPiece tokenization inside the TensorFlow graph, with core TF ops only (raw-strings-in serving).

`GraphWordpieceTokenizer(vocab_file, do_lower_case, max_seq_length)` is a `tf.Module` (its lookup
tables are tracked, so a SavedModel that holds it as an attribute captures them). Called on string
tensors it gives the classifier features that problems/classification.py writes for the same text:

    tokenizer = GraphWordpieceTokenizer("vocab.txt", do_lower_case=True, max_seq_length=128)
    features = tokenizer(tf.constant(["Emma was rich."]), tf.constant(["She was clever."]))
    # {"input_ids", "input_mask", "segment_ids"}: int32 [B, max_seq_length]

The ids equal `framework.encoders.WordpieceEncoder` (google-research/bert FullTokenizer) and the
layout equals `problems.layouts.bert_layout` (`[CLS] A [SEP] B [SEP]`, longest-first
truncation, right padding); tests/test_graph_wordpiece.py checks both on thousands of real lines.
The values are the records' values; the dtype is int32, what `Problem.preprocess_example` feeds the
model.

Why not tensorflow-text: its wheel depends on the full `tensorflow` package and would replace
tensorflow-cpu; everything here is `tf.strings` / `tf.lookup` / ragged ops of core TF.

How (BasicTokenizer on code points, WordPiece by hash lookups):
- Text -> code points (`tf.strings.unicode_decode`; invalid UTF-8 becomes U+FFFD, which BERT's cleaning
  drops, as the Python encoder's `decode("utf-8", "ignore")` does).
- Per code point classes come from a table computed once in Python from `unicodedata` (BERT's own
  predicates, so the classes are FullTokenizer's by construction): dropped (NUL, U+FFFD, Cc/Cf but
  tab/newline/CR), whitespace (Python `str.split`'s, plus Zs), CJK ideograph, punctuation (BERT's class:
  P* and every non-alphanumeric printable ASCII), and for lower-casing "cased" / "case-ignorable".
- Words: split at whitespace, every CJK character alone. With `do_lower_case`, each character is
  replaced by `strip_accents(lower(char))` from an exceptions table (NFD, Mn removed; e.g. "É" -> "e",
  "İ" -> "i", a lone accent -> nothing). Python lower-cases a word-final capital sigma to "ς" (Unicode's
  Final_Sigma context: a cased letter before it, none after it, skipping case-ignorable characters): the
  graph finds those neighbours with prefix counts and applies the same rule. Then punctuation
  characters split off as their own tokens.
- WordPiece: greedy longest-match-first. A `tf.while_loop` advances every unfinished word at once: at
  each step the candidates `word[start:start+k]` (k = 1 .. longest vocab entry, "##" prefixed when
  start > 0) are looked up in a `StaticHashTable` and the longest hit is taken; no hit makes the whole
  word [UNK], as does a word longer than 200 characters (`max_input_chars_per_word` of
  google-research/bert, which framework.encoders uses).

Known limit (documented, not hit by real text): Python's NFD reorders runs of combining marks by
combining class before the accents are stripped; done per character here, so two adjacent NON-Mn
marks with a non-zero combining class in the wrong order (a few Mc musical/Vietnamese reading marks)
would keep their order. Mn marks, which is all that ordinary text has, are removed either way.

XLNet's SentencePiece cannot be expressed in core TF ops (its unigram Viterbi segmentation needs the
sentencepiece kernel, which only tensorflow-text ships): an exported XLNet takes token ids in.
"""
from __future__ import annotations

import functools
import os
import sys
import unicodedata

import numpy as np
import tensorflow as tf

from textrain.framework import encoders

DROP, SPACE, CJK, PUNCT, CASED, IGNORABLE = 1, 2, 4, 8, 16, 32
CAPITAL_SIGMA, FINAL_SIGMA = 0x3A3, 0x3C2
_TABLES_VERSION = 1


def _is_punctuation(cp: int, cat: str) -> bool:
    return cat[0] == "P" or 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126


def _compute_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(classes uint8 [0x110000], exception code points, their replacement starts, lengths)."""
    n = sys.maxunicode + 1
    classes = np.zeros(n, np.uint8)
    exc_cps, exc_flat, exc_starts, exc_lens = [], [], [], []
    sigma_probe = "\u03a3"
    for cp in range(n):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        char = chr(cp)
        cat = unicodedata.category(char)
        if cat in ("Cn", "Co"):  # unassigned / private use: no case, no decomposition, not punctuation
            continue
        bits = 0
        if cp in (0, 0xFFFD) or (cat in ("Cc", "Cf") and cp not in (9, 10, 13)):
            bits |= DROP
        elif char.isspace() or cat == "Zs":
            bits |= SPACE
        if encoders.is_cjk(cp):
            bits |= CJK
        if _is_punctuation(cp, cat):
            bits |= PUNCT
        # Python's Final_Sigma scan (unicodeobject.c): skips case-ignorable characters, then asks "cased?".
        alone = (char + sigma_probe).lower()[-1] == "\u03c2"          # cased and not ignorable
        after_a = ("A" + char + sigma_probe).lower()[-1] == "\u03c2"  # ignorable, or cased
        if alone:
            bits |= CASED
        elif after_a:
            bits |= IGNORABLE
        classes[cp] = bits
        if not bits & (DROP | SPACE):
            lowered = char.lower()
            if lowered != char or not char.isascii():
                replaced = "".join(c for c in unicodedata.normalize("NFD", lowered)
                                   if unicodedata.category(c) != "Mn")
                if replaced != char:
                    exc_cps.append(cp)
                    exc_starts.append(len(exc_flat))
                    exc_lens.append(len(replaced))
                    exc_flat.extend(ord(c) for c in replaced)
    return (classes, np.array(exc_cps, np.int64), np.array(exc_flat, np.int32),
            np.stack([np.array(exc_starts, np.int32), np.array(exc_lens, np.int32)]))


@functools.lru_cache(maxsize=1)
def unicode_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The tables (a few seconds to compute), cached on disk per Unicode version like framework.encoders'."""
    cache_dir = os.environ.get("TEXTRAIN_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "textrain"))
    path = os.path.join(cache_dir, f"graph_wordpiece.v{_TABLES_VERSION}.unicode{unicodedata.unidata_version}.npz")
    try:
        with np.load(path) as z:
            return z["classes"], z["exc_cps"], z["exc_flat"], z["exc_starts_lens"]
    except (OSError, ValueError, KeyError):
        pass
    tables = _compute_tables()
    try:
        os.makedirs(cache_dir, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.incomplete.npz"
        np.savez(tmp, classes=tables[0], exc_cps=tables[1], exc_flat=tables[2], exc_starts_lens=tables[3])
        os.replace(tmp, path)
    except OSError:
        pass
    return tables


def _shift_right(x: tf.Tensor, fill) -> tf.Tensor:
    """x[i - 1] at position i, `fill` at 0."""
    return tf.concat([tf.fill([1], tf.cast(fill, x.dtype)), x[:-1]], axis=0)


def truncated_lengths(len_a: tf.Tensor, len_b: tf.Tensor, max_seq_length: int) -> tuple[tf.Tensor, tf.Tensor]:
    """The lengths run_classifier's longest-first `_truncate_seq_pair` leaves (closed form).

    Single text (len_b == 0): min(len_a, L - 2). Pair, budget m = L - 3: unchanged when it fits; when
    cutting the longer side down to the shorter one's length suffices (2 * shorter <= m), only the
    longer side loses (to m - shorter); otherwise both end at ceil(m/2) (A) and floor(m/2) (B), because
    the loop removes from B on ties.
    """
    pair = len_b > 0
    m = tf.where(pair, tf.constant(max_seq_length - 3, len_a.dtype), tf.constant(max_seq_length - 2, len_a.dtype))
    fits = len_a + len_b <= m
    one_side = 2 * tf.minimum(len_a, len_b) <= m
    a = tf.where(fits, len_a, tf.where(one_side, tf.where(len_a > len_b, m - len_b, len_a), (m + 1) // 2))
    b = tf.where(fits, len_b, tf.where(one_side, tf.where(len_b > len_a, m - len_a, len_b), m // 2))
    return tf.where(pair, a, tf.minimum(len_a, m)), tf.where(pair, b, tf.zeros_like(len_b))


class GraphWordpieceTokenizer(tf.Module):
    """WordPiece + BERT classifier layout in the graph (see the module docstring)."""

    def __init__(self, vocab_file: str, do_lower_case: bool = True, max_seq_length: int = 128,
                 name: str | None = None):
        super().__init__(name=name)
        if max_seq_length < 3:
            raise ValueError(f"max_seq_length must be at least 3, got {max_seq_length}")
        vocab = encoders.load_wordpiece_vocab(vocab_file)
        for token in ("[UNK]", "[CLS]", "[SEP]"):
            if token not in vocab:
                raise ValueError(f"{vocab_file} lacks {token}")
        self.do_lower_case = do_lower_case
        self.max_seq_length = max_seq_length
        self.unk_id, self.cls_id, self.sep_id = vocab["[UNK]"], vocab["[CLS]"], vocab["[SEP]"]
        self.max_chars_per_word = encoders.MAX_INPUT_CHARS_PER_WORD
        longest = max(len(t[2:]) if t.startswith("##") else len(t) for t in vocab)
        self.max_piece_chars = max(1, min(longest, self.max_chars_per_word))
        classes, exc_cps, exc_flat, exc_starts_lens = unicode_tables()
        self._classes = tf.constant(classes)  # uint8: 1.1 MB in a SavedModel
        self._vocab = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(list(vocab), tf.string),
                                                tf.constant(list(vocab.values()), tf.int64)),
            default_value=-1)
        self._exceptions = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(exc_cps, tf.int64),
                                                tf.range(len(exc_cps), dtype=tf.int64)),
            default_value=-1)
        self._exc_flat = tf.constant(exc_flat, tf.int32)
        self._exc_starts = tf.constant(exc_starts_lens[0], tf.int32)
        self._exc_lens = tf.constant(exc_starts_lens[1], tf.int32)

    # ------------------------------------------------------------------ BasicTokenizer
    def _final_sigma(self, cp: tf.Tensor, rows: tf.Tensor, cls: tf.Tensor) -> tf.Tensor:
        """Which capital sigmas Python's str.lower would make final (see the module docstring)."""
        n = tf.size(cp)
        anchor = tf.equal(cls & IGNORABLE, 0)  # positions the scan stops at
        cased = tf.not_equal(cls & CASED, 0)
        count = tf.cumsum(tf.cast(anchor, tf.int32))  # anchors in [0, i]
        total = count[-1] if n > 0 else 0
        anchors = tf.concat([tf.cast(tf.where(anchor)[:, 0], tf.int32), [0]], axis=0)
        before = count - tf.cast(anchor, tf.int32)    # anchors in [0, i)
        prev = tf.gather(anchors, tf.maximum(before - 1, 0))
        prev_cased = (before > 0) & tf.equal(tf.gather(rows, prev), rows) & tf.gather(cased, prev)
        nxt = tf.gather(anchors, tf.minimum(count, tf.maximum(total - 1, 0)))
        next_cased = (count < total) & tf.equal(tf.gather(rows, nxt), rows) & tf.gather(cased, nxt)
        return tf.equal(cp, CAPITAL_SIGMA) & prev_cased & ~next_cased

    def _replace(self, cp: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """strip_accents(lower(c)) per code point -> (new code points, index of each one's source)."""
        idx = self._exceptions.lookup(tf.cast(cp, tf.int64))
        is_exc = idx >= 0
        safe = tf.cast(tf.maximum(idx, 0), tf.int32)
        n = tf.size(cp)
        starts = tf.where(is_exc, tf.gather(self._exc_starts, safe) + n, tf.range(n))
        lens = tf.where(is_exc, tf.gather(self._exc_lens, safe), tf.ones_like(cp))
        spans = tf.ragged.range(starts, starts + lens)
        source = tf.concat([cp, self._exc_flat], axis=0)
        return tf.gather(source, spans.flat_values), tf.cast(spans.value_rowids(), tf.int32)

    def basic_tokens(self, text: tf.Tensor) -> tf.RaggedTensor:
        """BasicTokenizer: string [B] -> ragged tokens [B, (tokens)] (strings)."""
        text = tf.convert_to_tensor(text, tf.string)
        chars = tf.strings.unicode_decode(text, "UTF-8", errors="replace", replacement_char=0xFFFD)
        rows = tf.cast(chars.value_rowids(), tf.int32)
        cp = chars.flat_values
        cls = tf.cast(tf.gather(self._classes, cp), tf.int32)
        keep = tf.equal(cls & DROP, 0)
        cp, rows, cls = tf.boolean_mask(cp, keep), tf.boolean_mask(rows, keep), tf.boolean_mask(cls, keep)
        space = tf.not_equal(cls & SPACE, 0)
        cjk = tf.not_equal(cls & CJK, 0)
        word_start = ~space & (cjk | _shift_right(space, True) | _shift_right(cjk, False)
                               | tf.not_equal(rows, _shift_right(rows, -1)))
        word = tf.cumsum(tf.cast(word_start, tf.int32))
        if self.do_lower_case:
            cp = tf.where(self._final_sigma(cp, rows, cls), FINAL_SIGMA, cp)
        cp, rows, word = tf.boolean_mask(cp, ~space), tf.boolean_mask(rows, ~space), tf.boolean_mask(word, ~space)
        if self.do_lower_case:
            cp, source = self._replace(cp)
            rows, word = tf.gather(rows, source), tf.gather(word, source)
        cls = tf.cast(tf.gather(self._classes, cp), tf.int32)
        space = tf.not_equal(cls & SPACE, 0)
        punct = tf.not_equal(cls & PUNCT, 0)
        token_start = ~space & (punct | _shift_right(punct, False) | _shift_right(space, True)
                                | tf.not_equal(word, _shift_right(word, -1)))
        token = tf.cumsum(tf.cast(token_start, tf.int32)) - 1
        keep = ~space
        num_tokens = tf.reduce_sum(tf.cast(token_start, tf.int32))
        token_chars = tf.RaggedTensor.from_value_rowids(tf.boolean_mask(cp, keep), tf.boolean_mask(token, keep),
                                                        nrows=num_tokens)
        token_rows = tf.boolean_mask(rows, token_start)
        strings = tf.strings.unicode_encode(token_chars, "UTF-8")
        return tf.RaggedTensor.from_value_rowids(strings, token_rows, nrows=tf.shape(text, out_type=tf.int32)[0])

    # ------------------------------------------------------------------ WordPiece
    def _wordpiece(self, words: tf.Tensor) -> tf.RaggedTensor:
        """Words [W] -> ragged piece ids [W, (pieces)] (greedy longest match; [UNK] for a word that
        cannot be covered or is longer than max_chars_per_word)."""
        lengths = tf.strings.length(words, unit="UTF8_CHAR")
        too_long = lengths > self.max_chars_per_word
        ks = tf.range(1, self.max_piece_chars + 1)
        num = tf.size(words)

        def step(i, cur, active, failed, ids_ta, valid_ta):
            idx = tf.where(active)[:, 0]
            w = tf.gather(words, idx)
            start = tf.gather(cur, idx)
            remaining = tf.gather(lengths, idx) - start
            shape = [tf.size(idx), self.max_piece_chars]
            pos = tf.broadcast_to(start[:, None], shape)
            size = tf.broadcast_to(ks[None, :], shape)
            sub = tf.strings.substr(tf.broadcast_to(w[:, None], shape), pos, size, unit="UTF8_CHAR")
            keys = tf.where(pos > 0, tf.strings.join(["##", sub]), sub)
            ids = self._vocab.lookup(keys)
            found = (ids >= 0) & (size <= remaining[:, None])
            best = tf.reduce_max(tf.where(found, size, 0), axis=1)
            best_id = tf.gather(ids, tf.maximum(best - 1, 0), batch_dims=1)
            hit = best > 0
            full = lambda values, fill: tf.tensor_scatter_nd_update(  # noqa: E731
                tf.fill([num], tf.cast(fill, values.dtype)), idx[:, None], values)
            ids_ta = ids_ta.write(i, full(best_id, 0))
            valid_ta = valid_ta.write(i, full(hit, False))
            failed = failed | full(~hit, False)
            cur = cur + full(best, 0)
            active = active & ~failed & (cur < lengths)
            return i + 1, cur, active, failed, ids_ta, valid_ta

        # Most words are vocabulary entries: one lookup settles them; the loop handles the rest.
        whole = self._vocab.lookup(words)
        done = (whole >= 0) & ~too_long
        # Row 0 of the step arrays is the whole-word hit (so they are never empty when stacked).
        init = (tf.constant(1), tf.zeros_like(lengths), ~too_long & ~done & (lengths > 0), tf.zeros_like(too_long),
                tf.TensorArray(tf.int64, size=1, dynamic_size=True, element_shape=[None]).write(0, whole),
                tf.TensorArray(tf.bool, size=1, dynamic_size=True, element_shape=[None]).write(0, done))
        _, _, _, failed, ids_ta, valid_ta = tf.while_loop(
            lambda i, cur, active, *_: tf.reduce_any(active), step, init,
            shape_invariants=(tf.TensorShape([]), tf.TensorShape([None]), tf.TensorShape([None]),
                              tf.TensorShape([None]), tf.TensorShape(None), tf.TensorShape(None)))
        ids = tf.transpose(tf.reshape(ids_ta.stack(), [-1, num]))      # [W, 1 + steps]
        valid = tf.transpose(tf.reshape(valid_ta.stack(), [-1, num]))
        unk = (failed | too_long)[:, None]
        first = tf.equal(tf.range(tf.shape(ids)[1]), 0)[None, :]
        ids = tf.where(unk & first, tf.constant(self.unk_id, tf.int64), ids)
        valid = tf.where(unk, first, valid)
        return tf.ragged.boolean_mask(ids, valid)

    def encode(self, text: tf.Tensor) -> tf.RaggedTensor:
        """Token ids of each text [B] -> ragged int64 [B, (ids)], as WordpieceEncoder.encode."""
        tokens = self.basic_tokens(text).with_row_splits_dtype(tf.int64)
        pieces = self._wordpiece(tokens.flat_values).with_row_splits_dtype(tf.int64)
        return tokens.with_flat_values(pieces).merge_dims(1, 2)

    # ------------------------------------------------------------------ layout
    def __call__(self, text_a: tf.Tensor, text_b: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
        """string [B] (and [B]) -> {input_ids, input_mask, segment_ids}: int32 [B, max_seq_length]."""
        a = self.encode(text_a)
        batch = a.nrows()
        len_a = a.row_lengths()
        b = self.encode(text_b) if text_b is not None else None
        len_b = b.row_lengths() if b is not None else tf.zeros_like(len_a)
        keep_a, keep_b = truncated_lengths(len_a, len_b, self.max_seq_length)
        rows = tf.range(batch)
        # Every token's (row, position) in `[CLS] A [SEP] B [SEP]`, scattered into [B, L] zeros.
        parts = [(rows, tf.zeros_like(rows), tf.fill([batch], tf.cast(self.cls_id, tf.int64)), 0),
                 self._kept(a, keep_a, offset=1, segment=0),
                 (rows, keep_a + 1, tf.fill([batch], tf.cast(self.sep_id, tf.int64)), 0)]
        if b is not None:
            has_b = keep_b > 0
            parts += [self._kept(b, keep_b, offset=keep_a + 2, segment=1),
                      (tf.boolean_mask(rows, has_b), tf.boolean_mask(keep_a + keep_b + 2, has_b),
                       tf.fill([tf.reduce_sum(tf.cast(has_b, tf.int32))], tf.cast(self.sep_id, tf.int64)), 1)]
        indices = tf.concat([tf.stack([r, p], axis=1) for r, p, _, _ in parts], axis=0)
        values = tf.concat([v for _, _, v, _ in parts], axis=0)
        segments = tf.concat([tf.fill(tf.shape(v), tf.cast(seg, tf.int64)) for _, _, v, seg in parts], axis=0)
        shape = tf.stack([batch, tf.constant(self.max_seq_length, tf.int64)])
        scatter = lambda updates: tf.cast(tf.scatter_nd(indices, updates, shape), tf.int32)  # noqa: E731
        return {"input_ids": scatter(values), "input_mask": scatter(tf.ones_like(values)),
                "segment_ids": scatter(segments)}

    @staticmethod
    def _kept(ids: tf.RaggedTensor, keep: tf.Tensor, offset, segment: int):
        """(rows, positions, values, segment) of the first keep[row] ids of each row, placed from offset."""
        rows = ids.value_rowids()
        within = tf.range(tf.size(rows, out_type=tf.int64)) - tf.gather(ids.row_starts(), rows)
        kept = within < tf.gather(keep, rows)
        offset = tf.gather(offset, rows) if isinstance(offset, tf.Tensor) else offset
        return (tf.boolean_mask(rows, kept), tf.boolean_mask(within + offset, kept),
                tf.boolean_mask(ids.flat_values, kept), segment)
