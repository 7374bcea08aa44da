"""framework/fileio.py: local files without TensorFlow, the same results as tf.io.gfile / tf.io.TFRecordWriter;
and datagen runs on local files without importing TensorFlow at all."""
from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest
import tensorflow as tf

from textrain.framework import fileio

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMMA = os.path.join(REPO, "tests", "data", "austen_emma.txt")


def _records(rng: random.Random) -> list[bytes]:
    sizes = [0, 1, 127, 128, 255, 256, 65535, 65536, 300_000] + [rng.randrange(2000) for _ in range(50)]
    return [bytes(rng.getrandbits(8) for _ in range(n)) if n < 5000 else os.urandom(n) for n in sizes]


def test_local_framing_is_byte_identical_to_tensorflows(tmp_path):
    assert fileio._FAST_CRC, "google-crc32c's C code is not in use: datagen would import TensorFlow"
    records = _records(random.Random(1))
    ours, theirs = str(tmp_path / "ours.tfrecord"), str(tmp_path / "tf.tfrecord")
    with fileio.TFRecordWriter(ours) as w:
        w.write(records[0])
        w.write_many(records[1:])
    with tf.io.TFRecordWriter(theirs) as w:
        for r in records:
            w.write(r)
    assert open(ours, "rb").read() == open(theirs, "rb").read()
    assert [r.numpy() for r in tf.data.TFRecordDataset(ours)] == records


def test_reader_reads_tensorflows_records_and_names_a_corrupt_byte(tmp_path):
    records = _records(random.Random(2))
    path = str(tmp_path / "tf.tfrecord")
    with tf.io.TFRecordWriter(path) as w:
        for r in records:
            w.write(r)
    assert list(fileio.iter_tfrecords(path)) == records
    data = bytearray(open(path, "rb").read())
    second = 16 + len(records[0])  # the second record starts here
    data[second + 12] ^= 0x40  # a bit of its data
    open(path, "wb").write(bytes(data))
    with pytest.raises(ValueError, match=rf"tf\.tfrecord: corrupted record at byte {second}"):
        list(fileio.iter_tfrecords(path))
    open(path, "wb").write(bytes(data[:second + 5]))  # truncated inside a header
    with pytest.raises(ValueError, match="corrupted record"):
        list(fileio.iter_tfrecords(path))


def test_file_calls_behave_as_gfile(tmp_path):
    d = str(tmp_path / "a" / "b")
    fileio.makedirs(d)
    fileio.makedirs(d)  # exists: no error, as gfile
    for name in ("x.txt", ".hidden.txt", "y.json"):
        open(os.path.join(d, name), "w").close()
    pattern = os.path.join(d, "*.txt")
    assert sorted(fileio.glob(pattern)) == sorted(tf.io.gfile.glob(pattern))
    assert len(fileio.glob(pattern)) == 2  # hidden files match, as gfile's glob
    text = "caf\u00e9\r\nline two\rend\n"
    path = os.path.join(d, "t.txt")
    with fileio.open_file(path, "w") as f:
        f.write(text)
    with tf.io.gfile.GFile(path, "rb") as f:
        assert f.read() == text.encode("utf-8")  # UTF-8, no newline translation
    with fileio.open_file(path) as f, tf.io.gfile.GFile(path) as g:
        assert f.read() == g.read() == text
    assert fileio.stat(path).length == tf.io.gfile.stat(path).length
    other = os.path.join(d, "y.json")
    with pytest.raises(FileExistsError):
        fileio.rename(path, other)
    fileio.rename(path, other, overwrite=True)
    assert not fileio.exists(path) and fileio.exists(other)
    with pytest.raises(fileio.not_found_errors()):
        fileio.remove(path)
    with pytest.raises(FileNotFoundError):
        fileio.stat(path)
    assert fileio.isdir(d) and not fileio.isdir(other)


@pytest.mark.parametrize("problem,flags", [
    ("bert_pretrain", ["--vocab_size=600", "--max_seq_length=64", "--dupe_factor=1"]),
    ("electra_pretrain", ["--vocab_size=600", "--max_seq_length=64"]),
    ("xlnet_pretrain", ["--vocab_size=500", "--seq_len=64", "--reuse_len=32", "--num_predict=10",
                        "--bsz_per_host=16"]),
])
def test_datagen_on_local_files_never_imports_tensorflow(problem, flags, tmp_path):
    """The CLI as a user runs it (2 workers), with Python's import log: no TensorFlow module is imported, in
    the main process or the fork server; the shards read back with tf.data."""
    corpus = tmp_path / "emma.txt"
    corpus.write_bytes(open(EMMA, "rb").read()[:200_000])
    data_dir = tmp_path / "data"
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "textrain.framework.datagen", f"--problem={problem}",
                           f"--data_dir={data_dir}", f"--input_file={corpus}", "--num_workers=2", *flags],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    assert "textrain.framework.records" in imported  # the log is there
    assert not [m for m in imported if m.split(".")[0] == "tensorflow"]
    shards = tf.io.gfile.glob(str(data_dir / problem / f"{problem}-train-*.tfrecord"))
    assert shards and sum(1 for s in shards for _ in tf.data.TFRecordDataset(s)) > 0
