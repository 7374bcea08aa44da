"""Text problem base classes, as tensor2tensor has them.

- `Text2TextProblem`: `inputs` -> `targets` (translation, summarisation), a SubwordTextEncoder per
  side (or one shared), EOS appended to both.
- `Text2ClassProblem`: `inputs` -> integer `label`.
- `Text2SelfProblem`: language modelling on `targets` only; `chop_length > 0` concatenates the encoded
  text of a shard and chops it into rows of that length (tensor2tensor's ChoppedTextProblem).
- `WordpieceCorpusProblem`: pretraining on a raw corpus with a WordPiece vocabulary (BERT, ELECTRA).

Vocabularies are built in `prepare` (once, before any shard) from the training samples' text, stored
in the problem's folder and reused when they exist.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
from typing import Iterator

from absl import logging

from textrain.framework import corpus, corpus_formats, fileio, shuffle
from textrain.framework.encoders import EOS_ID, SubwordTextEncoder, WordpieceEncoder, build_wordpiece_vocab
from textrain.framework.lazy_tf import tf
from textrain.framework.problem import DatasetSplit, Problem


class Text2TextProblem(Problem):
    """Subclasses implement `generate_samples` yielding {"inputs": str, "targets": str}."""

    approx_vocab_size: int = 2**13
    max_subtoken_length: int | None = None
    vocab_byte_budget: int = 10**7  # raw text per side read to count tokens for the vocabulary
    has_inputs: bool = True
    shared_vocab: bool = False
    target_lang: str | None = None  # the targets' language: BLEU tokenizes "zh" by character (decode.py)

    # ------------------------------------------------------------------ vocabularies
    def vocab_filename(self, side: str) -> str:
        suffix = "shared" if self.shared_vocab else side
        return f"vocab.{self.name}.{suffix}.{self.approx_vocab_size}.subwords"

    def _vocab_sides(self) -> list[str]:
        if self.shared_vocab or not self.has_inputs:
            return ["targets"]
        return ["inputs", "targets"]

    def text_for_vocab(self, data_dir: str, tmp_dir: str, side: str) -> Iterator[str]:
        """Training text of one side (both sides when the vocabulary is shared), within the byte budget."""
        keys = ["inputs", "targets"] if self.shared_vocab and self.has_inputs else [side]
        budget = self.vocab_byte_budget * len(keys)
        for sample in self.generate_samples(data_dir, tmp_dir, DatasetSplit.TRAIN):
            for k in keys:
                budget -= len(sample[k].encode("utf-8"))
                yield sample[k]
            if budget <= 0:
                return

    def prepare(self, data_dir: str, tmp_dir: str) -> None:
        for side in self._vocab_sides():
            path = os.path.join(self.problem_dir(data_dir), self.vocab_filename(side))
            if fileio.exists(path):
                continue
            logging.info("building %s (target size %d)", path, self.approx_vocab_size)
            encoder = SubwordTextEncoder.build_from_generator(
                self.text_for_vocab(data_dir, tmp_dir, side), self.approx_vocab_size,
                max_subtoken_length=self.max_subtoken_length)
            encoder.store_to_file(path)

    def feature_encoders(self, data_dir: str) -> dict:
        encoders = {}
        for side in self._vocab_sides():
            path = os.path.join(self.problem_dir(data_dir), self.vocab_filename(side))
            encoders[side] = SubwordTextEncoder(path)
        if self.has_inputs and "inputs" not in encoders:
            encoders["inputs"] = encoders["targets"]
        return encoders

    def encode_sample(self, sample: dict, encoders: dict) -> dict:
        out = dict(sample)
        for side in ("inputs", "targets"):
            if side in sample:
                out[side] = encoders[side].encode(sample[side]) + [EOS_ID]
        return out

    # ------------------------------------------------------------------ reading
    def example_reading_spec(self) -> dict:
        spec = {"targets": tf.io.VarLenFeature(tf.int64)}
        if self.has_inputs:
            spec["inputs"] = tf.io.VarLenFeature(tf.int64)
        return spec

    def example_length(self, example: dict) -> tf.Tensor:
        length = tf.shape(example["targets"])[0]
        if self.has_inputs:
            length = tf.maximum(length, tf.shape(example["inputs"])[0])
        return length


class Text2ClassProblem(Problem):
    """Subclasses implement `generate_samples` yielding {"inputs": str, "label": int} and
    `feature_encoders` returning {"inputs": Encoder}; `class_labels` names the classes."""

    class_labels: list[str] = []

    @property
    def num_classes(self) -> int:
        return len(self.class_labels)

    def encode_sample(self, sample: dict, encoders: dict) -> dict:
        label = int(sample["label"])
        if not 0 <= label < self.num_classes:
            raise ValueError(f"{self.name}: label {label} outside [0, {self.num_classes})")
        return {"inputs": encoders["inputs"].encode(sample["inputs"]), "label": label}

    def manifest_settings(self, data_dir: str) -> dict:
        return dict(super().manifest_settings(data_dir), class_labels=list(self.class_labels))

    def example_reading_spec(self) -> dict:
        return {"inputs": tf.io.VarLenFeature(tf.int64), "label": tf.io.FixedLenFeature([1], tf.int64)}

    def example_length(self, example: dict) -> tf.Tensor:
        return tf.shape(example["inputs"])[0]


class Text2SelfProblem(Problem):
    """Language modelling: `generate_samples` yields {"targets": str}; `chop_length` > 0 chops."""

    chop_length: int = 0

    def generate_shard(self, data_dir, tmp_dir, split, shard_id, num_shards, seed) -> Iterator[dict]:
        encoded = super().generate_shard(data_dir, tmp_dir, split, shard_id, num_shards, seed)
        if self.chop_length <= 0:
            yield from encoded
            return
        stream = itertools.chain.from_iterable(s["targets"] for s in encoded)
        while True:
            row = list(itertools.islice(stream, self.chop_length))
            if len(row) < self.chop_length:
                return  # the ragged tail is dropped, as tensor2tensor does
            yield {"targets": row}

    def encode_sample(self, sample: dict, encoders: dict) -> dict:
        return {"targets": encoders["targets"].encode(sample["targets"]) + [EOS_ID]}

    def example_reading_spec(self) -> dict:
        if self.chop_length > 0:
            return {"targets": tf.io.FixedLenFeature([self.chop_length], tf.int64)}
        return {"targets": tf.io.VarLenFeature(tf.int64)}




class WordpieceCorpusProblem(Problem):
    """Pretraining on a raw corpus (`--input_file`) with a WordPiece vocabulary (BERT, ELECTRA).

    HParams must have `input_file`, `vocab_file`, `vocab_size`, `do_lower_case`, `on_bad_utf8` and
    `dev_fraction`. With `vocab_file` empty, `prepare` learns a vocabulary of at most `vocab_size`
    pieces from the corpus into the problem's folder (reused when it exists); the manifest records its
    real size and sha256.
    """

    train_shards: int = 8
    required_special_tokens: tuple[str, ...] = ()

    def __init__(self, hparams=None):
        super().__init__(hparams)
        self._encoder: tuple[str, WordpieceEncoder] | None = None

    def dataset_splits(self) -> list[tuple[str, int]]:
        splits = [(DatasetSplit.TRAIN, self.train_shards)]
        if self.hparams.dev_fraction > 0:
            splits.append((DatasetSplit.EVAL, 1))
        return splits

    def vocab_path(self, data_dir: str) -> str:
        return self.hparams.vocab_file or os.path.join(self.problem_dir(data_dir), "vocab.txt")

    def input_paths(self) -> list[str]:
        if not self.hparams.input_file:
            raise ValueError("--input_file is required: the raw text (one sentence per line, a blank "
                             "line between documents), comma-separated paths or globs")
        return corpus.expand_paths(self.hparams.input_file, corpus_formats.ReadOptions.of(self.hparams))

    whole_file_documents: bool = False  # a file's whole text is one document (no blank-line separation)

    def document_corpus(self, tmp_dir: str) -> shuffle.DocumentCorpus:
        """The corpus, read once by datagen and shuffled to the shards (framework/shuffle.py)."""
        hp = self.hparams
        return shuffle.DocumentCorpus(tuple(self.input_paths()), hp.on_bad_utf8, hp.dev_fraction,
                                      self.whole_file_documents)

    def shard_texts(self, tmp_dir: str, split: str, shard_id: int, num_shards: int) -> Iterator[str]:
        """This shard's documents as raw texts, in corpus order."""
        return shuffle.shard_texts(self.document_corpus(tmp_dir), split, shard_id, num_shards)

    def documents(self, paths: list[str]) -> Iterator[list[str]]:
        """The corpus as documents (lists of lines)."""
        return corpus.read_documents(paths, self.hparams.on_bad_utf8)

    def prepare(self, data_dir: str, tmp_dir: str) -> None:
        """Check the corpus has text; learn the WordPiece vocab unless one is given or already built."""
        paths = self.input_paths()
        if next(self.documents(paths), None) is None:
            raise corpus.CorpusError(f"--input_file={self.hparams.input_file}: the corpus has no text "
                                     f"(every line is blank)")
        path = self.vocab_path(data_dir)
        if self.hparams.vocab_file:
            if not fileio.exists(path):
                raise FileNotFoundError(f"--vocab_file={path} does not exist")
            return
        if fileio.exists(path):
            logging.info("reusing the WordPiece vocab %s", path)
            return
        fileio.makedirs(os.path.dirname(path))
        lines = (line for p in paths for _, line in corpus.iter_lines(p, self.hparams.on_bad_utf8))
        build_wordpiece_vocab(lines, vocab_size=self.hparams.vocab_size, out_file=path,
                              do_lower_case=self.hparams.do_lower_case, source=f"--input_file={self.hparams.input_file}")
        logging.info("built %s from %s", path, self.hparams.input_file)

    def encoder(self, data_dir: str) -> WordpieceEncoder:
        path = self.vocab_path(data_dir)
        if self._encoder is None or self._encoder[0] != path:
            encoder = WordpieceEncoder(path, do_lower_case=self.hparams.do_lower_case)
            missing = [t for t in self.required_special_tokens if t not in encoder.special_ids]
            if missing:
                raise ValueError(f"{path}: the vocab lacks {', '.join(missing)}, which {self.name} needs")
            self._encoder = (path, encoder)
        return self._encoder[1]

    def manifest_settings(self, data_dir: str) -> dict:
        encoder = self.encoder(data_dir)
        settings = corpus_formats.without_default_settings(dataclasses.asdict(self.hparams))
        return dict(settings, requested_vocab_size=self.hparams.vocab_size,
                    vocab_size=int(encoder.vocab_size), vocab_fingerprint=encoder.fingerprint())
