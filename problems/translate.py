"""Text2text translation over line-aligned parallel files (tensor2tensor's translate problems, offline).

`translate_enzh_sub8k`: English -> Chinese, a SubwordTextEncoder of about 8k subwords per side, EOS
appended — tensor2tensor's translate_enzh_wmt8k pipeline with the corpus read from `--tmp_dir`
(`train.en` / `train.zh`, `.gz` or `.bz2` allowed) instead of downloaded.

Decisions:
- The dev split is held out deterministically: every `dev_every`-th pair (by line number), so the
  same input always gives the same split and no pair is in both.
- Files of different line counts are an error naming both counts: a silently shifted alignment trains
  garbage. Pairs where either side is blank are skipped (tensor2tensor does the same).
"""
from __future__ import annotations

import dataclasses
import itertools
import os
from typing import Iterator

from textrain.framework import corpus, corpus_formats, fileio
from textrain.framework.problem import DatasetSplit
from textrain.framework.registry import register_problem
from textrain.framework.settings import help_text
from textrain.framework.text_problems import Text2TextProblem


@dataclasses.dataclass
class TranslateHParams(corpus_formats.TextFieldSettings):
    dev_every: int = dataclasses.field(
        default=100, metadata=help_text("translate: every N-th line pair goes to the dev split", low=2))
    on_bad_utf8: str = dataclasses.field(
        default="error", metadata=help_text("Input bytes that are not UTF-8: error | replace | skip",
                                            choices=corpus.BAD_UTF8_POLICIES))


def _find(tmp_dir: str, name: str) -> str:
    for suffix in corpus_formats.file_suffixes():
        path = os.path.join(tmp_dir, name + suffix)
        if fileio.exists(path):
            return path
    raise corpus.CorpusError(f"{os.path.join(tmp_dir, name)}[.gz|.bz2] not found (--tmp_dir={tmp_dir!r})")


def parallel_pairs(source: str, target: str, on_bad_utf8: str = "error") -> Iterator[tuple[int, str, str]]:
    """(line number, source line, target line) of two line-aligned files; a length mismatch is an error."""
    n_src = n_tgt = 0
    for s, t in itertools.zip_longest(corpus.iter_lines(source, on_bad_utf8),
                                      corpus.iter_lines(target, on_bad_utf8)):
        n_src, n_tgt = n_src + (s is not None), n_tgt + (t is not None)
        if s is not None and t is not None:
            yield s[0], s[1].strip(), t[1].strip()
    if n_src != n_tgt:
        raise corpus.CorpusError(f"{source} and {target} are not line-aligned: {n_src} vs {n_tgt} lines")


class TranslateProblem(Text2TextProblem):
    """Parallel files `{tmp_dir}/train.{source_lang}` and `train.{target_lang}`."""

    HParams = TranslateHParams
    source_lang = "en"
    target_lang = "zh"  # Text2TextProblem's hook: decode's BLEU tokenizes Chinese by character

    def dataset_splits(self):
        return [(DatasetSplit.TRAIN, 8), (DatasetSplit.EVAL, 1)]

    def corpus_inputs(self, tmp_dir: str) -> list[str]:
        """The two line-aligned files (datagen renders structured or compressed ones once)."""
        options = corpus_formats.ReadOptions.of(self.hparams, layout="lines")
        return corpus_formats.corpus_files(
            [_find(tmp_dir, f"train.{self.source_lang}"), _find(tmp_dir, f"train.{self.target_lang}")], options)

    def generate_samples(self, data_dir, tmp_dir, split) -> Iterator[dict]:
        source, target = self.corpus_inputs(tmp_dir)
        every = self.hparams.dev_every
        for n, s, t in parallel_pairs(source, target, self.hparams.on_bad_utf8):
            if not s or not t:
                continue
            if (split == DatasetSplit.EVAL) == (n % every == 0):
                yield {"inputs": s, "targets": t}


@register_problem
class TranslateEnzhSub8k(TranslateProblem):
    approx_vocab_size = 2**13
