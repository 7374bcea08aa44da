"""Fitting a pair of token sequences into a length: the one `truncate_seq_pair` of textrain.

Both originals cut a pair the same way: one token at a time from the longer side (B on a tie) until the
pair fits. They differ in where each token goes from: BERT's run_classifier.py (`_truncate_seq_pair`)
always takes it from the end; create_pretraining_data.py (`truncate_seq_pair`) from the front or the end
with probability 1/2 each. The `rng` argument says which: None for the end, a random.Random for either.
"""
from __future__ import annotations

import random


def truncate_seq_pair(len_a: int, len_b: int, max_num_tokens: int,
                      rng: random.Random | None = None) -> tuple[int, int, int, int]:
    """Cuts (a_front, a_back, b_front, b_back) that bring len_a + len_b to <= max_num_tokens.

    Which side loses each token does not depend on chance, so the per-side counts are computed directly:
    the longer side loses tokens until the two are equal, then B and A alternate (B first). Without `rng`
    every cut is from the back; with it each side's front count is Binomial(cut, 1/2), drawn as the
    popcount of `cut` random bits (one rng call instead of one per token; the same distribution).
    """
    excess = len_a + len_b - max_num_tokens
    if excess <= 0:
        return 0, 0, 0, 0
    first = min(excess, abs(len_a - len_b))
    rest = excess - first
    cut_a = (first if len_a > len_b else 0) + rest // 2
    cut_b = (first if len_a <= len_b else 0) + rest - rest // 2
    if rng is None:
        return 0, cut_a, 0, cut_b
    a_front = rng.getrandbits(cut_a).bit_count() if cut_a else 0
    b_front = rng.getrandbits(cut_b).bit_count() if cut_b else 0
    return a_front, cut_a - a_front, b_front, cut_b - b_front
