"""translate_enzh_sub8k and the text problem base classes, on real parallel text."""
from __future__ import annotations

import gzip
import os
import subprocess
import sys

import pytest

import textrain.problems as problems  # noqa: F401
from textrain.framework import corpus, encoders, registry
from textrain.framework.problem import DataParams, ModeKeys
from textrain.problems.translate import TranslateEnzhSub8k

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def parallel_dir(tmp_path, corpora_dir):
    """The first 1500 real pairs of ../shared/corpora/parallel (gz on one side, plain on the other)."""
    src = os.path.join(corpora_dir, "parallel")
    with gzip.open(os.path.join(src, "train.en.gz"), "rt") as f:
        en = [next(f) for _ in range(1500)]
    with gzip.open(os.path.join(src, "train.zh.gz"), "rt") as f:
        zh = [next(f) for _ in range(1500)]
    with gzip.open(tmp_path / "train.en.gz", "wt") as f:
        f.writelines(en)
    (tmp_path / "train.zh").write_text("".join(zh))
    return str(tmp_path)


def test_registered_name():
    assert registry.problems.get("translate_enzh_sub8k") is TranslateEnzhSub8k


def test_misaligned_files_name_both_counts(tmp_path):
    (tmp_path / "a").write_text("x\ny\nz\n")
    (tmp_path / "b").write_text("x\ny\n")
    with pytest.raises(corpus.CorpusError, match=r"not line-aligned: 3 vs 2 lines"):
        list(corpus.parallel_lines(str(tmp_path / "a"), str(tmp_path / "b")))


def test_missing_parallel_file(tmp_path):
    p = TranslateEnzhSub8k()
    with pytest.raises(corpus.CorpusError, match=r"train\.en\[\.gz\|\.bz2\] not found"):
        list(p.generate_samples("", str(tmp_path), "train"))


def test_datagen_end_to_end(tmp_path, parallel_dir):
    data_dir = str(tmp_path / "data")
    proc = subprocess.run(
        [sys.executable, "-m", "textrain.framework.datagen", "--problem=translate_enzh_sub8k",
         f"--data_dir={data_dir}", f"--tmp_dir={parallel_dir}", "--num_workers=2"],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "train: " in proc.stdout and "dev: " in proc.stdout
    p = TranslateEnzhSub8k()
    train, dev = p.read_manifest(data_dir, "train"), p.read_manifest(data_dir, "dev")
    assert dev["num_examples"] == 15 and train["num_examples"] + dev["num_examples"] <= 1500
    enc = p.feature_encoders(data_dir)
    assert isinstance(enc["inputs"], encoders.SubwordTextEncoder)
    assert train["feature_max"]["targets"] < enc["targets"].vocab_size
    # Records decode back to the source text, with EOS appended.
    ds = p.dataset(ModeKeys.EVAL, data_dir, DataParams(batch_size=1, max_length=400, batching="fixed"),
                   split="dev")
    first = next(iter(ds))
    ids = [i for i in first["targets"][0].numpy().tolist() if i != 0]
    assert ids[-1] == encoders.EOS_ID
    pairs = [(s, t) for n, s, t in corpus.parallel_lines(f"{parallel_dir}/train.en.gz", f"{parallel_dir}/train.zh")
             if n % 100 == 0 and s and t]
    assert enc["targets"].decode(ids[:-1]) in {t for _, t in pairs}
    # Bucketed training batches stay within max_length.
    ds = p.dataset(ModeKeys.TRAIN, data_dir, DataParams(batch_size=16, max_length=64, seed=0))
    for batch in ds.take(3):
        assert batch["inputs"].shape[1] <= 64 and batch["targets"].shape[1] <= 64
    # Re-running skips the complete splits (vocabulary and shards reused).
    again = subprocess.run(
        [sys.executable, "-m", "textrain.framework.datagen", "--problem=translate_enzh_sub8k",
         f"--data_dir={data_dir}", f"--tmp_dir={parallel_dir}"], cwd=REPO, capture_output=True, text=True)
    assert again.returncode == 0 and "skipping" in again.stderr


def test_unknown_problem_is_a_usage_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "textrain.framework.datagen", "--problem=nope",
                           f"--data_dir={tmp_path}"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode != 0
    assert "unknown problem 'nope'" in proc.stderr and "translate_enzh_sub8k" in proc.stderr


def test_bad_utf8_input_names_file_and_line(tmp_path):
    (tmp_path / "train.en").write_bytes(b"hello\nworld \xff\n")
    (tmp_path / "train.zh").write_text("a\nb\n")
    proc = subprocess.run([sys.executable, "-m", "textrain.framework.datagen", "--problem=translate_enzh_sub8k",
                           f"--data_dir={tmp_path}/d", f"--tmp_dir={tmp_path}"],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode != 0
    assert "train.en:2: bytes that are not UTF-8" in proc.stderr
    assert not [f for _, _, fs in os.walk(tmp_path / "d") for f in fs if f.endswith(".manifest.json")]
