"""The Problem contract (tensor2tensor style).

A problem turns raw text into sharded TFRecords (`generate_*` side, driven by framework/generator.py)
and reads them back as a `tf.data.Dataset` (`example_reading_spec` / `preprocess_example` / `dataset`
side). See docs/CONTRACTS.md for the exact signatures and docs/DESIGN.md §2 for the rules.

Decisions:
- Settings are validated on construction (framework.settings.validate_settings), before any work.
- Reading checks the split's files against its manifest first (a stat each), so a deleted, truncated or
  replaced shard is named before any training.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, ClassVar, Iterator

from textrain.framework import corpus_formats, fileio, generator, manifests, pipeline, shuffle
from textrain.framework.errors import MissingDataError, RecordError
from textrain.framework.lazy_tf import tf
from textrain.framework.settings import validate_settings


class DatasetSplit:
    TRAIN = "train"
    EVAL = "dev"
    TEST = "test"


class ModeKeys:
    TRAIN = "train"
    EVAL = "eval"
    PREDICT = "predict"


@dataclasses.dataclass
class NoHParams:
    """Problems without settings."""


@dataclasses.dataclass
class DataParams:
    """The reading side's knobs (see docs/CONTRACTS.md)."""

    batch_size: int
    max_length: int = 0
    shuffle: bool | None = None
    shuffle_buffer: int = 10_000
    repeat: bool | None = None
    seed: int | None = None
    batching: str = "auto"
    drop_remainder: bool = True


class Problem:
    """Base class of every data problem. Subclasses register with @register_problem."""

    HParams: ClassVar[type] = NoHParams
    shuffle_examples: ClassVar[bool] = True
    registered_name: str = ""

    def __init__(self, hparams: Any = None):
        self.hparams = hparams if hparams is not None else self.HParams()
        validate_settings(self.hparams)  # declared ranges + the HParams' validate(), before any work

    @property
    def name(self) -> str:
        return self.registered_name or type(self).__name__

    def problem_dir(self, data_dir: str) -> str:
        return os.path.join(data_dir, self.name)

    # ---------------------------------------------------------------- generation side
    def dataset_splits(self) -> list[tuple[str, int]]:
        return [(DatasetSplit.TRAIN, 8), (DatasetSplit.EVAL, 1)]

    def prepare(self, data_dir: str, tmp_dir: str) -> None:
        """Build vocabularies (runs once, in the parent, before any shard)."""

    def feature_encoders(self, data_dir: str) -> dict:
        return {}

    def generate_samples(self, data_dir: str, tmp_dir: str, split: str) -> Iterator[dict]:
        raise NotImplementedError(f"{self.name} must implement generate_samples or generate_shard")

    def document_corpus(self, tmp_dir: str) -> shuffle.DocumentCorpus | None:
        """A corpus of documents that datagen reads once and shuffles to the shards by a hash of each
        document's text (framework/shuffle.py); its shard jobs then read `shuffle.shard_texts`. None: the
        problem reads its input itself, whole, in every shard job (`generate_samples`)."""
        return None

    def encode_sample(self, sample: dict, encoders: dict) -> dict:
        """Encode the text fields that have an encoder; other fields pass through."""
        return {k: (encoders[k].encode(v) if k in encoders and isinstance(v, str) else v)
                for k, v in sample.items()}

    def generate_encoded_samples(self, data_dir: str, tmp_dir: str, split: str) -> Iterator[dict]:
        encoders = self.feature_encoders(data_dir)
        for sample in self.generate_samples(data_dir, tmp_dir, split):
            yield self.encode_sample(sample, encoders)

    def generate_shard(self, data_dir: str, tmp_dir: str, split: str, shard_id: int, num_shards: int,
                       seed: int) -> Iterator[dict]:
        """Round-robin: raw sample i belongs to shard i % num_shards; only those are encoded."""
        encoders = self.feature_encoders(data_dir)
        for i, sample in enumerate(self.generate_samples(data_dir, tmp_dir, split)):
            if i % num_shards == shard_id:
                yield self.encode_sample(sample, encoders)

    def manifest_settings(self, data_dir: str) -> dict:
        settings = dataclasses.asdict(self.hparams) if dataclasses.is_dataclass(self.hparams) else {}
        settings = corpus_formats.without_default_settings(settings)
        for name, encoder in self.feature_encoders(data_dir).items():
            settings[f"{name}_vocab_fingerprint"] = encoder.fingerprint()
            settings.setdefault(f"{name}_vocab_size", encoder.vocab_size)
        return settings

    def after_split(self, data_dir: str, split: str, manifest: dict) -> None:
        """Hook for extra files written once a split is complete."""

    def shuffle_split(self, split: str) -> bool:
        """Whether the records of `split` are shuffled within each shard when written (default:
        `shuffle_examples`). Task problems keep dev/test in input order for evaluation/prediction."""
        return self.shuffle_examples

    def generate_data(self, data_dir: str, tmp_dir: str, num_workers: int = 1, task_id: int | None = None,
                      num_tasks: int = 1, seed: int = 0, overwrite: bool = False,
                      num_shards: dict[str, int] | None = None, verify: bool = False,
                      partition_mb: float = shuffle.DEFAULT_PARTITION_MB,
                      claim_timeout_s: float = shuffle.DEFAULT_CLAIM_TIMEOUT_S) -> dict[str, dict]:
        """Make the shards and manifests of every split (framework.generator.generate_data)."""
        return generator.generate_data(self, data_dir, tmp_dir, num_workers=num_workers, task_id=task_id,
                                       num_tasks=num_tasks, seed=seed, overwrite=overwrite,
                                       num_shards=num_shards, verify=verify, partition_mb=partition_mb,
                                       claim_timeout_s=claim_timeout_s)

    # ---------------------------------------------------------------- reading side
    def example_reading_spec(self) -> dict:
        raise NotImplementedError

    def preprocess_example(self, example: dict, mode: str, params: DataParams) -> dict:
        """Default: int64 -> int32 (what the models and TPUs want)."""
        return {k: (tf.cast(v, tf.int32) if v.dtype == tf.int64 else v) for k, v in example.items()}

    def example_length(self, example: dict) -> tf.Tensor:
        """Length used for bucketing and max_length filtering (variable-length problems)."""
        lengths = [tf.shape(v)[0] for v in example.values() if v.shape.rank == 1]
        return tf.reduce_max(tf.stack(lengths)) if lengths else tf.constant(0)

    def default_batching(self) -> str:
        spec = self.example_reading_spec()
        return "fixed" if all(isinstance(s, tf.io.FixedLenFeature) for s in spec.values()) else "bucket"

    def read_manifest(self, data_dir: str, split: str = DatasetSplit.TRAIN) -> dict:
        path = os.path.join(self.problem_dir(data_dir), manifests.manifest_filename(self.name, split))
        if not fileio.exists(path):
            raise MissingDataError(
                f"{path} does not exist: the {split!r} split of {self.name} has not been (completely) "
                f"generated in {data_dir}; run textrain-datagen --problem={self.name} --data_dir={data_dir}")
        return fileio.read_json(path)

    def data_files(self, data_dir: str, split: str) -> list[str]:
        """The split's record files, checked against its manifest first (a stat each: names and sizes
        recorded at write time), so a deleted, truncated or replaced shard is named before any training."""
        manifest = self.read_manifest(data_dir, split)
        damage = manifests.check_split_files(self.problem_dir(data_dir), manifest)
        if damage:
            raise RecordError(
                f"the {split!r} split in {self.problem_dir(data_dir)} does not match its manifest: "
                f"{'; '.join(map(str, damage))}. Re-run textrain-datagen --problem={self.name} --data_dir={data_dir} "
                f"(add --verify to check every record) with the settings the data was made with: it "
                f"regenerates exactly those shards")
        return [os.path.join(self.problem_dir(data_dir), s["file"]) for s in manifest["shards"]]

    def dataset(self, mode: str, data_dir: str, params: DataParams,
                input_context: tf.distribute.InputContext | None = None,
                split: str | None = None) -> tf.data.Dataset:
        """Records -> parsed, preprocessed, batched (per replica when input_context is given)."""
        split = split or (DatasetSplit.TRAIN if mode == ModeKeys.TRAIN else DatasetSplit.EVAL)
        training = mode == ModeKeys.TRAIN
        shuffle = (training and self.shuffle_examples) if params.shuffle is None else params.shuffle
        repeat = training if params.repeat is None else params.repeat
        files = self.data_files(data_dir, split)
        batch_size = params.batch_size
        if input_context is not None:
            files = pipeline.files_for_pipeline(files, input_context)
            batch_size = input_context.get_per_replica_batch_size(params.batch_size)
        spec = self.example_reading_spec()
        ds = pipeline.read_records(files, shuffle_files=shuffle, seed=params.seed,
                                   interleave=self.shuffle_examples)
        if repeat:
            ds = ds.repeat()
        if shuffle:
            ds = ds.shuffle(params.shuffle_buffer, seed=params.seed)
        ds = ds.map(lambda r: pipeline.parse_example(r, spec), num_parallel_calls=tf.data.AUTOTUNE,
                    deterministic=True)
        ds = ds.map(lambda ex: self.preprocess_example(ex, mode, params),
                    num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        batching = self.default_batching() if params.batching == "auto" else params.batching
        ds = pipeline.batch(ds, batching, batch_size, max_length=params.max_length,
                            length_fn=self.example_length, drop_remainder=params.drop_remainder)
        options = tf.data.Options()
        options.deterministic = True
        return ds.with_options(options).prefetch(tf.data.AUTOTUNE)

