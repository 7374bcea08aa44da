"""Registry, corpus reading, records, the datagen driver and the tf.data pipeline."""
from __future__ import annotations

import bz2
import glob
import gzip
import hashlib
import os
import random
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers import toy_problems  # noqa: F401  (registers toy_lines)

from textrain.framework import corpus, pipeline, records, registry, shards, tf_errors
from textrain.framework.errors import RecordError, SettingsMismatchError
from textrain.framework.problem import DataParams, ModeKeys
from textrain.trainers.strategy import make_strategy  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
EMMA = os.path.join(HERE, "data", "austen_emma.txt")


# ------------------------------------------------------------------------------------ registry
def test_snake_case_names():
    assert registry.snake_case("TranslateEnzhSub8k") == "translate_enzh_sub8k"
    assert registry.snake_case("BertPretrain") == "bert_pretrain"
    assert registry.snake_case("ToyLines") == "toy_lines"


def test_registry_duplicate_and_unknown():
    reg = registry.Registry("widget", "widgets")

    @reg.register
    class FooBar:
        pass

    assert reg.get("foo_bar") is FooBar

    class FooBar2:
        pass

    with pytest.raises(ValueError, match="already registered"):
        reg.register(FooBar2, name="foo_bar")
    with pytest.raises(KeyError, match=r"unknown widget 'nope'.*foo_bar.*import widgets"):
        reg.get("nope")


# ------------------------------------------------------------------------------------ corpus
def test_read_documents_plain_gz_bz2(tmp_path):
    text = "a b.\nc d.\n\n\ne f.\n"
    (tmp_path / "x.txt").write_text(text)
    with gzip.open(tmp_path / "y.txt.gz", "wt") as f:
        f.write(text)
    (tmp_path / "z.txt.bz2").write_bytes(bz2.compress(text.encode()))
    for name in ("x.txt", "y.txt.gz", "z.txt.bz2"):
        assert list(corpus.read_documents(str(tmp_path / name))) == [["a b.", "c d."], ["e f."]]
    # Documents never cross files; globs and commas expand sorted.
    docs = list(corpus.read_documents(f"{tmp_path}/x.txt,{tmp_path}/y*"))
    assert len(docs) == 4


def test_bad_utf8_names_file_and_line(tmp_path):
    p = tmp_path / "bad.txt"
    p.write_bytes(b"fine\nstill fine\nbad \xff\xfe here\n")
    with pytest.raises(corpus.CorpusError, match=r"bad\.txt:3: bytes that are not UTF-8"):
        list(corpus.iter_lines(str(p)))
    assert [l for _, l in corpus.iter_lines(str(p), "skip")] == ["fine", "still fine"]
    assert list(corpus.iter_lines(str(p), "replace"))[2][1] == "bad \ufffd\ufffd here"


def test_missing_and_empty_inputs(tmp_path):
    with pytest.raises(corpus.CorpusError, match="no file matches"):
        corpus.expand_paths(str(tmp_path / "nope*.txt"))
    with pytest.raises(corpus.CorpusError, match="no such file"):
        list(corpus.iter_lines(str(tmp_path / "nope.txt")))
    (tmp_path / "empty.txt").write_text("\n\n")
    assert list(corpus.read_documents(str(tmp_path / "empty.txt"))) == []


def test_corrupt_gzip_names_file(tmp_path):
    p = tmp_path / "c.txt.gz"
    p.write_bytes(gzip.compress(b"x\n" * 1000)[:-30])
    with pytest.raises(corpus.CorpusError, match=r"c\.txt\.gz: cannot read"):
        list(corpus.iter_lines(str(p)))


def test_ten_megabyte_line(tmp_path):
    p = tmp_path / "long.txt"
    p.write_text("word " * 2_000_000 + "\nshort\n")
    lines = list(corpus.iter_lines(str(p)))
    assert len(lines) == 2 and len(lines[0][1]) == 10_000_000


# ------------------------------------------------------------------------------------ records
def test_to_example_types_and_empty_feature():
    ex = records.to_example({"i": [1, 2], "f": np.array([0.5], np.float32), "s": "héllo", "n": 3})
    feats = ex.features.feature
    assert list(feats["i"].int64_list.value) == [1, 2]
    assert list(feats["f"].float_list.value) == [0.5]
    assert feats["s"].bytes_list.value[0].decode() == "héllo"
    assert list(feats["n"].int64_list.value) == [3]
    with pytest.raises(RecordError, match="'targets' is empty"):
        records.to_example({"targets": []})


def test_fast_serialization_equals_protobuf():
    """serialize_samples writes the tf.train.Example wire format exactly."""
    rng = np.random.default_rng(0)
    samples = []
    for i in range(50):
        n = int(rng.integers(1, 40))
        samples.append({
            "ids": rng.integers(-2**40, 2**62, n),  # negatives: 10-byte varints; large values
            "small": rng.integers(0, 300, n).tolist(),
            "scalar": int(rng.integers(0, 2)),
            "flag": bool(i % 2),
            "w": rng.normal(size=3).astype(np.float32),
            "f": float(rng.normal()),
            "text": "héllo wörld" * (i % 3 + 1),
            "raw": [b"\x00\xff", b"abc"],
        })
    serialized, feature_max = records.serialize_samples(samples)
    for s, got in zip(samples, serialized):
        # The same message; the map's order is ours (sorted names), independent of protobuf's version.
        assert tf.train.Example.FromString(got) == records.to_example(s)
        tf.io.parse_single_example(got, {"ids": tf.io.VarLenFeature(tf.int64)})
        for name in s:  # one feature: no order to differ, so the bytes are identical
            one = records.serialize_samples([{name: s[name]}])[0][0]
            assert one == records.to_example({name: s[name]}).SerializeToString(deterministic=True)
    assert feature_max["small"] == max(max(s["small"]) for s in samples)
    with pytest.raises(RecordError, match="'small' is empty"):
        records.serialize_samples([dict(samples[0], small=[])])


def _varint_test_values(rng: np.random.Generator) -> list[np.ndarray]:
    """int64 values of every varint length 1..10: both edges of each length, random ones inside, and
    negatives (always 10 bytes); one array per widest length, so each width the encoder picks is used."""
    by_length = [[0, 1, 127] + rng.integers(0, 128, 20).tolist()]
    for length in range(2, 10):
        lo, hi = 1 << (7 * (length - 1)), (1 << (7 * length)) - 1
        by_length.append([lo, lo + 1, hi - 1, hi] + rng.integers(lo, hi, 20, endpoint=True).tolist())
    by_length.append([2**63 - 1, 2**63 - 2, -1, -2, -128, -(2**63)]
                     + rng.integers(-(2**63), 0, 20).tolist() + rng.integers(2**62, 2**63 - 1, 10).tolist())
    arrays = []
    for length in range(1, 11):  # lengths 1..L mixed and shuffled, so neighbours differ in length
        a = np.array(sum(by_length[:length], []), np.int64)
        arrays.append(a[rng.permutation(a.size)])
    return arrays


def test_varints_equal_protobuf_for_every_length():
    """_varints writes exactly protobuf's varints (the packed payload of an Int64List), lengths 1..10."""
    rng = np.random.default_rng(12)
    for a in _varint_test_values(rng):
        blob, nbytes = records._varints(a)
        want = [tf.train.Int64List(value=[int(x)]).SerializeToString()[2:] for x in a]  # b"\x0a", length
        assert blob == b"".join(want)
        assert nbytes.tolist() == [len(w) for w in want]
        assert records._varints(a.astype(np.uint64))[0] == blob  # uint64 input: the same bits
    lengths = records._varints(np.array([0, 127, 128, 2**14 - 1, 2**14, 2**63 - 1, -1], np.int64))[1]
    assert lengths.tolist() == [1, 1, 2, 2, 3, 9, 10]
    for a in (np.arange(300) % 2 == 1, np.arange(250, dtype=np.uint8), np.arange(-3, 250, dtype=np.int32)):
        want = [tf.train.Int64List(value=[int(x)]).SerializeToString()[2:] for x in a]  # narrower: as int64
        assert records._varints(a)[0] == b"".join(want)
    assert records._varints(np.zeros(0, np.int64))[0] == b""


def test_serialize_batch_equals_protobuf_for_every_length():
    """serialize_batch rows of int columns with values of every varint length = tf.train.Example's bytes."""
    rng = np.random.default_rng(13)
    for a in _varint_test_values(rng):
        rows = a[: a.size // 4 * 4].reshape(-1, 4)
        mask = (rows > 0).astype(np.int64)
        serialized, feature_max = records.serialize_batch(records.SampleBatch({"ids": rows, "mask": mask}))
        for row, m, got in zip(rows, mask, serialized):
            assert tf.train.Example.FromString(got) == records.to_example({"ids": row, "mask": m})
            one = records.serialize_batch(records.SampleBatch({"ids": row[None]}))[0][0]
            assert one == records.to_example({"ids": row}).SerializeToString(deterministic=True)
        assert feature_max["ids"] == float(rows.max())


def test_bounded_shuffle_is_a_permutation(tmp_path):
    samples = [{"x": [i]} for i in range(500)]
    # A memory bound of ~1 KB forces spilling to bucket files.
    path = str(tmp_path / "s.tfrecord")
    shards.write_shard(path, samples, shuffle_rng=random.Random(1), settings_hash="h",
                       shuffle_memory_bytes=1000)
    got = [int(tf.train.Example.FromString(r.numpy()).features.feature["x"].int64_list.value[0])
           for r in tf.data.TFRecordDataset(path)]
    assert sorted(got) == list(range(500)) and got != list(range(500))
    assert os.listdir(tmp_path) == ["s.tfrecord", "s.tfrecord.stats.json"] or \
        sorted(os.listdir(tmp_path)) == ["s.tfrecord", "s.tfrecord.stats.json"]


def test_failed_shard_leaves_nothing(tmp_path):
    def samples():
        yield {"x": [1]}
        raise RuntimeError("boom")

    path = str(tmp_path / "s.tfrecord")
    with pytest.raises(RuntimeError):
        shards.write_shard(path, samples(), shuffle_rng=None, settings_hash="h")
    assert os.listdir(tmp_path) == []


def test_corrupt_record_names_file(tmp_path):
    path = str(tmp_path / "c.tfrecord")
    shards.write_shard(path, [{"x": [i] * 50} for i in range(20)], shuffle_rng=None, settings_hash="h")
    data = bytearray(open(path, "rb").read())
    data[300] ^= 0xFF
    open(path, "wb").write(bytes(data))
    with pytest.raises(RecordError, match=r"c\.tfrecord: corrupt TFRecord"):
        tf_errors.count_records(path)


# ------------------------------------------------------------------------------------ datagen
def _generate(data_dir, workers=1, seed=3, **hp):
    problem = toy_problems.ToyLines(toy_problems.ToyHParams(input_file=EMMA, **hp))
    return problem, problem.generate_data(str(data_dir), "", num_workers=workers, seed=seed)


def _shard_digests(data_dir):
    files = sorted(glob.glob(f"{data_dir}/toy_lines/*.tfrecord"))
    assert files
    return {os.path.basename(f): hashlib.sha256(open(f, "rb").read()).hexdigest() for f in files}


def test_datagen_manifest_and_skip(tmp_path):
    problem, manifests = _generate(tmp_path)
    m = manifests["train"]
    assert m["num_examples"] == sum(s["count"] for s in m["shards"]) > 1000
    assert len(m["shards"]) == 4 and m["settings"]["num_shards"] == 4 and m["seed"] == 3
    assert m["feature_max"]["targets"] <= 257
    assert m["settings"]["targets_vocab_fingerprint"] == toy_problems.ByteEncoder().fingerprint()
    mtimes = {f: os.path.getmtime(f) for f in glob.glob(f"{tmp_path}/toy_lines/*")}
    _generate(tmp_path)  # complete: nothing rewritten
    assert mtimes == {f: os.path.getmtime(f) for f in glob.glob(f"{tmp_path}/toy_lines/*")}
    assert not glob.glob(f"{tmp_path}/**/*.incomplete", recursive=True)


def test_datagen_refuses_other_settings(tmp_path):
    _generate(tmp_path)
    with pytest.raises(SettingsMismatchError, match=r"max_length: existing 64, now 32"):
        _generate(tmp_path, max_length=32)
    with pytest.raises(SettingsMismatchError, match=r"seed: existing 3, now 4"):
        _generate(tmp_path, seed=4)


def test_empty_corpus_is_an_error_and_writes_no_manifest(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    problem = toy_problems.ToyLines(toy_problems.ToyHParams(input_file=str(empty)))
    with pytest.raises(ValueError, match="no examples"):
        problem.generate_data(str(tmp_path / "d"), "")
    assert not glob.glob(f"{tmp_path}/d/**/*.manifest.json", recursive=True)


def test_one_vs_two_workers_byte_identical(tmp_path):
    _generate(tmp_path / "w1", workers=1)
    _generate(tmp_path / "w2", workers=2)
    assert _shard_digests(tmp_path / "w1") == _shard_digests(tmp_path / "w2")
    _generate(tmp_path / "other", seed=4)
    assert _shard_digests(tmp_path / "w1") != _shard_digests(tmp_path / "other")


def test_kill_9_then_rerun_equals_uninterrupted(tmp_path):
    """A datagen process SIGKILLed mid-run leaves no complete-looking split; re-running keeps the
    finished shards, redoes the rest, and ends byte-identical to an uninterrupted run."""
    _generate(tmp_path / "clean")
    code = ("import sys; sys.path[:0] = %r; from helpers import toy_problems; "
            "p = toy_problems.ToyLines(toy_problems.ToyHParams(input_file=%r)); "
            "p.generate_data(%r, '', seed=3)") % ([HERE, os.path.dirname(HERE)], EMMA, str(tmp_path / "killed"))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          env=dict(os.environ, TOY_DIE_AT_SHARD="2"))
    assert proc.returncode == -9
    out = tmp_path / "killed" / "toy_lines"
    assert not glob.glob(f"{out}/*.manifest.json")  # nothing claims to be complete
    finished = sorted(glob.glob(f"{out}/*.tfrecord"))
    assert [os.path.basename(f)[-23:] for f in finished] == ["00000-of-00004.tfrecord", "00001-of-00004.tfrecord"]
    mtimes = {f: os.path.getmtime(f) for f in finished}
    _generate(tmp_path / "killed")
    assert mtimes == {f: os.path.getmtime(f) for f in finished}  # kept, not redone
    assert _shard_digests(tmp_path / "clean") == _shard_digests(tmp_path / "killed")
    assert not glob.glob(f"{out}/*.incomplete")


def test_task_id_splits_work_and_last_task_writes_manifest(tmp_path):
    problem = toy_problems.ToyLines(toy_problems.ToyHParams(input_file=EMMA))
    got = problem.generate_data(str(tmp_path), "", task_id=0, num_tasks=2, seed=3)
    assert "train" not in got  # task 1's shards are missing
    got = problem.generate_data(str(tmp_path), "", task_id=1, num_tasks=2, seed=3)
    assert got["train"]["num_examples"] > 0
    _generate(tmp_path / "single")
    assert _shard_digests(tmp_path) == _shard_digests(tmp_path / "single")


# ------------------------------------------------------------------------------------ pipeline
def test_dataset_bucket_and_fixed(tmp_path):
    problem, _ = _generate(tmp_path)
    ds = problem.dataset(ModeKeys.TRAIN, str(tmp_path), DataParams(batch_size=8, max_length=64, seed=1))
    bounds = pipeline.bucket_boundaries(64 + 1)
    widths, bucket_pad, max_pad = set(), 0, 0
    for batch in ds.take(20):
        assert batch["targets"].dtype == tf.int32 and batch["targets"].shape[0] == 8
        assert batch["targets"].shape[1] <= 64
        lengths = np.count_nonzero(batch["targets"].numpy(), axis=1)  # ids are >= 1 (0 is padding)
        # Bucketing, not plain padding: every example of a batch lies in one length bucket ...
        assert len({int(np.searchsorted(bounds, n, side="right")) for n in lengths}) == 1, lengths
        widths.add(batch["targets"].shape[1])
        bucket_pad += batch["targets"].shape[1] * 8 - lengths.sum()
        max_pad += 64 * 8 - lengths.sum()
    # ... batches of different padded lengths, and far less padding than padding everything to max_length.
    assert len(widths) > 1 and bucket_pad < 0.5 * max_pad, (widths, bucket_pad, max_pad)
    fixed = problem.dataset(ModeKeys.EVAL, str(tmp_path),
                            DataParams(batch_size=4, max_length=64, batching="fixed"))
    shapes = {tuple(b["targets"].shape) for b in fixed}
    assert shapes == {(4, 64)}


def test_dataset_deterministic_under_seed(tmp_path):
    problem, _ = _generate(tmp_path)

    def first(seed):
        ds = problem.dataset(ModeKeys.TRAIN, str(tmp_path), DataParams(batch_size=4, max_length=64, seed=seed))
        return [b["draw"].numpy().tolist() for b in ds.take(3)]

    assert first(5) == first(5)
    assert first(5) != first(6)


def test_pack_rows():
    data = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [1], [2, 2, 2, 2, 2]]
    ds = tf.data.Dataset.from_generator(lambda: ({"targets": x} for x in data),
                                        output_signature={"targets": tf.TensorSpec([None], tf.int32)})
    rows = [{k: v.numpy().tolist() for k, v in r.items()} for r in pipeline.pack(ds, 6)]
    assert [r["targets"] for r in rows] == [[1, 2, 3, 4, 5, 0], [6, 7, 8, 9, 1, 0], [2, 2, 2, 2, 2, 0]]
    assert rows[0]["targets_segmentation"] == [1, 1, 1, 2, 2, 0]
    assert rows[1]["targets_position"] == [0, 1, 2, 3, 0, 0]


def test_mirrored_replicas_get_their_own_slices(tmp_path):
    """Each replica gets its own half of every global batch; together they see each example once."""
    import collections

    problem, manifests = _generate(tmp_path)
    params = DataParams(batch_size=8, max_length=80, batching="fixed")
    everything = collections.Counter(
        tuple(row) for b in problem.dataset(ModeKeys.EVAL, str(tmp_path), params, split="train")
        for row in b["targets"].numpy().tolist())
    strategy = make_strategy("mirrored", 2)  # one MirroredStrategy per process (trainers/core.py)
    dist = strategy.distribute_datasets_from_function(
        lambda ctx: problem.dataset(ModeKeys.EVAL, str(tmp_path), params, input_context=ctx, split="train"))
    seen = collections.Counter()
    steps = 0
    for batch in dist:
        halves = [t.numpy().tolist() for t in strategy.experimental_local_results(batch["targets"])]
        assert [len(h) for h in halves] == [4, 4]  # global 8 over 2 replicas
        assert halves[0] != halves[1]
        seen.update(tuple(row) for h in halves for row in h)
        steps += 1
    n = manifests["train"]["num_examples"]
    assert steps == n // 8
    assert not seen - everything  # nothing invented, nothing seen twice beyond the data's own repeats


def test_more_pipelines_than_files_is_an_error():
    ctx = tf.distribute.InputContext(num_input_pipelines=4, input_pipeline_id=0, num_replicas_in_sync=4)
    with pytest.raises(ValueError, match="2 data file"):
        pipeline.files_for_pipeline(["a", "b"], ctx)
    ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=2)
    assert pipeline.files_for_pipeline(["a", "b", "c"], ctx) == ["b"]
