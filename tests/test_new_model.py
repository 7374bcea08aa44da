"""docs/new_model.md, run: a model with a fine-tuning head that lives only in a --usr_dir (tests/usr_toy's
`usr_toy_classifier`) goes through textrain-finetune (records made, trained, evaluated, predicted, exported with
raw-string signatures), textrain-convert (its best checkpoint to a SavedModel and to TF1 names) and
textrain-train-gpu on the same records, with no file of trainers/ knowing its name."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers import cli_env, emma_speech_rows, final_figures

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
USR_TOY = os.path.join(HERE, "usr_toy")
EMMA = os.path.join(HERE, "data", "austen_emma.txt")


def test_trainers_do_not_name_the_model():
    for folder, _, files in os.walk(os.path.join(REPO, "trainers")):
        for name in files:
            if name.endswith(".py"):
                assert "usr_toy" not in open(os.path.join(folder, name), encoding="utf-8").read(), name


@pytest.mark.slow
def test_a_usr_dir_model_finetunes_exports_and_trains(tmp_path):
    from textrain.framework.encoders import build_wordpiece_vocab
    from textrain.framework.graph_wordpiece import GraphWordpieceTokenizer

    rows = emma_speech_rows()[:200]
    files = {}
    for split, part in {"train": rows[:140], "dev": rows[140:180], "test": rows[180:]}.items():
        files[split] = str(tmp_path / f"{split}.tsv")
        with open(files[split], "w", encoding="utf-8") as f:
            f.write("sentence\tlabel\n" + "".join(f"{t}\t{l}\n" for t, l in part))
    vocab = build_wordpiece_vocab(EMMA, vocab_size=400, out_file=str(tmp_path / "vocab.txt"))
    data, run = tmp_path / "data", tmp_path / "run"
    hparams = {"train_file": files["train"], "dev_file": files["dev"], "test_file": files["test"]}
    params = [f"finetune.usr_dir='{USR_TOY}'", "finetune.model='usr_toy_classifier'",
              "finetune.task='tsv_classification'", f"finetune.problem_hparams={hparams!r}",
              f"finetune.vocab_file='{vocab}'", f"finetune.data_dir='{data}'", f"finetune.model_dir='{run}'",
              "finetune.max_seq_length=32", "finetune.train_batch_size=16", "finetune.num_train_steps=10",
              "finetune.learning_rate=0.05", "finetune.do_predict=True", "finetune.export=True"]
    proc = subprocess.run([sys.executable, "-m", "textrain.trainers.finetune",
                           *[f"--gin_param={p}" for p in params]],
                          cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    final = final_figures(proc.stdout)
    assert final["step"] == 10 and final["num_labels"] == 2 and "accuracy" in final["eval"]["dev"]
    assert os.path.exists(run / "predict_test.tsv")

    loaded = tf.saved_model.load(str(run / "export"))
    texts = tf.constant([t for t, _ in rows[180:184]])
    by_text = loaded.signatures["serve_text"](text_a=texts)
    ids = GraphWordpieceTokenizer(vocab, do_lower_case=True, max_seq_length=32)(texts)
    by_ids = loaded.signatures["serving_default"](**{k: tf.cast(v, tf.int32) for k, v in ids.items()})
    np.testing.assert_allclose(by_text["probabilities"].numpy(), by_ids["probabilities"].numpy(), rtol=1e-6)

    # textrain-convert builds it through the registry (its from_config): the best checkpoint as a SavedModel
    # that answers as finetune's export does, and as a TF1 checkpoint under the names tf1_variable_map gives.
    config = tmp_path / "toy_config.json"
    config.write_text(json.dumps({"vocab_size": sum(1 for _ in open(vocab, encoding="utf-8"))}))
    proc = subprocess.run(
        [sys.executable, "-m", "textrain.trainers.convert", f"--usr_dir={USR_TOY}", f"--from_textrain={run / 'best'}",
         "--model=usr_toy_classifier", f"--config_file={config}", "--num_labels=2", f"--vocab_file={vocab}",
         "--max_seq_length=32", f"--to_saved_model={tmp_path / 'saved'}", f"--to_tf1={tmp_path / 'tf1'}"],
        cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    converted = tf.saved_model.load(str(tmp_path / "saved")).signatures["serve_text"](text_a=texts)
    np.testing.assert_allclose(converted["probabilities"].numpy(), by_text["probabilities"].numpy(), rtol=1e-6)
    tf1 = tf.train.load_checkpoint(str(tmp_path / "tf1" / "model.ckpt"))
    assert set(tf1.get_variable_to_shape_map()) == {"usr_toy/embeddings", "usr_toy/head/kernel", "usr_toy/head/bias"}

    # The same head, trained by the pretraining CLI on the records textrain-finetune made.
    proc = subprocess.run(
        [sys.executable, "-m", "textrain.trainers.train_gpu", f"--usr_dir={USR_TOY}", "--problem=tsv_classification",
         f"--data_dir={data}", "--model=usr_toy_classifier", f"--model_dir={tmp_path / 'train'}",
         "--train_batch_size=16", "--num_train_steps=4", "--learning_rate=0.05", "--num_gpus=2"],
        cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert final_figures(proc.stdout)["step"] == 4
