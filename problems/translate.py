"""Text2text translation over line-aligned parallel files (tensor2tensor's translate problems, offline).

`translate_enzh_sub8k`: English -> Chinese, a SubwordTextEncoder of about 8k subwords per side, EOS
appended — tensor2tensor's translate_enzh_wmt8k pipeline with the corpus read from `--tmp_dir`
(`train.en` / `train.zh`, `.gz` or `.bz2` allowed) instead of downloaded.

Decisions:
- The dev split is held out deterministically: every `dev_every`-th pair (by line number), so the
  same input always gives the same split and no pair is in both.
- Datagen reads the pair once (framework/shuffle.py, line pairs): both files cut at the same line numbers,
  each pair sent to the shard a hash of its text picks; a shard job reads only its own pairs, in corpus
  order.
- Files of different line counts are an error naming both counts: a silently shifted alignment trains
  garbage. Pairs where either side is blank are skipped (tensor2tensor does the same).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Iterator

from textrain.framework import corpus, corpus_formats, fileio, shuffle
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


class TranslateProblem(Text2TextProblem):
    """Parallel files `{tmp_dir}/train.{source_lang}` and `train.{target_lang}`."""

    HParams = TranslateHParams
    source_lang = "en"
    target_lang = "zh"  # Text2TextProblem's hook: decode's BLEU tokenizes Chinese by character

    def dataset_splits(self):
        return [(DatasetSplit.TRAIN, 8), (DatasetSplit.EVAL, 1)]

    def parallel_files(self, tmp_dir: str) -> list[str]:
        """The two line-aligned files (source, target), read as their format says."""
        options = corpus_formats.ReadOptions.of(self.hparams, layout="lines")
        return corpus_formats.corpus_files(
            [_find(tmp_dir, f"train.{self.source_lang}"), _find(tmp_dir, f"train.{self.target_lang}")], options)

    def document_corpus(self, tmp_dir: str) -> shuffle.DocumentCorpus:
        """The pair of files as line pairs, read once by datagen and shuffled to the shards."""
        return shuffle.DocumentCorpus(tuple(self.parallel_files(tmp_dir)), self.hparams.on_bad_utf8, pairs=True,
                                      dev_every=self.hparams.dev_every)

    def generate_samples(self, data_dir, tmp_dir, split) -> Iterator[dict]:
        """Every pair of `split`, in file order (the vocabulary's text)."""
        source, target = self.parallel_files(tmp_dir)
        every = self.hparams.dev_every
        for n, s, t in corpus.parallel_lines(source, target, self.hparams.on_bad_utf8):
            if not s or not t:
                continue
            if (split == DatasetSplit.EVAL) == (n % every == 0):
                yield {"inputs": s, "targets": t}

    def generate_shard(self, data_dir: str, tmp_dir: str, split: str, shard_id: int, num_shards: int,
                       seed: int) -> Iterator[dict]:
        """This shard's pairs, from the corpus shuffle, in corpus order."""
        encoders = self.feature_encoders(data_dir)
        for text in shuffle.shard_texts(self.document_corpus(tmp_dir), split, shard_id, num_shards):
            source, target = text.split("\n", 1)
            yield self.encode_sample({"inputs": source, "targets": target}, encoders)


@register_problem
class TranslateEnzhSub8k(TranslateProblem):
    approx_vocab_size = 2**13
