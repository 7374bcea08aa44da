"""Corpus BLEU on detokenised text, by sacreBLEU (Post, 2018), the score translation papers report.

Decisions:
- sacreBLEU scores *text* with its own fixed tokenisation, so a figure does not depend on our
  subword vocabulary or on how a system tokenises: `zh` (every CJK character a token, other runs
  tokenised as 13a) for Chinese targets, `13a` (mteval-v13a, WMT's standard) otherwise. Its signature
  (`nrefs:1|case:mixed|eff:no|tok:zh|smooth:exp|version:...`) is reported with the score.
- tensor2tensor's `approx_bleu` (the metric its eval loop prints) is computed differently: on the
  *subword ids* of the hypothesis and the reference, without detokenising or re-tokenising. Subword
  n-grams are shorter than words, so more of them match (a half-right word still scores its right
  pieces) and every word split in several pieces adds easy n-gram matches; t2t's own docs warn it runs
  high, typically ~1.5x the real BLEU on WMT en-de. Its figures are not comparable with sacreBLEU's,
  nor across vocabularies; the tensor2tensor authors report `t2t-bleu` (detokenised, 13a-like) in papers.
"""
from __future__ import annotations

from typing import Sequence


def tokenizer_for(target_language: str | None) -> str:
    """sacreBLEU's tokenizer for a target language code: `zh` for Chinese, else `13a`."""
    return "zh" if (target_language or "").lower().startswith("zh") else "13a"


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str], target_language: str | None = None):
    """sacreBLEU's corpus BLEU (one reference per line): `.score` is 0-100, `str()` the full report,
    `.signature` sacreBLEU's signature of how it was computed."""
    import sacrebleu  # imported here: only decoding and evaluation need it

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    metric = sacrebleu.metrics.BLEU(tokenize=tokenizer_for(target_language))
    score = metric.corpus_score(list(hypotheses), [list(references)])
    score.signature = str(metric.get_signature())
    return score
