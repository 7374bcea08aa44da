"""textrain-datagen --runner=beam (framework/beam_datagen.py): the same shards as local datagen, the manifest
only after every shard, and a killed pipeline that a re-run completes.

Real processes throughout: the CLI as `python -m framework.datagen` with Beam's DirectRunner in
multi-processing mode (2 SDK worker processes). The Beam tests need the `[beam]` extra and are skipped
without it (`pip install -e ".[test,beam]"`).
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMMA = os.path.join(REPO, "tests", "data", "austen_emma.txt")
DIRECT_2 = "--runner=DirectRunner --direct_num_workers=2 --direct_running_mode=multi_processing"
NAME = "bert_pretrain"


def datagen_cmd(data_dir, *extra: str, dupe_factor: int = 2, num_shards: int = 6) -> list[str]:
    # No --seed: users run without one.
    return [sys.executable, "-m", "textrain.framework.datagen", f"--problem={NAME}", f"--input_file={EMMA}",
            f"--data_dir={data_dir}", "--vocab_size=800", f"--dupe_factor={dupe_factor}", "--max_seq_length=64",
            "--max_predictions_per_seq=10", f"--num_shards={num_shards}", *extra]


def run_datagen(data_dir, *extra: str, timeout: int = 240, **settings) -> subprocess.CompletedProcess:
    proc = subprocess.run(datagen_cmd(data_dir, *extra, **settings), cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def shard_hashes(data_dir) -> dict[str, str]:
    folder = os.path.join(data_dir, NAME)
    return {f: hashlib.sha256(open(os.path.join(folder, f), "rb").read()).hexdigest()
            for f in sorted(os.listdir(folder)) if f.endswith(".tfrecord")}


def manifest(data_dir) -> dict:
    with open(os.path.join(data_dir, NAME, f"{NAME}-train.manifest.json")) as f:
        m = json.load(f)
    m.pop("created")
    return m


@pytest.fixture(scope="module")
def beam():
    """Skip without the [beam] extra (listed first, so the local reference is not made for nothing)."""
    return pytest.importorskip("apache_beam")


@pytest.fixture(scope="module")
def local_dir(tmp_path_factory):
    """The reference: local datagen with 2 worker processes."""
    out = tmp_path_factory.mktemp("local")
    run_datagen(out, "--num_workers=2")
    return out


def test_beam_flags_refuse_local_only_flags(tmp_path):
    """--num_workers belongs to the local runner; refused before Beam is even imported."""
    proc = subprocess.run(datagen_cmd(tmp_path, "--runner=beam", "--num_workers=2"), cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "--num_workers" in proc.stderr and "--beam_pipeline_options" in proc.stderr
    assert not os.path.exists(os.path.join(tmp_path, NAME, f"{NAME}-train.manifest.json"))


@pytest.mark.slow
def test_beam_shards_are_byte_identical_to_local(beam, local_dir, tmp_path):
    run_datagen(tmp_path, "--runner=beam", f"--beam_pipeline_options={DIRECT_2}")
    local = shard_hashes(local_dir)
    assert len(local) == 6
    assert shard_hashes(tmp_path) == local
    assert manifest(tmp_path) == manifest(local_dir)
    # Same vocabulary, built once before the pipeline.
    vocab = lambda d: open(os.path.join(d, NAME, "vocab.txt"), "rb").read()  # noqa: E731
    assert vocab(tmp_path) == vocab(local_dir)


@pytest.mark.slow
def test_xlnet_beam_shards_and_stage_progress_equal_local(beam, tmp_path):
    """xlnet_pretrain, whose documents go through the same shuffle (with a dev split of its own file): Beam
    with 2 worker processes writes local datagen's shards, and logs a line per stage."""
    dev = tmp_path / "dev.txt"
    with open(EMMA, encoding="utf-8") as f:
        dev.write_text("".join(f.readlines()[:3000]))
    sp_model = os.path.join(REPO, "tests", "data", "xlnet_spiece_1200.model")
    common = [sys.executable, "-m", "textrain.framework.datagen", "--problem=xlnet_pretrain", f"--input_file={EMMA}",
              f"--dev_input_file={dev}", f"--sp_model={sp_model}", "--seq_len=64", "--reuse_len=32",
              "--num_predict=8", "--bsz_per_host=4", "--num_core_per_host=1", "--num_shards=4", "--partition_mb=0.2"]
    hashes = {}
    for name, extra in (("local", []), ("beam", ["--runner=beam", f"--beam_pipeline_options={DIRECT_2}"])):
        out = tmp_path / name
        proc = subprocess.run([*common, f"--data_dir={out}", *extra], cwd=REPO, capture_output=True, text=True,
                              timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        assert proc.returncode == 0, proc.stderr[-3000:]
        folder = out / "xlnet_pretrain"
        hashes[name] = {f: hashlib.sha256((folder / f).read_bytes()).hexdigest()
                        for f in sorted(os.listdir(folder)) if f.endswith(".tfrecord")}
    assert len(hashes["local"]) == 5 and hashes["beam"] == hashes["local"]
    assert "shuffle (partitions read):" in proc.stderr and "shards: 5/5" in proc.stderr


@pytest.mark.slow
def test_a_problem_without_a_document_corpus_gives_local_shards_on_beam(beam, tmp_path):
    """squad_v1 reads its JSON in its shard jobs (no document corpus): the pipeline's no-corpus path (no
    partitions, an empty corpus check) writes local's shards."""
    from helpers import qa_fixtures

    vocab, data = qa_fixtures.write_vocab(str(tmp_path / "vocab.txt")), qa_fixtures.write_squad(str(tmp_path / "v1.json"))
    hashes = {}
    for runner, extra in (("local", []), ("beam", ["--runner=beam", f"--beam_pipeline_options={DIRECT_2}"])):
        proc = subprocess.run([sys.executable, "-m", "textrain.framework.datagen", "--problem=squad_v1",
                               f"--train_file={data}", f"--predict_file={data}", f"--vocab_file={vocab}",
                               "--max_seq_length=64", "--doc_stride=16", f"--data_dir={tmp_path / runner}", *extra],
                              cwd=REPO, capture_output=True, text=True, timeout=240,
                              env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        assert proc.returncode == 0, proc.stderr[-3000:]
        folder = tmp_path / runner / "squad_v1"
        hashes[runner] = {f: hashlib.sha256((folder / f).read_bytes()).hexdigest()
                          for f in sorted(os.listdir(folder)) if f.endswith(".tfrecord")}
    assert hashes["local"] and hashes["beam"] == hashes["local"]


@pytest.mark.slow
def test_translate_beam_shards_equal_local(beam, tmp_path):
    """translate's line pairs (two files cut at the same lines) through the engine's shuffle: local's shards."""
    parallel = tmp_path / "parallel"
    parallel.mkdir()
    with open(EMMA, encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()][:4000]
    (parallel / "train.en").write_text("\n".join(lines) + "\n")
    (parallel / "train.zh").write_text("\n".join(line.upper() for line in lines) + "\n")
    common = [sys.executable, "-m", "textrain.framework.datagen", "--problem=translate_enzh_sub8k",
              f"--tmp_dir={parallel}", "--num_shards=3", "--partition_mb=0.05", "--dev_every=20"]
    hashes = {}
    for name, extra in (("local", []), ("beam", ["--runner=beam", f"--beam_pipeline_options={DIRECT_2}"])):
        out = tmp_path / name
        if name == "beam":  # the same vocabularies (building them is not what is compared)
            import shutil
            shutil.copytree(tmp_path / "local" / "translate_enzh_sub8k", out / "translate_enzh_sub8k",
                            ignore=shutil.ignore_patterns("*.tfrecord*", "*.json"))
        proc = subprocess.run([*common, f"--data_dir={out}", *extra], cwd=REPO, capture_output=True, text=True,
                              timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        assert proc.returncode == 0, proc.stderr[-3000:]
        folder = out / "translate_enzh_sub8k"
        hashes[name] = {f: hashlib.sha256((folder / f).read_bytes()).hexdigest()
                        for f in sorted(os.listdir(folder)) if f.endswith(".tfrecord")}
    assert len(hashes["local"]) == 4 and hashes["beam"] == hashes["local"]


@pytest.mark.slow
def test_tsv_classification_beam_shards_equal_local(beam, tmp_path):
    """Table rows (a train file cut into partitions, a dev file and a test file without labels)
    through the engine's shuffle: local's shards (2 worker processes), and local's with --num_tasks=2."""
    from textrain.framework import encoders
    with open(EMMA, encoding="utf-8") as f:
        lines = [line.strip().replace("\t", " ") for line in f if line.strip()][:3000]
    rows = [f"{line}\t{'pos' if i % 3 else 'neg'}\n" for i, line in enumerate(lines)]
    (tmp_path / "train.tsv").write_text("sentence\tlabel\n" + "".join(rows[:2500]) + "\n")
    (tmp_path / "dev.tsv").write_text("sentence\tlabel\n" + "".join(rows[2500:]))
    (tmp_path / "test.tsv").write_text("sentence\n" + "".join(r.split("\t")[0] + "\n" for r in rows[2700:]))
    vocab = encoders.build_wordpiece_vocab(iter(lines), vocab_size=300, out_file=str(tmp_path / "vocab.txt"))
    common = [sys.executable, "-m", "textrain.framework.datagen", "--problem=tsv_classification",
              f"--train_file={tmp_path / 'train.tsv'}", f"--dev_file={tmp_path / 'dev.tsv'}",
              f"--test_file={tmp_path / 'test.tsv'}", f"--vocab_file={vocab}", "--max_seq_length=16",
              "--num_shards=3", "--partition_mb=0.05"]
    hashes = {}
    runs = (("local", [["--num_workers=2"]]), ("tasks", [["--num_tasks=2", f"--task_id={t}"] for t in range(2)]),
            ("beam", [["--runner=beam", f"--beam_pipeline_options={DIRECT_2}"]]))
    for name, commands in runs:
        out = tmp_path / name
        for extra in commands:
            proc = subprocess.run([*common, f"--data_dir={out}", *extra], cwd=REPO, capture_output=True, text=True,
                                  timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
            assert proc.returncode == 0, proc.stderr[-3000:]
        folder = out / "tsv_classification"
        hashes[name] = {f: hashlib.sha256((folder / f).read_bytes()).hexdigest()
                        for f in sorted(os.listdir(folder)) if f.endswith(".tfrecord")}
    assert len(hashes["local"]) == 5 and hashes["beam"] == hashes["local"] == hashes["tasks"]


def test_pipeline_options_in_both_forms_users_write(beam):
    from textrain.framework.beam_datagen import pipeline_args, pipeline_options

    beam_form = pipeline_args("--runner=DirectRunner --direct_num_workers=2")
    assert pipeline_args("runner=DirectRunner,direct_num_workers=2") == beam_form  # TFDS's form
    assert pipeline_args(" runner=DirectRunner, direct_num_workers=2 ") == beam_form
    assert pipeline_options("runner=DirectRunner,direct_num_workers=2").get_all_options()["direct_num_workers"] == 2


def test_a_shard_is_written_only_from_every_document_sent_to_it_once(beam, tmp_path):
    """The shard stage counts what the partitions sent each shard (check_corpus) and refuses a delivery
    with documents missing, added or repeated, instead of writing a shard with other bytes."""
    from textrain.framework.beam_datagen import IncompleteDeliveryError, check_corpus, check_delivery

    read = [(1, "b.txt", [], None, {("train", 0): 2, ("train", 1): 1}), (0, "a.txt", [], None, {("train", 0): 1})]
    checked = check_corpus(read, str(tmp_path / "failures"))
    assert checked.error is None and checked.sent == {("train", 0): 3, ("train", 1): 1}
    docs = [(0, 0, "x"), (1, 0, "y"), (1, 2, "z")]
    check_delivery("train", 0, docs, checked.sent[("train", 0)])
    with pytest.raises(IncompleteDeliveryError, match="delivered 2 documents .0 repeated., the partitions sent 3"):
        check_delivery("train", 0, docs[:2], 3)
    with pytest.raises(IncompleteDeliveryError, match="delivered 3 documents .1 repeated."):
        check_delivery("train", 0, [docs[0], docs[1], docs[1]], 3)


@pytest.mark.slow
def test_tfds_form_of_pipeline_options_runs(beam, local_dir, tmp_path):
    run_datagen(tmp_path, "--runner=beam", "--beam_pipeline_options=runner=DirectRunner,direct_num_workers=2")
    assert shard_hashes(tmp_path) == shard_hashes(local_dir)


@pytest.mark.slow
def test_shard_jobs_on_threads_of_one_process_give_the_same_shards(beam, local_dir, tmp_path):
    """The multi-threaded DirectRunner runs several shard jobs at once in one process: each must still read
    only its own documents (a process-wide 'current shard' once handed one job another's)."""
    threads = "--runner=DirectRunner --direct_num_workers=4 --direct_running_mode=multi_threading"
    run_datagen(tmp_path, "--runner=beam", f"--beam_pipeline_options={threads}")
    assert shard_hashes(tmp_path) == shard_hashes(local_dir)


@pytest.mark.slow
def test_killed_pipeline_leaves_no_manifest_and_a_rerun_completes(beam, tmp_path):
    # More and bigger shards than the other tests: a shard of the 6-shard setting is written in tens of
    # milliseconds, so every shard could be done before the kill. The reference is a local run of the same.
    settings = dict(dupe_factor=20, num_shards=24)
    reference = tmp_path / "reference"
    run_datagen(reference, "--num_workers=2", **settings)
    run_dir = tmp_path / "beam"
    folder = os.path.join(run_dir, NAME)
    manifest_path = os.path.join(folder, f"{NAME}-train.manifest.json")
    # A real launcher with its SDK worker processes, in its own process group so SIGKILL takes all.
    proc = subprocess.Popen(datagen_cmd(run_dir, "--runner=beam", f"--beam_pipeline_options={DIRECT_2}",
                                        **settings),
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.time() + 180
        # Kill as soon as the first shard is being written (or finished): the pipeline is mid-run.
        while time.time() < deadline and proc.poll() is None:
            names = os.listdir(folder) if os.path.isdir(folder) else []
            if any(n.endswith(".tfrecord.incomplete") or n.endswith(".stats.json") for n in names):
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the pipeline ended before it could be killed"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    finished = [n for n in os.listdir(folder) if n.endswith(".tfrecord")]
    assert len(finished) < settings["num_shards"], "every shard was done before the kill: nothing was tested"
    assert not os.path.exists(manifest_path)
    run_datagen(run_dir, "--runner=beam", f"--beam_pipeline_options={DIRECT_2}", **settings)
    assert os.path.exists(manifest_path)
    assert shard_hashes(run_dir) == shard_hashes(reference)
    assert manifest(run_dir) == manifest(reference)
    assert not [n for n in os.listdir(folder) if n.endswith(".incomplete")]


@pytest.mark.slow
def test_bench_scale_measures_every_step_and_refuses_differing_shards(beam, tmp_path):
    """benchmarks/bench_beam_datagen.py on a tiny corpus (Emma cut into short documents): every step runs
    and agrees on the shards (tasks and Beam against local); the corpus is made once, the saved figures
    are reused, and a saved run whose shards differ makes the script exit 1."""
    import gzip
    import shutil

    corpora = tmp_path / "corpora"
    corpora.mkdir()
    with open(EMMA, "rb") as src, gzip.open(corpora / "emma.txt.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    work = tmp_path / "work"
    cmd = [sys.executable, os.path.join(REPO, "benchmarks", "bench_beam_datagen.py"), "--mb=1", "--vocab_mb=0.5",
           "--min_documents=2000", "--shards=2,3", "--num_shards=3", f"--corpora={corpora}", f"--work_dir={work}"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "shards equal to one task's: True" in proc.stdout
    assert "shards equal to local's: True" in proc.stdout
    assert "projection" in proc.stdout
    corpus = work / "corpus-1MB.txt"
    text = corpus.read_bytes()
    documents = text.split(b"\n\n")
    assert len(text) >= 1e6 and len(documents) > 2000 and text.endswith(b"\n\n")
    assert all(3 <= d.count(b"\n") + 1 <= 6 for d in documents[:-1])  # short documents of 3-6 lines
    mtime = corpus.stat().st_mtime_ns

    # The tasks' saved figures with a different shard: the script reuses them and fails.
    (saved,) = (work / "results").glob("*-tasks4-*.json")
    r = json.loads(saved.read_text())
    r["hashes"][sorted(r["hashes"])[0]] = "0" * 64
    saved.write_text(json.dumps(r))
    proc = subprocess.run(cmd + ["--steps=tasks"], capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "shards equal to one task's: False" in proc.stdout and "saved figures" in proc.stdout
    assert corpus.stat().st_mtime_ns == mtime  # reused, not written again
