"""framework/flag_aliases.py: the originals' launch lines run with only the binary name changed.

Fast: docs/ORIGINAL_FLAGS.md holds exactly the table of framework/flag_aliases.py; every row's target flag
exists in the CLI it serves; the translations of each original's line; refusals; every configs/*.flags
preset parses. Slow, as real processes on tiny data: XLNet data_utils.py -> train_gpu.py lines WITHOUT
--seed (the seedless checkpoint crash: it saves, then resumes) and a layout mismatch ending in one line;
BERT create_pretraining_data.py -> run_pretraining.py; ELECTRA build_pretraining_dataset.py ->
run_pretraining.py --hparams.
"""
from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers import cli_env, final_figures

from textrain.framework import flag_aliases as fa

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
EMMA = os.path.join(HERE, "data", "austen_emma.txt")


# ---------------------------------------------------------------------------------------- the table
def test_the_document_holds_exactly_the_table():
    with open(os.path.join(REPO, "docs", "ORIGINAL_FLAGS.md"), encoding="utf-8") as f:
        doc = f.read()
    assert fa.markdown_table() in doc
    rows = re.findall(r"^\| (\S+\.py) \| `--([\w-]+)` \|", doc, re.M)
    assert rows == [(a.script, a.original) for a in fa.ALIASES]
    assert len(set(rows)) == len(rows), "a flag listed twice for one original"


def _defined_flag_names() -> set[str]:
    from absl import flags

    from textrain.trainers import launch

    launch.define_all_flags([])  # the trainers' flags and every problem's settings
    # framework/datagen.py's own flags (it cannot be imported beside the trainers' definitions of --problem).
    datagen_only = {"num_workers", "task_id", "num_tasks", "tmp_dir", "num_shards", "overwrite", "vocab_only"}
    return set(flags.FLAGS) | datagen_only


def test_every_translation_targets_a_defined_flag():
    names = _defined_flag_names()
    for alias in fa.ALIASES:
        for token in _sample_translation(alias):
            name = token[2:].split("=", 1)[0]
            name = name[2:] if name not in names and name.startswith("no") else name
            assert name in names, (alias.script, alias.original, token)
    for key, (_, translate) in fa.HPARAMS.items():
        for token in translate(_HPARAM_SAMPLES.get(key, 1)):
            assert token[2:].split("=", 1)[0] in names, (key, token)


_SAMPLES = {"from_raw_text": "true", "split": "train", "pass_id": "0", "decay_method": "poly", "num_tpu_cores": "8",
            "hparams": "{}", "output_file": "out/x.tfrecord", "input_file": "out/x.tfrecord"}
_HPARAM_SAMPLES = {"electra_objective": True, "model_hparam_overrides": {}, "uniform_generator": False,
                   "untied_generator": True, "tpu_name": "t", "tpu_zone": "z", "gcp_project": "p"}


def _sample_translation(alias: fa.Alias) -> list[str]:
    value = "true" if alias.is_bool else _SAMPLES.get(alias.original, "7")
    return alias.translate(value)


def test_bert_lines():
    data = fa.translate_argv(["prog", "--input_file=a.txt,b.txt", "--output_file=/tmp/out/tf_examples.tfrecord",
                              "--vocab_file=v.txt", "--do_lower_case=True", "--max_seq_length=128",
                              "--dupe_factor", "5"], fa.DATAGEN)
    assert data == ["prog", "--input_file=a.txt,b.txt", "--data_dir=/tmp/out", "--vocab_file=v.txt",
                    "--do_lower_case=True", "--max_seq_length=128", "--dupe_factor=5", "--problem=bert_pretrain"]
    train = fa.translate_argv(["prog", "--input_file=gs://b/d/*.tfrecord", "--output_dir=gs://b/run", "--do_train=True",
                               "--nodo_eval", "--num_tpu_cores=32", "--tpu_name=t", "--learning_rate=2e-5"], fa.TRAIN)
    user = train[train.index("--data_dir=gs://b/d"):]
    assert user == ["--data_dir=gs://b/d", "--model_dir=gs://b/run", "--do_train=True", "--do_eval=False",
                    "--num_core_per_host=8", "--num_hosts=4", "--tpu=t", "--learning_rate=2e-5",
                    "--problem=bert_pretrain", "--model=bert"]
    assert "--learning_rate=5e-5" in train[:train.index("--data_dir=gs://b/d")]  # the original's default, first
    with pytest.raises(ValueError, match="--input_file=a/x,b/y: the records must be in one directory"):
        fa.translate_argv(["prog", "--input_file=a/x,b/y", "--output_dir=r"], fa.TRAIN)


def test_xlnet_lines():
    data = fa.translate_argv(["prog", "--input_glob=data/*.txt", "--sp_path=sp.model", "--save_dir=proc",
                              "--bsz_per_host=32", "--num_core_per_host=16", "--nobi_data", "--use_tpu=False",
                              "--split=train", "--task=1", "--num_task=4"], fa.DATAGEN)
    assert data == ["prog", "--uncased=True", "--input_file=data/*.txt", "--sp_model=sp.model", "--data_dir=proc", "--bsz_per_host=32",
                    "--num_core_per_host=16", "--bi_data=False", "--task_id=1", "--num_tasks=4",
                    "--problem=xlnet_pretrain"]
    with pytest.raises(ValueError, match="--split=dev: textrain-datagen makes every split in one run"):
        fa.translate_argv(["prog", "--save_dir=p", "--split=dev"], fa.DATAGEN)
    train = fa.translate_argv(["prog", "--record_info_dir=proc/tfrecords/", "--train_steps=10", "--save_steps=5",
                               "--iterations=2", "--decay_method=cos", "--clip=0.5", "--warmup_steps=3"], fa.TRAIN)
    user = train[train.index("--data_dir=proc"):]
    assert user == ["--data_dir=proc", "--num_train_steps=10", "--save_checkpoints_steps=5", "--log_steps=2",
                    "--lr_decay=cosine", "--clip_norm=0.5", "--num_warmup_steps=3", "--problem=xlnet_pretrain",
                    "--model=xlnet"]


def test_electra_lines(tmp_path):
    data = fa.translate_argv(["prog", "--corpus-dir", "corpus/", "--vocab-file", "v.txt", "--output-dir",
                              "D/pretrain_tfrecords", "--max-seq-length", "64", "--no-lower-case",
                              "--num-processes", "2"], fa.DATAGEN)
    assert data == ["prog", "--input_file=corpus/*", "--vocab_file=v.txt", "--data_dir=D/pretrain_tfrecords",
                    "--max_seq_length=64", "--nodo_lower_case", "--num_workers=2", "--problem=electra_pretrain"]
    hparams = tmp_path / "h.json"
    hparams.write_text(json.dumps({"debug": True, "num_train_steps": 7, "lr_decay_power": 0.5}))
    train = fa.translate_argv(["prog", "--data-dir", "D", "--model-name", "m", f"--hparams={hparams}"], fa.TRAIN)
    user = train[len(fa.ORIGINALS["electra/run_pretraining.py"].defaults) + 1:]
    assert user == ["--train_batch_size=8", "--num_train_steps=20", "--iterations_per_loop=1", "--max_eval_steps=2",
                    "--num_train_steps=7", "--lr_decay=polynomial", "--poly_power=0.5",
                    "--data_dir=D/pretrain_tfrecords", "--model_dir=D/models/m", "--problem=electra_pretrain",
                    "--model=electra"]
    with pytest.raises(ValueError, match="unknown key"):
        fa.translate_argv(["prog", "--data-dir=D", "--model-name=m", '--hparams={"no_such": 1}'], fa.TRAIN)
    with pytest.raises(ValueError, match="electra_objective=false is not supported"):
        fa.translate_argv(["prog", "--data-dir=D", "--model-name=m", '--hparams={"electra_objective": false}'],
                          fa.TRAIN)


def test_our_own_lines_pass_unchanged():
    argv = ["prog", "--problem=bert_pretrain", "--data_dir=d", "--model=bert", "--model_dir=m",
            "--bert_config_file=c.json", "--input_file=corpus.txt"]
    assert fa.translate_argv(argv[:6], fa.TRAIN) == argv[:6]
    assert fa.translate_argv(argv, fa.DATAGEN) == argv  # --input_file is text for datagen: ours too
    # t2t-trainer's --hparams (a comma list) is ours too: it alone does not make a line ELECTRA's.
    t2t = ["prog", "--problem=translate_enzh_sub8k", "--model=transformer", "--hparams_set=transformer_tiny",
           "--hparams=hidden_size=32,num_heads=2", "--data_dir=d", "--model_dir=m"]
    assert fa.translate_argv(t2t, fa.TRAIN) == t2t


@pytest.mark.parametrize("preset", sorted(glob.glob(os.path.join(REPO, "configs", "*.flags"))),
                         ids=os.path.basename)
def test_every_preset_parses(preset):
    from absl import flags

    _defined_flag_names()
    argv = fa.translate_argv(["prog", f"--flagfile={preset}", "--learning_rate=3e-3"], fa.TRAIN)
    flags.FLAGS.unparse_flags()
    try:
        flags.FLAGS(argv)
        family = os.path.basename(preset).split("_")[0]
        assert flags.FLAGS.model == family and flags.FLAGS.problem == f"{family}_pretrain"
        assert flags.FLAGS.learning_rate == 3e-3  # flags after the preset win
        size = os.path.basename(preset).split("_")[1].split(".")[0]
        if family == "xlnet":
            assert flags.FLAGS.n_layer == {"base": 12, "large": 24}[size]
        else:
            assert flags.FLAGS.model_size == size
    finally:
        flags.FLAGS.unparse_flags()


# ---------------------------------------------------------------------------------- real processes
def _run(args: list[str], timeout: int = 400) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=cli_env(), capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("orig_corpus") / "emma.txt"
    with open(EMMA, encoding="utf-8") as f:
        path.write_text("".join(f.readlines()[:400]))
    return str(path)


@pytest.mark.slow
def test_xlnet_original_lines_train_without_seed_save_and_resume(corpus, tmp_path):
    save_dir = str(tmp_path / "proc_data")
    gen = _run(["textrain.framework.datagen", f"--input_glob={corpus}", f"--save_dir={save_dir}", "--bsz_per_host=4",
                "--num_core_per_host=2", "--seq_len=32", "--reuse_len=16", "--num_predict=5", "--bi_data=True",
                "--uncased=False", "--mask_alpha=6", "--mask_beta=1", "--num_passes=1", "--use_tpu=False",
                "--vocab_size=300"])
    assert gen.returncode == 0, gen.stderr[-3000:]
    model_dir = str(tmp_path / "run")
    line = ["textrain.trainers.train_gpu", f"--record_info_dir={save_dir}/tfrecords", f"--model_dir={model_dir}",
            "--num_core_per_host=2", "--train_batch_size=4", "--seq_len=32", "--reuse_len=16", "--num_predict=5",
            "--bi_data=True", "--mem_len=8", "--n_layer=1", "--d_model=16", "--d_embed=16", "--n_head=2",
            "--d_head=8", "--d_inner=32", "--learning_rate=1e-3", "--warmup_steps=1", "--save_steps=2",
            "--iterations=2"]  # no --seed, as users run it
    first = _run([*line, "--train_steps=2"])
    assert first.returncode == 0, first.stderr[-3000:]
    assert final_figures(first.stdout)["step"] == 2 and tf.train.latest_checkpoint(model_dir).endswith("ckpt-2")
    assert "MirroredStrategy" in first.stderr  # --num_core_per_host=2: two GPUs (here logical CPUs)
    seed_file = os.path.join(model_dir, "data_seed-0.txt")
    seed = open(seed_file).read()
    again = _run([*line, "--train_steps=4"])
    assert again.returncode == 0, again.stderr[-3000:]
    out = final_figures(again.stdout)
    assert out["step"] == 4 and np.isfinite(out["loss"]) and "restored" in again.stderr
    assert open(seed_file).read() == seed  # the resumed run read the same input stream
    # The data's per-core layout vs one GPU: one line, no traceback.
    bad = _run([*line, "--train_steps=2", "--num_gpus=1", f"--model_dir={tmp_path / 'bad'}"])
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    errors = [ln for ln in bad.stderr.splitlines() if ln.startswith("textrain-train-gpu: error:")]
    assert len(errors) == 1 and "--num_core_per_host=2 replicas per host" in errors[0], bad.stderr[-2000:]


@pytest.mark.slow
def test_bert_and_electra_original_lines(corpus, tmp_path):
    out_dir = tmp_path / "bert_data"
    gen = _run(["textrain.framework.datagen", f"--input_file={corpus}", f"--output_file={out_dir}/tf_examples.tfrecord",
                "--do_lower_case=True", "--max_seq_length=32", "--max_predictions_per_seq=5", "--masked_lm_prob=0.15",
                "--random_seed=12345", "--dupe_factor=1", "--short_seq_prob=0.1", "--vocab_size=300"])
    assert gen.returncode == 0, gen.stderr[-3000:]
    vocab = out_dir / "bert_pretrain" / "vocab.txt"
    assert vocab.exists()
    config = tmp_path / "bert_config.json"
    config.write_text(json.dumps({"vocab_size": len(vocab.read_text().splitlines()), "hidden_size": 16,
                                  "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32,
                                  "max_position_embeddings": 64, "type_vocab_size": 2}))
    run = tmp_path / "bert_run"
    train = _run(["textrain.trainers.train_tpu", f"--input_file={out_dir}/tf_examples.tfrecord", f"--output_dir={run}",
                  "--do_train=True", "--do_eval=False", f"--bert_config_file={config}", "--train_batch_size=8",
                  "--max_seq_length=32", "--max_predictions_per_seq=5", "--num_train_steps=2",
                  "--num_warmup_steps=1", "--learning_rate=1e-3", "--save_checkpoints_steps=2",
                  "--iterations_per_loop=2", "--use_tpu=False"])
    assert train.returncode == 0, train.stderr[-3000:]
    assert final_figures(train.stdout)["step"] == 2 and tf.train.latest_checkpoint(str(run)).endswith("ckpt-2")

    electra_dir = tmp_path / "electra"
    corpus_dir = tmp_path / "corpus_dir"
    corpus_dir.mkdir()
    (corpus_dir / "emma.txt").write_text(open(corpus, encoding="utf-8").read())
    gen = _run(["textrain.framework.datagen", "--corpus-dir", str(corpus_dir), "--vocab-file", str(vocab), "--output-dir",
                f"{electra_dir}/pretrain_tfrecords", "--max-seq-length", "32", "--num-processes", "1"])
    assert gen.returncode == 0, gen.stderr[-3000:]
    hparams = {"model_size": "small", "num_train_steps": 2, "train_batch_size": 8, "max_seq_length": 32,
               "learning_rate": 1e-3, "num_warmup_steps": 1, "iterations_per_loop": 2, "save_checkpoints_steps": 2,
               "vocab_size": len(vocab.read_text().splitlines())}
    train = _run(["textrain.trainers.train_gpu", "--data-dir", str(electra_dir), "--model-name", "tiny", "--hparams",
                  json.dumps(hparams), f"--electra_config_file={config}", "--num_gpus=1"])
    assert train.returncode == 0, train.stderr[-3000:]
    assert final_figures(train.stdout)["step"] == 2
    assert tf.train.latest_checkpoint(str(electra_dir / "models" / "tiny")).endswith("ckpt-2")
