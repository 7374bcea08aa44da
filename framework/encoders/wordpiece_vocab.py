"""Learning a WordPiece vocabulary from text (bert's vocab.txt format).

Decisions:
- `build_wordpiece_vocab` finds FullTokenizer's words with HF's normaliser and pre-tokeniser (Rust),
  learns the pieces itself (`learn_wordpiece`, deterministic) and writes [PAD] [UNK] [CLS] [SEP] [MASK]
  as ids 0-4 (no [unused*] rows), atomically.
"""
from __future__ import annotations

import collections
import heapq
import itertools
from typing import Iterable, Mapping, Sequence

from absl import logging

from textrain.framework.encoders.base import atomic_write, iter_text_lines
from textrain.framework.encoders.reference import BERT_SPECIAL_TOKENS, MAX_INPUT_CHARS_PER_WORD
from textrain.framework.encoders.wordpiece import hf_bert_pipeline


def build_wordpiece_vocab(inputs: str | Sequence[str] | Iterable[str], vocab_size: int,
                          out_file: str, do_lower_case: bool = True, min_frequency: int = 2,
                          limit_alphabet: int = 1000, source: str | None = None) -> str:
    """Learn a WordPiece vocabulary and write a bert-style vocab.txt; returns out_file.

    `inputs`: file paths/globs (a str or list of str; .gz ok; gs:// ok) or an iterator of lines
    (pass `iter(lines)` for text in memory: a list is read as file names).
    Words are those FullTokenizer looks up (BERT's normaliser and pre-tokeniser, via HF's Rust
    implementation); the pieces are learned by `learn_wordpiece` — deterministic, unlike HF's trainer,
    whose ties fall to hash order, so the same corpus always gives the same vocab (and datagen's
    byte-identical shards hold from raw text on). [PAD] [UNK] [CLS] [SEP] [MASK] get ids 0-4.
    `source` names the text in errors when `inputs` is an iterator (e.g. the --input_file pattern).
    """
    from tokenizers import Tokenizer, models
    if vocab_size <= len(BERT_SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must exceed {len(BERT_SPECIAL_TOKENS)}, got {vocab_size}")
    tokenizer = Tokenizer(models.WordPiece({"[UNK]": 0}, unk_token="[UNK]"))
    hf_bert_pipeline(tokenizer, do_lower_case)
    normalize, pre_tokenize = tokenizer.normalizer.normalize_str, tokenizer.pre_tokenizer.pre_tokenize_str
    word_counts: collections.Counter = collections.Counter()
    too_long = 0
    for line in iter_text_lines(inputs):
        if line.strip():
            # A word longer than MAX_INPUT_CHARS_PER_WORD is [UNK] when encoding, so it has nothing to
            # teach; skipping it also keeps learning linear in the input (merging inside one
            # 20,000-character word is quadratic in its length).
            words = [w for w, _ in pre_tokenize(normalize(line))]
            kept = [w for w in words if len(w) <= MAX_INPUT_CHARS_PER_WORD]
            too_long += len(words) - len(kept)
            word_counts.update(kept)
    if not word_counts:
        where = source or (inputs if isinstance(inputs, str) else
                           ",".join(inputs) if isinstance(inputs, (list, tuple)) else "the input")
        if too_long:
            raise ValueError(f"{where}: no word to build a WordPiece vocab from: all {too_long} word(s) are longer "
                             f"than {MAX_INPUT_CHARS_PER_WORD} characters, which BERT's tokenizer makes [UNK] "
                             f"(text without spaces? split it into words or sentences first)")
        raise ValueError(f"{where}: no text to build a WordPiece vocab from (every line is blank)")
    pieces = learn_wordpiece(word_counts, vocab_size - len(BERT_SPECIAL_TOKENS), min_frequency,
                             limit_alphabet)
    tokens = list(BERT_SPECIAL_TOKENS) + [p for p in pieces if p not in BERT_SPECIAL_TOKENS]
    atomic_write(out_file, ("\n".join(tokens) + "\n").encode("utf-8"))
    logging.info("wrote %d WordPiece tokens to %s", len(tokens), out_file)
    return out_file


def learn_wordpiece(word_counts: Mapping[str, int], size: int, min_frequency: int = 2,
                    limit_alphabet: int = 1000) -> list[str]:
    """Up to `size` WordPiece pieces learned bottom-up from word counts (BPE merges with `##`
    continuation pieces, as HF's WordPieceTrainer learns them), deterministically: the most frequent
    pair is merged first, ties broken by the pieces' text. Words with a character outside the
    `limit_alphabet` most frequent ones are left out (they become [UNK], as with HF). Callers pass
    words of at most MAX_INPUT_CHARS_PER_WORD characters (longer ones are [UNK] anyway); the merging is
    linear in the number of words but quadratic in one word's length."""
    char_counts: collections.Counter = collections.Counter()
    for word, count in word_counts.items():
        for ch in word:
            char_counts[ch] += count
    alphabet = set(sorted(char_counts, key=lambda ch: (-char_counts[ch], ch))[:limit_alphabet])
    words, counts = [], []
    for word, count in sorted(word_counts.items()):
        if set(word) <= alphabet:
            words.append([word[0]] + ["##" + ch for ch in word[1:]])
            counts.append(count)
    symbol_counts: collections.Counter = collections.Counter()
    for syms, count in zip(words, counts, strict=True):
        for sym in syms:
            symbol_counts[sym] += count
    vocab = sorted(symbol_counts, key=lambda sym: (-symbol_counts[sym], sym))[:size]
    known = set(vocab)

    pair_counts: collections.Counter = collections.Counter()
    where: dict[tuple[str, str], set[int]] = collections.defaultdict(set)
    for i, (syms, count) in enumerate(zip(words, counts, strict=True)):
        for pair in itertools.pairwise(syms):
            pair_counts[pair] += count
            where[pair].add(i)
    heap = [(-c, a, b) for (a, b), c in pair_counts.items()]
    heapq.heapify(heap)
    while len(vocab) < size and heap:
        neg, a, b = heapq.heappop(heap)
        current = pair_counts.get((a, b), 0)
        if current != -neg:  # stale entry: its count dropped since it was pushed
            if current > 0:
                heapq.heappush(heap, (-current, a, b))
            continue
        if current < min_frequency:
            break
        merged = a + b[2:]
        if merged not in known:
            known.add(merged)
            vocab.append(merged)
        for i in sorted(where.pop((a, b), ())):
            syms, count = words[i], counts[i]
            out, j, changed = [], 0, False
            while j < len(syms):
                if j + 1 < len(syms) and syms[j] == a and syms[j + 1] == b:
                    out.append(merged)
                    j += 2
                    changed = True
                else:
                    out.append(syms[j])
                    j += 1
            if not changed:
                continue
            for pair in itertools.pairwise(syms):
                pair_counts[pair] -= count
            for pair in itertools.pairwise(out):
                pair_counts[pair] += count
                where[pair].add(i)
                heapq.heappush(heap, (-pair_counts[pair], *pair))
            words[i] = out
        pair_counts.pop((a, b), None)
    return vocab
