"""Faults and bad input as a user meets them, through the CLIs as real processes on real files: each test
asserts the one `textrain-<cli>: error:` line, the exit status and what is left on disk.

Every fault case the project promises to handle, so a new probe starts from this list (test -> case):

Records and datagen
  - a complete shard deleted / corrupted: re-run (--verify) regenerates it byte-identical  test_damaged_shards_*
  - truncated shards named before training; a corrupt record while training: file + offset  test_truncated_*, test_corrupt_record_*
  - a corrupt gzip input: one line                                              test_corrupt_gzip_input_is_one_line
  - a corpus of one long word / a 1 MB word in vocab learning                   test_a_corpus_of_one_long_word_*, test_a_one_megabyte_word_*
  - a CSV row with more fields than its header: the line named, or skipped under --skip_bad_records
                                                                                test_a_csv_row_with_extra_fields_*
  - a folder that is not a corpus: what a datasets dir / a folder of corpus files needs
                                                                                test_a_folder_that_is_not_a_corpus_*
  - a failed datagen leaves no --data_dir it made                               test_a_failed_datagen_leaves_no_data_dir_*
  - kill -9 during the corpus shuffle, then a re-run: the clean run's shards    test_kill_9_during_the_shuffle_*
One writer per directory
  - a second datagen / trainer on the same directory; a dead writer's stale lock  test_second_*, test_stale_lock_*
Settings
  - a flag out of range, BERT / problem settings, declared ranges               test_a_trainer_flag_*, test_*_settings_*
Disk
  - full disk, read-only data_dir                                               test_disk_full_*, test_read_only_*
Checkpoints and training
  - a checkpoint that does not fit (variables named); non-finite gradients; Ctrl-C saves, exits 130
  - resuming with another --train_batch_size: refused naming both sizes         test_resume_with_another_batch_size_*
  - a fine-tune failing before its first checkpoint leaves no model_dir         test_a_finetune_failing_before_*
  - `run/best` (with or without its `checkpoint` file) is a checkpoint directory  test_from_textrain_takes_a_best_directory
Hugging Face directories
  - a truncated / non-safetensors model.safetensors: the file named             test_damaged_safetensors_*
  - config.json with a missing or mistyped size field: file, field, expected    test_config_json_with_a_bad_field_*
  - kill -9 during textrain-convert: the dead writer's temp directory removed   test_convert_removes_temp_dirs_of_dead_writers
  - an HF directory of another family (ELECTRA into --model=bert): says which, short  test_hf_directory_of_another_family_*

The data: a tiny `--usr_dir` problem made by textrain-datagen from a text file; the model: a tiny dense
model (its depth/width from env vars, a test hook, so checkpoints of other shapes can be made).
"""
from __future__ import annotations

import glob
import gzip
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest
from helpers import cli_env

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
EMMA = os.path.join(HERE, "data", "austen_emma.txt")

FAULT_ENV = ("FAULT_HOLD_UNTIL", "FAULT_INF_GRAD", "FAULT_LAYERS", "FAULT_WIDTH")  # test hooks

USR_INIT = '''
import dataclasses, os, time
import tensorflow as tf
from textrain.framework import corpus
from textrain.framework.problem import Problem
from textrain.framework.registry import register_model, register_problem
from textrain.framework.settings import help_text
from textrain.models.base import StepOutput, Term, TrainableModel


@dataclasses.dataclass
class FaultToyHParams:
    input_file: str = ""
    fault_width: int = dataclasses.field(default=4, metadata=help_text("features per example", low=1))


@register_problem
class FaultToy(Problem):
    HParams = FaultToyHParams

    def dataset_splits(self):
        return [("train", 3), ("dev", 1)]

    def generate_samples(self, data_dir, tmp_dir, split):
        w = self.hparams.fault_width
        for doc in corpus.read_documents(self.hparams.input_file):
            for i, line in enumerate(doc):
                if (split == "dev") == (i % 10 == 9):
                    h = [b / 255.0 for b in line.encode("utf-8")[:w].ljust(w, b" ")]
                    yield {"x": h, "y": len(line) % 2}

    def generate_shard(self, data_dir, tmp_dir, split, shard_id, num_shards, seed):
        hold = os.environ.get("FAULT_HOLD_UNTIL")  # test hook: a writer that waits until this file exists
        deadline = time.time() + 120
        while hold and not os.path.exists(hold) and time.time() < deadline:
            time.sleep(0.05)
        yield from super().generate_shard(data_dir, tmp_dir, split, shard_id, num_shards, seed)

    def example_reading_spec(self):
        w = self.hparams.fault_width
        return {"x": tf.io.FixedLenFeature([w], tf.float32), "y": tf.io.FixedLenFeature([], tf.int64)}


@register_model
class FaultToyModel(TrainableModel):
    def __init__(self, layers, width):
        super().__init__()
        self.hidden = [tf.keras.layers.Dense(width, activation="tanh") for _ in range(layers)]
        for i, layer in enumerate(self.hidden):
            setattr(self, f"hidden_{i}", layer)
        self.out = tf.keras.layers.Dense(2, kernel_initializer="zeros")

    def step_output(self, f, state, training):
        h = f["x"]
        for i in range(len(self.hidden)):
            h = getattr(self, f"hidden_{i}")(h)
        ce = tf.nn.sparse_softmax_cross_entropy_with_logits(f["y"], self.out(h))
        total = tf.reduce_sum(ce)
        if os.environ.get("FAULT_INF_GRAD"):  # test hook: a finite loss whose gradient is infinite
            total += tf.sqrt(tf.reduce_sum(self.out.kernel))
        return StepOutput({"ce": Term(total, tf.cast(tf.size(ce), tf.float32))}, {}, state)

    @classmethod
    def from_settings(cls, *, manifest=None, **settings):
        return cls(int(os.environ.get("FAULT_LAYERS", "1")), int(os.environ.get("FAULT_WIDTH", "8")))
'''


def _run(args, timeout=240, **kw):
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, **kw)


def _error_line(proc, prog: str) -> str:
    """The one `prog: error:` line; asserts there is exactly one and no traceback."""
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith(f"{prog}: error:")]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return lines[0]


@pytest.fixture(scope="module")
def usr(tmp_path_factory):
    root = tmp_path_factory.mktemp("fault_usr")
    pkg = root / "fault_toy_usr"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(USR_INIT)
    corpus = root / "corpus.txt"
    with open(EMMA, encoding="utf-8") as f:
        corpus.write_text("".join(f.readlines()[:400]))
    return str(pkg), str(corpus)


def _datagen_args(usr, data_dir, *extra):
    pkg, corpus = usr
    return ["textrain.framework.datagen", f"--usr_dir={pkg}", "--problem=fault_toy", f"--data_dir={data_dir}",
            f"--input_file={corpus}", *extra]


def _datagen(usr, data_dir, *extra, env=None, **kw):
    return _run(_datagen_args(usr, data_dir, *extra), env=env or cli_env(drop=FAULT_ENV), **kw)


@pytest.fixture(scope="module")
def clean_data(usr, tmp_path_factory):
    """An untouched datagen run; tests copy it before damaging anything."""
    data = tmp_path_factory.mktemp("clean") / "data"
    proc = _datagen(usr, data)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return str(data)


def _copy(clean_data, tmp_path) -> str:
    dst = str(tmp_path / "data")
    shutil.copytree(clean_data, dst)
    return dst


def _problem_dir(data: str) -> str:
    return os.path.join(data, "fault_toy")


def _shard(data: str, i: int = 1) -> str:
    return os.path.join(_problem_dir(data), f"fault_toy-train-{i:05d}-of-00003.tfrecord")


def _digests(data: str) -> dict[str, str]:
    out = {}
    for path in sorted(glob.glob(os.path.join(_problem_dir(data), "*"))):
        if path.endswith(".lock"):
            continue
        with open(path, "rb") as f:
            content = f.read()
        if path.endswith(".manifest.json"):
            manifest = json.loads(content)
            manifest.pop("created")
            content = json.dumps(manifest, sort_keys=True).encode()
        out[os.path.basename(path)] = hashlib.sha256(content).hexdigest()
    return out


def _train_args(usr, data, model_dir, *extra):
    pkg, _ = usr
    return ["textrain.trainers.train_gpu", f"--usr_dir={pkg}", "--problem=fault_toy", f"--data_dir={data}",
            "--model=fault_toy_model", f"--model_dir={model_dir}", "--train_batch_size=8",
            "--num_train_steps=4", "--num_warmup_steps=0", "--learning_rate=0.01", "--iterations_per_loop=2",
            "--save_checkpoints_steps=2", *extra]


# ============================================================================== records and datagen
def test_manifest_records_shard_sizes(clean_data):
    manifest = json.load(open(os.path.join(_problem_dir(clean_data), "fault_toy-train.manifest.json")))
    for shard in manifest["shards"]:
        assert shard["size"] == os.path.getsize(os.path.join(_problem_dir(clean_data), shard["file"]))
    assert not glob.glob(os.path.join(_problem_dir(clean_data), "*.incomplete"))
    assert not glob.glob(os.path.join(_problem_dir(clean_data), "*.lock"))  # released at the end


def test_damaged_shards_are_regenerated_byte_identical(usr, clean_data, tmp_path):
    """A complete shard deleted, another corrupted in the middle (same size): a plain re-run repairs the
    first (a stat sees it) and says so; --verify (every record read) repairs the second; only those shards
    are made again, and the result equals the untouched run byte for byte."""
    data = _copy(clean_data, tmp_path)
    os.remove(_shard(data, 1))
    path = _shard(data, 2)
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        f.write(b"\xff\xfe\xfd\xfc")
    untouched = os.path.getmtime(_shard(data, 0))
    plain = _datagen(usr, data)
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert "fault_toy-train-00001-of-00003.tfrecord is missing" in plain.stderr and "regenerating" in plain.stderr
    assert "00002-of-00003.tfrecord" not in plain.stderr  # the stat check cannot see a same-size corruption
    proc = _datagen(usr, data, "--verify")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "(fault_toy-train-00002-of-00003.tfrecord: corrupted record at" in proc.stderr, proc.stderr[-2000:]
    assert _digests(data) == _digests(clean_data)
    assert os.path.getmtime(_shard(data, 0)) == untouched  # only the damaged shards were made again


def _truncate(path: str, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


def _record_boundary(path: str) -> int:
    """Byte offset after the first record of a TFRecord file."""
    with open(path, "rb") as f:
        length = int.from_bytes(f.read(8), "little")
    return 8 + 4 + length + 4


def test_truncated_shards_are_named_before_training(usr, clean_data, tmp_path):
    """One shard cut in the middle of a record, another at a record boundary (which reads cleanly and
    would train silently on fewer records): both named from the manifest's sizes before training."""
    data = _copy(clean_data, tmp_path)
    mid, boundary = _shard(data, 0), _shard(data, 2)
    _truncate(mid, _record_boundary(mid) + 5)
    _truncate(boundary, _record_boundary(boundary))
    proc = _run(_train_args(usr, data, str(tmp_path / "run")), env=cli_env(drop=FAULT_ENV))
    assert proc.returncode == 1
    line = _error_line(proc, "textrain-train-gpu")
    for path in (mid, boundary):
        assert f"{os.path.basename(path)} has {os.path.getsize(path)} bytes, the manifest says" in line, line
    assert "textrain-datagen" in line  # what to do
    assert not os.path.exists(tmp_path / "run" / "checkpoint")


def test_corrupt_record_while_training_names_file_and_offset(usr, clean_data, tmp_path):
    data = _copy(clean_data, tmp_path)
    path = _shard(data, 1)
    offset = os.path.getsize(path) // 2
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(b"\x00\x01\x02\x03")
    proc = _run(_train_args(usr, data, str(tmp_path / "run")), env=cli_env(drop=FAULT_ENV))
    assert proc.returncode == 1
    line = _error_line(proc, "textrain-train-gpu")
    assert path in line and "byte offset" in line and "--verify" in line, line


def test_corrupt_gzip_input_is_one_line(usr, tmp_path):
    text = open(EMMA, encoding="utf-8").read()[:20000].encode()
    blob = bytearray(gzip.compress(text))
    blob[len(blob) // 2: len(blob) // 2 + 8] = b"\x00" * 8  # damage the deflate stream, keep the trailer
    bad = tmp_path / "corpus.txt.gz"
    bad.write_bytes(bytes(blob))
    proc = _run(["textrain.framework.datagen", f"--usr_dir={usr[0]}", "--problem=fault_toy",
                 f"--data_dir={tmp_path / 'data'}", f"--input_file={bad}"], env=cli_env(drop=FAULT_ENV))
    assert proc.returncode == 1
    line = _error_line(proc, "textrain-datagen")
    assert str(bad) in line and "corrupt or truncated" in line
    assert not glob.glob(str(tmp_path / "data" / "fault_toy" / "*.manifest.json"))
    assert not glob.glob(str(tmp_path / "data" / "fault_toy" / "*.incomplete"))


# ============================================================================== one writer per directory
def test_second_concurrent_datagen_stops_at_once(usr, clean_data, tmp_path):
    data = str(tmp_path / "data")
    first = subprocess.Popen([sys.executable, "-m", *_datagen_args(usr, data)], cwd=REPO,
                             env=cli_env(drop=FAULT_ENV, FAULT_HOLD_UNTIL=str(tmp_path / "go")), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    lock = os.path.join(_problem_dir(data), ".datagen.lock")
    deadline = time.time() + 60
    while not os.path.exists(lock) and time.time() < deadline and first.poll() is None:
        time.sleep(0.1)
    assert os.path.exists(lock)
    second = _datagen(usr, data, "--seed=2")
    assert first.poll() is None  # still writing
    assert second.returncode == 1
    line = _error_line(second, "textrain-datagen")
    assert lock in line and f"pid {first.pid}" in line and socket.gethostname() in line
    (tmp_path / "go").write_text("")
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err[-3000:]
    assert _digests(data) == _digests(clean_data)  # the first run's data, untouched by the second


def test_stale_lock_of_a_dead_process_is_taken_over(usr, tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    problem_dir = tmp_path / "data" / "fault_toy"
    problem_dir.mkdir(parents=True)
    (problem_dir / ".datagen.lock").write_text(json.dumps(
        {"host": socket.gethostname(), "pid": dead.pid, "program": "textrain-datagen", "started": time.time()}))
    (problem_dir / f"fault_toy-train-00000-of-00003.tfrecord.{socket.gethostname().replace('-', '_')}-"
                   f"{dead.pid}.incomplete").write_bytes(b"half a shard")
    proc = _datagen(usr, str(tmp_path / "data"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "stale lock" in proc.stderr
    assert not glob.glob(str(problem_dir / "*.incomplete")) and not (problem_dir / ".datagen.lock").exists()


def test_second_trainer_on_one_model_dir_is_refused(usr, clean_data, tmp_path):
    holder = subprocess.Popen(["sleep", "60"])
    try:
        run = tmp_path / "run"
        run.mkdir()
        (run / ".trainer.lock").write_text(json.dumps(
            {"host": socket.gethostname(), "pid": holder.pid, "program": "textrain-train-gpu",
             "started": time.time()}))
        proc = _run(_train_args(usr, clean_data, str(run)), env=cli_env(drop=FAULT_ENV))
        assert proc.returncode == 1
        line = _error_line(proc, "textrain-train-gpu")
        assert str(run / ".trainer.lock") in line and f"pid {holder.pid}" in line
        assert not glob.glob(str(run / "ckpt-*"))
    finally:
        holder.kill()
        holder.wait()


def test_a_trainer_flag_out_of_range_is_one_line(usr, clean_data, tmp_path):
    proc = _run(_train_args(usr, clean_data, str(tmp_path / "run"), "--num_train_steps=0"), env=cli_env(drop=FAULT_ENV))
    assert proc.returncode == 1
    assert "--num_train_steps must be > 0 (got 0)" in _error_line(proc, "textrain-train-gpu")


# ============================================================================== settings
@pytest.mark.parametrize("flags, named", [
    (["--max_seq_length=16"], ["--max_predictions_per_seq=20 exceeds the --max_seq_length - 3 = 13"]),
    (["--dupe_factor=-1", "--masked_lm_prob=2"], ["--dupe_factor must be >= 1; got -1",
                                                  "--masked_lm_prob must be in (0.0, 1.0]; got 2.0"]),
])
def test_bert_settings_are_validated_before_any_work(tmp_path, flags, named):
    corpus = tmp_path / "c.txt"
    corpus.write_text("one line.\nanother line.\n")
    proc = _run(["textrain.framework.datagen", "--problem=bert_pretrain", f"--data_dir={tmp_path / 'data'}",
                 f"--input_file={corpus}", *flags], env=cli_env(drop=FAULT_ENV))
    assert proc.returncode == 1
    line = _error_line(proc, "textrain-datagen")
    assert all(n in line for n in named), line
    assert not (tmp_path / "data" / "bert_pretrain").exists()  # nothing was done
    if len(flags) == 1:
        return
    # --verbose shows the traceback instead.
    verbose = _run(["textrain.framework.datagen", "--problem=bert_pretrain", f"--data_dir={tmp_path / 'data'}",
                    f"--input_file={corpus}", "--verbose", *flags], env=cli_env(drop=FAULT_ENV))
    assert verbose.returncode != 0 and "Traceback" in verbose.stderr and "SettingsError" in verbose.stderr


def test_a_problems_own_settings_check_is_one_line(tmp_path):
    """A combination the problem itself refuses (xlnet_pretrain's validate_hparams raises ValueError) stops the
    CLI with one line naming the flags, before anything is written."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("one line.\nanother line.\n")
    proc = _run(["textrain.framework.datagen", "--problem=xlnet_pretrain", f"--data_dir={tmp_path / 'data'}",
                 f"--input_file={corpus}", "--bsz_per_host=6", "--num_core_per_host=2"], env=cli_env(drop=FAULT_ENV))
    assert proc.returncode == 1
    assert "--bsz_per_host=6 must be a multiple of 2 * --num_core_per_host=2" in _error_line(proc, "textrain-datagen")
    assert "Traceback" not in proc.stderr and not (tmp_path / "data").exists()


def test_declared_ranges_of_every_problem_are_checked_in_one_place():
    """In-process: the declarations on each problem's HParams, through framework.flags.validate_settings
    (which Problem.__init__ calls, so every CLI gets it)."""
    import dataclasses

    from textrain.framework.errors import SettingsError
    from textrain.framework.settings import help_text, validate_settings
    from textrain.problems.electra_pretrain import ElectraPretrainHParams
    from textrain.problems.translate import TranslateHParams
    from textrain.problems.xlnet_pretrain import XlnetPretrain, XlnetPretrainHParams

    cases = [(ElectraPretrainHParams(max_seq_length=2), "--max_seq_length must be >= 5; got 2"),
             (ElectraPretrainHParams(dev_fraction=1.0), "--dev_fraction must be in [0.0, 1.0); got 1.0"),
             (ElectraPretrainHParams(on_bad_utf8="ignore"), "--on_bad_utf8 must be one of error, replace, skip"),
             (XlnetPretrainHParams(num_predict=0), "--num_predict must be >= 1; got 0"),
             (XlnetPretrainHParams(mask_beta=0), "--mask_beta must be >= 1; got 0"),
             (TranslateHParams(dev_every=0), "--dev_every must be >= 2; got 0")]
    for hp, message in cases:
        with pytest.raises(SettingsError) as e:
            validate_settings(hp)
        assert message in str(e.value)
    with pytest.raises(ValueError, match="--num_predict must be >= 1"):  # also a ValueError, as before
        XlnetPretrain(XlnetPretrainHParams(num_predict=0))

    @dataclasses.dataclass
    class Mine:  # a user's problem declares its own ranges the same way
        rate: float = dataclasses.field(default=0.5, metadata=help_text("a rate", low=0, high=1, low_open=True))

        def validate(self):
            if self.rate == 0.25:
                raise ValueError("--rate must not be 0.25")

    validate_settings(Mine())
    for bad, message in ((0, "--rate must be in (0, 1]; got 0"), (float("nan"), "got nan"),
                         (0.25, "--rate must not be 0.25")):
        with pytest.raises(SettingsError, match=re.escape(message)):
            validate_settings(Mine(rate=bad))


# ============================================================================== full disk, read-only
def _try_mount_tmpfs(path: str, options: str) -> bool:
    os.makedirs(path, exist_ok=True)
    if os.geteuid() != 0 or not shutil.which("mount"):
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", path], capture_output=True).returncode == 0


def _file_size_limit(limit: int):
    def preexec():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG), not a kill
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return preexec


def test_disk_full_is_one_line_and_leaves_nothing_half_written(usr, tmp_path):
    data = str(tmp_path / "full")
    mounted = _try_mount_tmpfs(data, "size=64k")
    try:
        big = tmp_path / "big.txt"
        big.write_text(open(EMMA, encoding="utf-8").read())  # ~900 KB of records: more than fits
        proc = _run(["textrain.framework.datagen", f"--usr_dir={usr[0]}", "--problem=fault_toy", f"--data_dir={data}",
                     f"--input_file={big}", "--fault_width=64", "--num_workers=2"], env=cli_env(drop=FAULT_ENV),
                    preexec_fn=None if mounted else _file_size_limit(32 << 10))
        assert proc.returncode == 1
        line = _error_line(proc, "textrain-datagen")
        assert ("disk is full" in line or "file size limit" in line) and "fault_toy-train-" in line, line
        assert ".incomplete" not in line  # the shard is named, not its temporary name
        # Whole shards written before the disk filled may stay (a re-run keeps them); nothing else does, and a
        # problem directory left with nothing in it is removed.
        left = os.listdir(_problem_dir(data)) if os.path.isdir(_problem_dir(data)) else []
        assert not [f for f in left if f.endswith(".incomplete") or f.endswith(".manifest.json")], left
        assert not os.path.isdir(_problem_dir(data)) or [f for f in left if not f.startswith(".")], left
    finally:
        if mounted:
            subprocess.run(["umount", data])


def test_read_only_data_dir_is_one_line(usr, tmp_path):
    data = str(tmp_path / "ro")
    if not _try_mount_tmpfs(data, "size=1m,ro"):
        if os.geteuid() == 0:
            pytest.skip("root ignores permission bits and tmpfs cannot be mounted here")
        os.makedirs(data, exist_ok=True)
        os.chmod(data, 0o555)
    try:
        proc = _datagen(usr, data)
        assert proc.returncode == 1
        line = _error_line(proc, "textrain-datagen")
        assert data in line and ("read-only" in line or "permission denied" in line), line
    finally:
        subprocess.run(["umount", data], capture_output=True)


# ============================================================================== checkpoints
@pytest.mark.slow
def test_checkpoints_that_do_not_fit_are_refused_naming_the_variables(usr, clean_data, tmp_path):
    shallow = str(tmp_path / "shallow")
    proc = _run(_train_args(usr, clean_data, shallow, "--num_train_steps=2"), env=cli_env(drop=FAULT_ENV))
    assert proc.returncode == 0, proc.stderr[-3000:]
    ckpt = os.path.join(shallow, "ckpt-2")

    # A deeper model of the same width: its extra layer is missing from the checkpoint.
    deeper = _run(_train_args(usr, clean_data, str(tmp_path / "deep"), f"--init_checkpoint={ckpt}"),
                  env=cli_env(drop=FAULT_ENV, FAULT_LAYERS="2"))
    assert deeper.returncode == 1
    line = _error_line(deeper, "textrain-train-gpu")
    assert f"--init_checkpoint={ckpt} does not fit the model" in line and "missing from the checkpoint (2)" in line
    assert "dense_2/kernel [8, 2]" in line and "vs model [8, 8]" in line
    assert deeper.stderr.rstrip().endswith(line)  # the last line: not buried under TF warnings
    assert not glob.glob(str(tmp_path / "deep" / "ckpt-*"))

    # Another width: mis-shaped variables, listed.
    wider = _run(_train_args(usr, clean_data, str(tmp_path / "wide"), f"--init_checkpoint={ckpt}"),
                 env=cli_env(drop=FAULT_ENV, FAULT_WIDTH="16"))
    line = _error_line(wider, "textrain-train-gpu")
    assert wider.returncode == 1 and "shape mismatch" in line and "checkpoint [4, 8] vs model [4, 16]" in line

    # A path that does not exist names itself.
    missing = _run(_train_args(usr, clean_data, str(tmp_path / "m"), f"--init_checkpoint={shallow}/ckpt-99"),
                   env=cli_env(drop=FAULT_ENV))
    line = _error_line(missing, "textrain-train-gpu")
    assert missing.returncode == 1 and f"{shallow}/ckpt-99: no such checkpoint" in line and "ckpt-2" in line

    # --model_dir holding another model's checkpoint.
    other = _run(_train_args(usr, clean_data, shallow), env=cli_env(drop=FAULT_ENV, FAULT_WIDTH="16"))
    line = _error_line(other, "textrain-train-gpu")
    assert other.returncode == 1 and f"--model_dir={shallow} holds a checkpoint of a different model" in line

    # The fitting checkpoint still initialises (and a stale ckpt-N_temp folder is removed at start).
    os.makedirs(os.path.join(shallow, "ckpt-3_temp", "part-00000-of-00001"))
    fine = _run(_train_args(usr, clean_data, shallow, "--num_train_steps=4"), env=cli_env(drop=FAULT_ENV))
    assert fine.returncode == 0, fine.stderr[-3000:]
    assert not glob.glob(os.path.join(shallow, "ckpt-*_temp*"))


@pytest.mark.slow
def test_non_finite_gradient_is_reported_truthfully(usr, clean_data, tmp_path):
    proc = _run(_train_args(usr, clean_data, str(tmp_path / "raise")), env=cli_env(drop=FAULT_ENV, FAULT_INF_GRAD="1"))
    assert proc.returncode == 1
    line = _error_line(proc, "textrain-train-gpu")
    assert "non-finite gradient norm inf (loss 0.69" in line and "at step 1" in line, line

    proc = _run(_train_args(usr, clean_data, str(tmp_path / "skip"), "--nan_policy=skip"),
                env=cli_env(drop=FAULT_ENV, FAULT_INF_GRAD="1"))
    assert proc.returncode == 1
    line = _error_line(proc, "textrain-train-gpu")
    assert "4 of the 4 steps of this run were skipped" in line and "gradient norm inf" in line, line
    assert "loss 0.0000" not in proc.stderr and "loss nan" in proc.stderr


@pytest.mark.slow
def test_ctrl_c_saves_and_exits_130(usr, clean_data, tmp_path):
    run = str(tmp_path / "run")
    proc = subprocess.Popen([sys.executable, "-m", *_train_args(usr, clean_data, run, "--num_train_steps=100000",
                                                                "--iterations_per_loop=5", "--log_steps=5",
                                                                "--save_checkpoints_steps=100000")],
                            cwd=REPO, env=cli_env(drop=FAULT_ENV), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not os.path.exists(os.path.join(run, "train")):
        time.sleep(0.2)
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert "SIGINT received" in err and "Traceback" not in err
    final = json.loads([ln for ln in out.splitlines() if ln.startswith("final ")][-1][len("final "):])
    assert final["preempted"] and final["checkpoint"].endswith(f"ckpt-{final['step']}")
    assert os.path.exists(final["checkpoint"] + ".index")
    assert not os.path.exists(os.path.join(run, ".trainer.lock"))  # released at exit


# ============================================================================== vocab learning
@pytest.mark.slow
def test_a_one_megabyte_word_does_not_stall_vocab_learning(tmp_path):
    """A 1 MB line without spaces and no --vocab_file: learning is linear (such a word is [UNK])."""
    corpus = tmp_path / "c.txt"
    with open(EMMA, encoding="utf-8") as f:
        text = "".join(f.readlines()[:200])
    corpus.write_text(text + "\n" + "ab" * (1 << 19) + "\n")
    proc = _run(["textrain.framework.datagen", "--problem=bert_pretrain", f"--data_dir={tmp_path / 'data'}",
                 f"--input_file={corpus}", "--vocab_size=200", "--max_seq_length=32",
                 "--max_predictions_per_seq=5", "--dupe_factor=1"], env=cli_env(drop=FAULT_ENV), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    vocab = (tmp_path / "data" / "bert_pretrain" / "vocab.txt").read_text().split("\n")
    assert "[UNK]" in vocab and not any(len(t) > 200 for t in vocab)


def test_a_corpus_of_one_long_word_is_one_line_naming_the_flag_and_leaves_nothing(tmp_path):
    """One 1 MB line without spaces and nothing else: the error names --input_file and why there are no words
    (all longer than BERT's word limit), not a Python object; the problem directory it made is gone."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("ab" * (1 << 19) + "\n")
    proc = _run(["textrain.framework.datagen", "--problem=bert_pretrain", f"--data_dir={tmp_path / 'data'}",
                 f"--input_file={corpus}", "--vocab_size=200", "--max_seq_length=32"], env=cli_env(drop=FAULT_ENV), timeout=300)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert last.startswith(f"textrain-datagen: error: --input_file={corpus}: no word to build a WordPiece vocab")
    assert "longer than 200 characters" in last and "generator object" not in last
    assert not (tmp_path / "data" / "bert_pretrain").exists()


# ------------------------------------------------------------------------------------- corpus readers
def _bert_datagen(data_dir, *extra, timeout=300):
    return _run(["textrain.framework.datagen", "--problem=bert_pretrain", f"--data_dir={data_dir}",
                 "--vocab_size=100", "--max_seq_length=32", "--max_predictions_per_seq=5", *extra],
                env=cli_env(drop=FAULT_ENV), timeout=timeout)


def test_a_csv_row_with_extra_fields_is_an_error_naming_its_line_or_a_skipped_record(tmp_path):
    """Under the header `id,text`, a row `41,"x",extra,fields` is not read as the text `x`: without
    --skip_bad_records it is one error line naming the file and line, and nothing is left; with it, the
    row is left out and counted."""
    path = tmp_path / "corpus.csv"
    path.write_text('id,text\n1,"Hello there. A first document."\n41,"x",extra,fields\n2,"Another one."\n')
    data = tmp_path / "data"
    proc = _bert_datagen(data, f"--input_file={path}")
    line = _error_line(proc, "textrain-datagen")
    assert proc.returncode == 1 and f"{path}: line 3: 4 fields where the header has 2" in line, line
    assert not data.exists()
    proc = _bert_datagen(data, f"--input_file={path}", "--skip_bad_records=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "skipped 1 bad record(s) (--skip_bad_records=1): line 3" in proc.stderr


def test_a_folder_that_is_not_a_corpus_says_what_a_corpus_folder_needs(tmp_path):
    folder = tmp_path / "stuff"
    folder.mkdir()
    (folder / "foo.bin").write_bytes(b"\x00\x01")
    (folder / "readme.md").write_text("# notes\n")
    data = tmp_path / "data"
    proc = _bert_datagen(data, f"--input_file={folder}")
    line = _error_line(proc, "textrain-datagen")
    assert proc.returncode == 1 and f"{folder}: a directory that is not a corpus" in line, line
    assert "neither a `datasets` save_to_disk directory (it needs state.json" in line, line
    assert "nor a folder of corpus files (it needs files named" in line and "foo.bin, readme.md" in line, line
    assert not data.exists()
    (folder / "a.txt").write_text("A document of a folder of corpus files.\nIts second line.\n")
    proc = _bert_datagen(data, f"--input_file={folder}")
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_a_failed_datagen_leaves_no_data_dir_it_made(tmp_path):
    data = tmp_path / "new" / "data"
    (tmp_path / "new").mkdir()
    proc = _bert_datagen(data)  # no --input_file
    line = _error_line(proc, "textrain-datagen")
    assert proc.returncode == 1 and "--input_file is required" in line
    assert os.listdir(tmp_path / "new") == []


def _spills(problem_dir) -> list[str]:
    return sorted(glob.glob(os.path.join(problem_dir, ".shuffle", "part-*.spill")))


def test_kill_9_during_the_shuffle_then_a_rerun_gives_the_clean_runs_shards(tmp_path):
    """datagen SIGKILLed while its partition jobs write their spill files: the re-run keeps the finished
    spill files (the same plan), reads the other partitions, and its shards equal an uninterrupted run's;
    no spill file is left."""
    with open(EMMA, encoding="utf-8") as f:
        text = f.read()
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(12):  # 12 files of ~0.25 MB: 12 partitions, written one after another by one worker
        (corpus / f"part{i:02d}.txt").write_text(text.replace("Emma", f"Emma{i}") * 3)
    args = [f"--input_file={corpus}/*.txt", "--num_shards=3", "--dupe_factor=1"]
    clean = tmp_path / "clean"
    assert _bert_datagen(clean, *args).returncode == 0
    killed = tmp_path / "killed"
    vocab = os.path.join(clean, "bert_pretrain", "vocab.txt")
    proc = subprocess.Popen([sys.executable, "-m", "textrain.framework.datagen", "--problem=bert_pretrain",
                             f"--data_dir={killed}", f"--vocab_file={vocab}", "--max_seq_length=32",
                             "--max_predictions_per_seq=5", *args],
                            cwd=REPO, env=cli_env(drop=FAULT_ENV), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    problem_dir = os.path.join(killed, "bert_pretrain")
    deadline = time.time() + 240
    while len(_spills(problem_dir)) < 2 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    finished = _spills(problem_dir)
    assert 2 <= len(finished) < 12 and not glob.glob(os.path.join(problem_dir, "*.tfrecord")), finished
    proc = _run(["textrain.framework.datagen", "--problem=bert_pretrain", f"--data_dir={killed}",
                 f"--vocab_file={vocab}", "--max_seq_length=32", "--max_predictions_per_seq=5", *args,
                 "--verbosity=1"], env=cli_env(drop=FAULT_ENV), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resuming the corpus shuffle" in proc.stderr
    assert not os.path.exists(os.path.join(problem_dir, ".shuffle"))

    def shards(root):
        return {os.path.basename(p): hashlib.sha256(open(p, "rb").read()).hexdigest()
                for p in glob.glob(os.path.join(root, "bert_pretrain", "*.tfrecord"))}
    assert shards(clean) == shards(killed) and len(shards(clean)) == 3

# ============================================================================== Hugging Face directories
HF_FIXTURES = os.path.join(HERE, "data", "hf")


def _hf_copy(tmp_path, arch: str = "BertModel", name: str = "hf") -> str:
    dst = str(tmp_path / name)
    shutil.copytree(os.path.join(HF_FIXTURES, arch), dst)
    return dst


def _convert(*args, **kw):
    return _run(["textrain.trainers.convert", *args], env=cli_env(drop=FAULT_ENV), **kw)


def _left_beside(tmp_path, *keep: str) -> list[str]:
    return sorted(p for p in os.listdir(tmp_path) if p not in keep)


@pytest.mark.parametrize("damage, named", [
    (lambda data: data[:len(data) // 2], "incomplete metadata"),
    (lambda data: b"this is not a safetensors file\n", "header"),
])
def test_damaged_safetensors_is_one_line_naming_the_file(tmp_path, damage, named):
    hf = _hf_copy(tmp_path)
    weights = os.path.join(hf, "model.safetensors")
    with open(weights, "rb") as f:
        data = f.read()
    with open(weights, "wb") as f:
        f.write(damage(data))
    proc = _convert(f"--from_hf={hf}", f"--to_textrain={tmp_path / 'out'}")
    assert proc.returncode == 1
    line = _error_line(proc, "textrain-convert")
    assert f"{weights}: truncated or not a safetensors file" in line and named in line
    assert _left_beside(tmp_path, "hf") == []


@pytest.mark.parametrize("change, named", [
    (lambda c: c.pop("num_hidden_layers"), "field 'num_hidden_layers' is missing; a bert config needs an integer there"),
    (lambda c: c.update(hidden_size="sixteen"), "field 'hidden_size' is 'sixteen'; expected an integer"),
])
def test_config_json_with_a_bad_field_is_one_line_naming_file_and_field(tmp_path, change, named):
    hf = _hf_copy(tmp_path)
    config_file = os.path.join(hf, "config.json")
    with open(config_file, encoding="utf-8") as f:
        config = json.load(f)
    change(config)
    with open(config_file, "w", encoding="utf-8") as f:
        json.dump(config, f)
    proc = _convert(f"--from_hf={hf}", f"--to_hf={tmp_path / 'out'}")
    assert proc.returncode == 1
    assert f"textrain-convert: error: {config_file}: {named}" == _error_line(proc, "textrain-convert")
    assert _left_beside(tmp_path, "hf") == []


# ============================================================================== run/best as a checkpoint
MAKE_BEST = '''
import sys, tensorflow as tf
from textrain.models.bert import BertClassifier, BertConfig
model = BertClassifier(BertConfig.preset("tiny", vocab_size=99), num_labels=2)
tf.train.Checkpoint(model=model).write(sys.argv[1] + "/ckpt-10")  # as best/ was written: no state file
'''


def test_from_textrain_takes_a_best_directory(tmp_path):
    """`run/best` is a checkpoint directory for every reader (the resolver serves --from_textrain,
    --init_checkpoint and finetune.init_checkpoint), also a best/ written before it had a `checkpoint` file."""
    best = tmp_path / "run" / "best"
    best.mkdir(parents=True)
    proc = subprocess.run([sys.executable, "-c", MAKE_BEST, str(best)], env=cli_env(drop=FAULT_ENV), capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = _convert(f"--from_textrain={best}", "--model=bert_classifier", "--model_size=tiny", "--num_labels=2",
                    f"--vocab_file={os.path.join(HF_FIXTURES, 'BertModel', 'vocab.txt')}", f"--to_hf={tmp_path / 'hf'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "hf" / "model.safetensors").exists()


# ============================================================================== conversion killed
def test_convert_removes_temp_dirs_of_dead_writers(tmp_path):
    """A textrain-convert killed with -9 leaves `.<out>.incomplete-<pid>/`; the next run into the same place
    removes it (its writer is dead) and writes the output."""
    hf = _hf_copy(tmp_path)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".out.incomplete-{dead.pid}"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"half")
    proc = _convert(f"--from_hf={hf}", f"--to_hf={tmp_path / 'out'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _left_beside(tmp_path, "hf") == ["out"]


# ============================================================================== fine-tuning that fails early
def _finetune_bad_dev(tmp_path, model_dir: str):
    """A fine-tune whose dev set has a label the train set lacks: refused before the first checkpoint."""
    (tmp_path / "train.tsv").write_text("sentence\tlabel\n" + "she said hello\tspeech\nhe walked\tnarration\n" * 8)
    (tmp_path / "dev.tsv").write_text("sentence\tlabel\nshe sang\tsong\n")
    hp = {"train_file": str(tmp_path / "train.tsv"), "dev_file": str(tmp_path / "dev.tsv")}
    params = ["finetune.model='bert_classifier'", "finetune.task='tsv_classification'",
              f"finetune.problem_hparams={hp!r}", f"finetune.data_dir='{tmp_path / 'data'}'",
              f"finetune.model_dir='{model_dir}'", "finetune.model_size='tiny'", "finetune.max_seq_length=16",
              f"finetune.vocab_file='{os.path.join(HF_FIXTURES, 'BertModel', 'vocab.txt')}'",
              "finetune.train_batch_size=4", "finetune.num_train_steps=2"]
    return _run(["textrain.trainers.finetune", *[f"--gin_param={p}" for p in params]], env=cli_env(drop=FAULT_ENV))


def test_a_finetune_failing_before_its_first_checkpoint_leaves_no_model_dir(tmp_path):
    model_dir = tmp_path / "run"
    proc = _finetune_bad_dev(tmp_path, str(model_dir))
    assert proc.returncode == 1
    line = _error_line(proc, "textrain-finetune")
    assert "song" in line and str(tmp_path / "dev.tsv") in line
    assert not model_dir.exists()
    # a model_dir that was there keeps what it held, and only that
    model_dir.mkdir()
    (model_dir / "notes.txt").write_text("mine")
    proc = _finetune_bad_dev(tmp_path, str(model_dir))
    assert proc.returncode == 1 and _error_line(proc, "textrain-finetune")
    assert os.listdir(model_dir) == ["notes.txt"]


# ============================================================================== resuming with another batch size
def test_resume_with_another_batch_size_is_refused_naming_both(usr, clean_data, tmp_path):
    """The saved input iterator holds batches of the old size, so its position cannot carry over: refused
    in one line naming both sizes, the run's checkpoints untouched."""
    model_dir = tmp_path / "run"
    proc = _run(_train_args(usr, clean_data, model_dir), env=cli_env(drop=FAULT_ENV))
    assert proc.returncode == 0, proc.stderr[-3000:]
    before = sorted(os.listdir(model_dir))
    args = [a for a in _train_args(usr, clean_data, model_dir, "--num_train_steps=6") if a != "--train_batch_size=8"]
    proc = _run([*args, "--train_batch_size=4"], env=cli_env(drop=FAULT_ENV))
    assert proc.returncode == 1
    line = _error_line(proc, "textrain-train-gpu")
    assert "was trained with batch size 8" in line and "this run's is 4" in line
    assert tf_latest_step(model_dir) == 4 and sorted(os.listdir(model_dir)) == before


def tf_latest_step(model_dir) -> int:
    state = (model_dir / "checkpoint").read_text()
    return int(re.search(r'model_checkpoint_path: "ckpt-(\d+)"', state).group(1))


# ============================================================================== an HF directory of another family
@pytest.fixture(scope="module")
def bert_data(tmp_path_factory) -> str:
    data = tmp_path_factory.mktemp("bert") / "data"
    proc = _run(["textrain.framework.datagen", "--problem=bert_pretrain", f"--input_file={EMMA}", f"--data_dir={data}",
                 "--vocab_size=600", "--max_seq_length=32", "--max_predictions_per_seq=5", "--dupe_factor=1"],
                env=cli_env(drop=FAULT_ENV))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return str(data)


def _bert_train_args(data: str, run, init_checkpoint: str) -> list[str]:
    return ["textrain.trainers.train_gpu", "--problem=bert_pretrain", "--model=bert", "--model_size=tiny",
            f"--data_dir={data}", f"--model_dir={run}", "--max_seq_length=32", "--max_predictions_per_seq=5",
            "--train_batch_size=8", "--num_train_steps=2", f"--init_checkpoint={init_checkpoint}"]


@pytest.mark.slow
def test_damaged_safetensors_as_init_checkpoint_is_one_line(bert_data, tmp_path):
    hf = _hf_copy(tmp_path, "BertForPreTraining")
    weights = os.path.join(hf, "model.safetensors")
    os.truncate(weights, os.path.getsize(weights) // 2)
    proc = _run(_bert_train_args(bert_data, tmp_path / "run", hf), env=cli_env(drop=FAULT_ENV))
    assert proc.returncode == 1
    assert f"{weights}: truncated or not a safetensors file" in _error_line(proc, "textrain-train-gpu")
    assert _left_beside(tmp_path, "hf") == []


@pytest.mark.slow
def test_hf_directory_of_another_family_says_which_in_a_short_line(bert_data, tmp_path):
    """An HF ELECTRA directory as --init_checkpoint of --model=bert: the line says it is ELECTRA and which
    --model takes it; the variable listing only with --verbose."""
    run = tmp_path / "run"
    args = _bert_train_args(bert_data, run, os.path.join(HF_FIXTURES, "ElectraForPreTraining"))
    proc = _run(args, env=cli_env(drop=FAULT_ENV))
    assert proc.returncode == 1
    line = _error_line(proc, "textrain-train-gpu")
    assert "is a Hugging Face ELECTRA checkpoint (ElectraForPreTraining)" in line and "--model=electra" in line
    assert len(line) < 400 and not run.exists()
    proc = _run([*args, "--verbose"], env=cli_env(drop=FAULT_ENV))
    assert proc.returncode != 0 and "missing from checkpoint" in proc.stderr
