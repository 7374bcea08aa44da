"""TFRecord files: examples, atomic sharded writing, bounded-memory shuffle, manifests, checked reading.

File discipline (tensor2tensor's, made strict):
- A shard is written as `<name>.incomplete` and renamed when whole; its statistics go to a
  `<name>.stats.json` sidecar that is renamed into place *before* the shard, so an existing shard always
  has its statistics and a half-written shard never has the final name.
- A split's manifest is written last (also via rename). A split is complete only when its manifest
  exists; the reader and the trainer read settings from it instead of from file names.
- Shuffling a shard is exact (a uniform permutation) and bounded in memory: records are buffered up to
  `shuffle_memory_bytes`; past that they are spilled to random bucket files, each bucket is shuffled in
  memory, and the buckets are concatenated.
"""
from __future__ import annotations

import json
import os
import random
import time
from typing import Any, Iterable, Iterator, Mapping

import numpy as np
import tensorflow as tf

MANIFEST_VERSION = 1


class RecordError(ValueError):
    """A record that cannot be written or read; the message names the feature or the file."""


# ----------------------------------------------------------------------------------------------- #
# dict -> tf.train.Example
# ----------------------------------------------------------------------------------------------- #
def _as_list(value: Any) -> list:
    if isinstance(value, np.ndarray):
        return value.reshape(-1).tolist()
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def to_feature(name: str, value: Any) -> tf.train.Feature:
    values = _as_list(value)
    if not values:
        raise RecordError(f"feature {name!r} is empty; every feature needs at least one value")
    first = values[0]
    if isinstance(first, (bool, np.bool_, int, np.integer)):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in values]))
    if isinstance(first, (float, np.floating)):
        return tf.train.Feature(float_list=tf.train.FloatList(value=[float(v) for v in values]))
    if isinstance(first, (str, bytes)):
        return tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[v.encode("utf-8") if isinstance(v, str) else v for v in values]))
    raise RecordError(f"feature {name!r} has values of unsupported type {type(first).__name__}")


def to_example(sample: Mapping[str, Any]) -> tf.train.Example:
    """A sample dict (name -> int/float/str/bytes or a list/array of them) as a tf.train.Example."""
    return tf.train.Example(features=tf.train.Features(
        feature={name: to_feature(name, value) for name, value in sample.items()}))


# ----------------------------------------------------------------------------------------------- #
# atomic file helpers
# ----------------------------------------------------------------------------------------------- #
def write_text_atomic(path: str, text: str) -> None:
    tmp = path + ".incomplete"
    with tf.io.gfile.GFile(tmp, "w") as f:
        f.write(text)
    tf.io.gfile.rename(tmp, path, overwrite=True)


def write_json_atomic(path: str, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=1, sort_keys=True) + "\n")


def read_json(path: str) -> Any:
    with tf.io.gfile.GFile(path) as f:
        return json.load(f)


def remove_if_exists(path: str) -> None:
    if tf.io.gfile.exists(path):
        tf.io.gfile.remove(path)


# ----------------------------------------------------------------------------------------------- #
# sharded writing
# ----------------------------------------------------------------------------------------------- #
def shard_filename(problem: str, split: str, shard_id: int, num_shards: int) -> str:
    return f"{problem}-{split}-{shard_id:05d}-of-{num_shards:05d}.tfrecord"


def manifest_filename(problem: str, split: str) -> str:
    return f"{problem}-{split}.manifest.json"


def stats_path(shard_path: str) -> str:
    return shard_path + ".stats.json"


class _Stats:
    """Counts and the largest value of every int feature (the trainer checks ids < vocab size)."""

    def __init__(self):
        self.count = 0
        self.feature_max: dict[str, float] = {}

    def add(self, example: tf.train.Example) -> None:
        self.count += 1
        for name, feat in example.features.feature.items():
            vals = feat.int64_list.value or feat.float_list.value
            if vals:
                m = max(vals)
                if name not in self.feature_max or m > self.feature_max[name]:
                    self.feature_max[name] = m

    def as_dict(self) -> dict:
        return {"count": self.count, "feature_max": self.feature_max}


class _BoundedShuffler:
    """Exact shuffle of serialized records with bounded memory (spill to random buckets)."""

    def __init__(self, rng: random.Random, tmp_prefix: str, memory_bytes: int, num_buckets: int = 64):
        self.rng, self.tmp_prefix = rng, tmp_prefix
        self.memory_bytes, self.num_buckets = memory_bytes, num_buckets
        self.buffer: list[bytes] = []
        self.buffered = 0
        self.buckets: list[tf.io.TFRecordWriter] | None = None

    def add(self, record: bytes) -> None:
        self.buffer.append(record)
        self.buffered += len(record)
        if self.buffered > self.memory_bytes:
            self._spill()

    def _bucket_path(self, i: int) -> str:
        return f"{self.tmp_prefix}.bucket{i:03d}.incomplete"

    def _spill(self) -> None:
        if self.buckets is None:
            self.buckets = [tf.io.TFRecordWriter(self._bucket_path(i)) for i in range(self.num_buckets)]
        for rec in self.buffer:
            self.buckets[self.rng.randrange(self.num_buckets)].write(rec)
        self.buffer, self.buffered = [], 0

    def records(self) -> Iterator[bytes]:
        if self.buckets is None:
            self.rng.shuffle(self.buffer)
            yield from self.buffer
            return
        self._spill()
        for w in self.buckets:
            w.close()
        for i in range(self.num_buckets):
            path = self._bucket_path(i)
            bucket = [r.numpy() for r in tf.data.TFRecordDataset(path)]
            self.rng.shuffle(bucket)
            yield from bucket
            tf.io.gfile.remove(path)

    def cleanup(self) -> None:
        for i in range(self.num_buckets):
            remove_if_exists(self._bucket_path(i))


def write_shard(path: str, samples: Iterable[Mapping[str, Any]], *, shuffle_rng: random.Random | None,
                settings_hash: str, shuffle_memory_bytes: int = 256 << 20) -> dict:
    """Write one shard atomically; returns its statistics (also stored beside it)."""
    tmp = path + ".incomplete"
    stats = _Stats()
    shuffler = (_BoundedShuffler(shuffle_rng, path, shuffle_memory_bytes)
                if shuffle_rng is not None else None)
    try:
        with tf.io.TFRecordWriter(tmp) as writer:
            for sample in samples:
                example = to_example(sample)
                stats.add(example)
                record = example.SerializeToString(deterministic=True)  # map order fixed
                if shuffler is None:
                    writer.write(record)
                else:
                    shuffler.add(record)
            if shuffler is not None:
                for record in shuffler.records():
                    writer.write(record)
    except BaseException:
        remove_if_exists(tmp)
        if shuffler is not None:
            shuffler.cleanup()
        raise
    result = dict(stats.as_dict(), file=os.path.basename(path), settings_hash=settings_hash)
    write_json_atomic(stats_path(path), result)
    tf.io.gfile.rename(tmp, path, overwrite=True)
    return result


def completed_shard_stats(path: str, settings_hash: str) -> dict | None:
    """The stats of a finished shard made with the same settings, else None (redo it)."""
    if not (tf.io.gfile.exists(path) and tf.io.gfile.exists(stats_path(path))):
        return None
    stats = read_json(stats_path(path))
    return stats if stats.get("settings_hash") == settings_hash else None


def merge_stats(shard_stats: list[dict]) -> dict:
    feature_max: dict[str, float] = {}
    for s in shard_stats:
        for k, v in s["feature_max"].items():
            feature_max[k] = max(v, feature_max.get(k, v))
    return {"num_examples": sum(s["count"] for s in shard_stats),
            "shards": [{"file": s["file"], "count": s["count"]} for s in shard_stats],
            "feature_max": feature_max}


def make_manifest(problem: str, split: str, seed: int, settings: dict, settings_hash: str,
                  shard_stats: list[dict]) -> dict:
    return dict(merge_stats(shard_stats), version=MANIFEST_VERSION, problem=problem, split=split,
                seed=seed, settings=settings, settings_hash=settings_hash,
                created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))


# ----------------------------------------------------------------------------------------------- #
# reading
# ----------------------------------------------------------------------------------------------- #
def count_records(path: str) -> int:
    """Number of records in one file; DataLossError is re-raised naming the file."""
    try:
        return int(tf.data.TFRecordDataset(path).reduce(np.int64(0), lambda n, _: n + 1))
    except tf.errors.DataLossError as e:
        raise RecordError(f"{path}: corrupt TFRecord ({e.message.strip()}); delete it and re-run "
                          f"datagen, which redoes incomplete splits") from None


def find_corrupt_file(paths: Iterable[str]) -> str | None:
    for p in paths:
        try:
            count_records(p)
        except RecordError:
            return p
    return None


def explain_data_loss(error: Exception, paths: Iterable[str]) -> RecordError:
    """Turn tf.data's file-less 'corrupted record' error into one that names the file."""
    bad = find_corrupt_file(paths)
    where = bad if bad else "one of the input files"
    return RecordError(f"{where}: corrupt TFRecord ({getattr(error, 'message', error)}); delete it "
                       f"(and its split's manifest) and re-run datagen")
