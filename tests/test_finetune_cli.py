"""textrain-finetune (trainers/finetune.py) and the fine-tuning side of textrain-train-gpu, as real
subprocesses on tsv_classification records made from the bundled Emma sample (task: is a sentence
speech or narration, quote marks removed)."""
from __future__ import annotations

import glob
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
EMMA = os.path.join(HERE, "data", "austen_emma.txt")
CONFIGS = sorted(glob.glob(os.path.join(REPO, "configs", "*.gin")))


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    """train/dev/test TSVs, a WordPiece vocab and a SentencePiece model."""
    from textrain.framework.encoders import build_wordpiece_vocab, train_sentencepiece

    root = tmp_path_factory.mktemp("ft")
    rows = emma_speech_rows()[:400]
    parts = {"train": rows[:240], "dev": rows[240:300], "test": rows[300:330]}
    files = {}
    for name, part in parts.items():
        files[name] = str(root / f"{name}.tsv")
        with open(files[name], "w", encoding="utf-8") as f:
            f.write("sentence\tlabel\n" + "".join(f"{t}\t{l}\n" for t, l in part))
    vocab = build_wordpiece_vocab(EMMA, vocab_size=800, out_file=str(root / "vocab.txt"))
    sp = train_sentencepiece(EMMA, str(root / "sp"), vocab_size=600, hard_vocab_limit=False, num_threads=1)
    return {"root": root, "files": files, "vocab": vocab, "sp": sp, "test_rows": parts["test"]}


def finetune(*params: str, files: list[str] = ()) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "textrain.trainers.finetune", *[f"--gin_file={f}" for f in files],
           *[f"--gin_param={p}" for p in params]]
    return subprocess.run(cmd, cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=600)


def _task_params(task, data_dir, model_dir, test=False) -> list[str]:
    hp = {"train_file": task["files"]["train"], "dev_file": task["files"]["dev"]}
    if test:
        hp["test_file"] = task["files"]["test"]
    return ["finetune.task='tsv_classification'", f"finetune.problem_hparams={hp!r}",
            f"finetune.data_dir='{data_dir}'", f"finetune.model_dir='{model_dir}'", "finetune.max_seq_length=32",
            "finetune.train_batch_size=16", "finetune.eval_batch_size=16", "finetune.log_steps=5"]


# ------------------------------------------------------------------------------------------ fast
@pytest.mark.parametrize("path", CONFIGS, ids=[os.path.basename(p) for p in CONFIGS])
def test_every_config_parses(path):
    import gin

    from textrain.trainers import finetune as ft

    gin.clear_config()
    try:
        ft.parse_gin([path], ["finetune.data_dir='d'", "finetune.model_dir='m'"])
        from textrain.framework import registry

        registry.import_builtins()
        name = os.path.basename(path)
        is_task = name.startswith(("glue_", "tsv_")) or name in ("squad_v1.gin", "squad_v2.gin", "race.gin",
                                                                                 "tagging.gin")
        if is_task:
            assert gin.query_parameter("finetune.task") in registry.problems
        else:  # a model file, alone or combined with a task file
            model = gin.query_parameter("finetune.model")
            assert model in registry.models and model.endswith(("_classifier", "_squad", "_race", "_tagger"))
    finally:
        gin.clear_config()


def test_configs_cover_every_family_size_and_task():
    names = {os.path.basename(p)[:-4] for p in CONFIGS}
    assert {"bert_base", "bert_large", "bert_small", "electra_small", "electra_base", "electra_large", "xlnet_base",
            "xlnet_large", "tsv_classification"} <= names
    assert {f"glue_{t}" for t in ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli")} <= names


def test_misspelled_binding_is_one_line_naming_it():
    proc = finetune("finetune.lerning_rate=1e-4")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("textrain-finetune: error:") and "lerning_rate" in lines[-1]
    assert "Traceback" not in proc.stderr


def test_config_includes_raise_no_false_gin_errors():
    """configs/bert_base.gin includes _bert.gin: gin's package-resource probe used to log 'Path not found:
    _bert.gin' as an ERROR before the file reader found it. The run still stops at the misspelled binding."""
    proc = finetune("finetune.lerning_rate=1e-4", files=[os.path.join(REPO, "configs", "bert_base.gin")])
    assert proc.returncode == 1 and "lerning_rate" in proc.stderr.strip().splitlines()[-1]
    assert "Path not found" not in proc.stderr


def test_missing_required_value_is_one_line_naming_it(tmp_path):
    proc = finetune("finetune.model='bert_classifier'", "finetune.task='tsv_classification'",
                    f"finetune.model_dir='{tmp_path}'")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("textrain-finetune: error:") and "data_dir" in last


def test_unknown_problem_setting_is_one_line(tmp_path, task):
    proc = finetune("finetune.model='bert_classifier'", *_task_params(task, tmp_path / "d", tmp_path / "m"),
                    "finetune.problem_hparams={'train_fil': 'x'}")
    assert proc.returncode == 1 and "train_fil" in proc.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("model", ["bert_classifier", "electra_classifier", "xlnet_classifier"])
def test_a_misspelt_model_override_is_one_line_naming_it(tmp_path, task, model):
    """Every family refuses a model_overrides key its config does not have (BERT used to log and drop it)."""
    vocab = [f"finetune.vocab_file='{task['vocab']}'"] if model != "xlnet_classifier" else [
        f"finetune.sp_model='{task['sp']}'"]
    proc = finetune(f"finetune.model='{model}'", *_task_params(task, tmp_path / "d", tmp_path / "m"), *vocab,
                    "finetune.model_overrides={'num_hiden_layers': 3}")
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert last.startswith("textrain-finetune: error:") and "num_hiden_layers" in last


def test_a_bad_tsv_row_names_the_setting_as_finetune_takes_it(tmp_path, task):
    bad = tmp_path / "bad.tsv"
    bad.write_text("sentence\tlabel\nEmma was rich.\tnarration\nA row with no label\n", encoding="utf-8")
    hp = {"train_file": str(bad)}
    proc = finetune("finetune.model='bert_classifier'", "finetune.task='tsv_classification'",
                    f"finetune.problem_hparams={hp!r}", f"finetune.vocab_file='{task['vocab']}'",
                    f"finetune.data_dir='{tmp_path / 'd'}'", f"finetune.model_dir='{tmp_path / 'm'}'")
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and f"{bad}:3:" in last, proc.stderr[-2000:]
    assert "finetune.problem_hparams={'on_bad_row': 'skip'}" in last


# ------------------------------------------------------------------------------------------ slow
@pytest.mark.slow
def test_bert_cli_trains_evaluates_predicts_and_exports(tmp_path, task):
    run = tmp_path / "run"
    proc = finetune(*_task_params(task, tmp_path / "data", run, test=True),
                    "finetune.model_size='tiny'", "finetune.model_overrides={'hidden_size': 32, 'num_attention_heads': 2, "
                    "'intermediate_size': 64}", f"finetune.vocab_file='{task['vocab']}'", "finetune.num_train_steps=20",
                    "finetune.eval_every_steps=10", "finetune.learning_rate=1e-3", "finetune.do_predict=True",
                    "finetune.export=True", files=[os.path.join(REPO, "configs", "bert_base.gin"),
                                                   os.path.join(REPO, "configs", "tsv_classification.gin")])
    assert proc.returncode == 0, proc.stderr[-3000:]
    final = final_figures(proc.stdout)
    assert final["step"] == 20
    # eval results per split per step, TensorBoard, best checkpoint with its metrics
    results = json.load(open(run / "eval_results.json"))
    assert [e["step"] for e in results["dev"]] == [10, 20] and results["dev"][0]["num_examples"] == 60
    assert {"accuracy", "f1", "mcc", "loss"} <= set(results["dev"][-1])
    best = json.load(open(run / "best" / "best_metrics.json"))
    assert best["metric"] == "accuracy" and best["value"] == max(e["accuracy"] for e in results["dev"])
    assert glob.glob(str(run / "best" / "ckpt-*.index")) and glob.glob(str(run / "eval_dev" / "events.*"))
    assert tf.train.latest_checkpoint(str(run / "best")) == str(run / "best" / best["checkpoint"])  # run/best reads
    operative = open(run / "operative_config.gin").read()
    assert "finetune.learning_rate = 0.001" in operative and "finetune.warmup_proportion = 0.1" in operative
    # predictions in input order, tsv = jsonl
    lines = open(run / "predict_test.jsonl").read().splitlines()
    rows = [json.loads(line) for line in lines]
    assert [r["example_index"] for r in rows] == list(range(len(task["test_rows"])))
    tsv = np.loadtxt(run / "predict_test.tsv", delimiter="\t")
    np.testing.assert_allclose(tsv, [r["probabilities"] for r in rows], atol=1e-6)
    # The SavedModel (best checkpoint) reloads; raw strings in == ids in, for the same text
    loaded = tf.saved_model.load(str(run / "export"))
    texts = tf.constant([t for t, _ in task["test_rows"][:4]])
    by_text = loaded.signatures["serve_text"](text_a=texts)
    from textrain.framework.graph_wordpiece import GraphWordpieceTokenizer

    ids = GraphWordpieceTokenizer(task["vocab"], do_lower_case=True, max_seq_length=32)(texts)
    by_ids = loaded.signatures["serving_default"](**{k: tf.cast(v, tf.int32) for k, v in ids.items()})
    np.testing.assert_allclose(by_text["probabilities"].numpy(), by_ids["probabilities"].numpy(), rtol=1e-6)
    assert set(s.decode() for s in by_text["label"].numpy()) <= {"speech", "narration"}


@pytest.mark.slow
@pytest.mark.parametrize("family", ["electra", "xlnet"])
def test_electra_and_xlnet_cli_run_a_few_steps(tmp_path, task, family):
    if family == "electra":
        extra = ["finetune.model='electra_classifier'", f"finetune.vocab_file='{task['vocab']}'",
                 "finetune.model_overrides={'hidden_size': 32, 'num_hidden_layers': 2, 'num_attention_heads': 2, "
                 "'intermediate_size': 64, 'embedding_size': 16}", "finetune.layerwise_lr_decay=0.8"]
    else:
        extra = ["finetune.model='xlnet_classifier'", f"finetune.sp_model='{task['sp']}'", "finetune.optimizer='adam'",
                 "finetune.model_overrides={'n_layer': 2, 'd_model': 32, 'n_head': 2, 'd_head': 16, 'd_inner': 64}"]
    proc = finetune(*_task_params(task, tmp_path / "data", tmp_path / "run"), *extra, "finetune.num_train_steps=6",
                    "finetune.learning_rate=1e-3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    final = final_figures(proc.stdout)
    assert final["step"] == 6 and final["eval"]["dev"]["num_examples"] == 60
    assert 0.0 <= final["eval"]["dev"]["accuracy"] <= 1.0


@pytest.mark.slow
def test_train_gpu_builds_a_classifier_and_layerwise_decay_reaches_the_optimizer(tmp_path, task):
    data = tmp_path / "data"
    gen = subprocess.run([sys.executable, "-m", "textrain.framework.datagen", "--problem=tsv_classification",
                          f"--data_dir={data}", f"--train_file={task['files']['train']}",
                          f"--dev_file={task['files']['dev']}", f"--vocab_file={task['vocab']}", "--max_seq_length=32"],
                         cwd=REPO, env=cli_env(), capture_output=True, text=True)
    assert gen.returncode == 0, gen.stderr[-2000:]

    def train(tag: str, *extra: str) -> dict:
        proc = subprocess.run([sys.executable, "-m", "textrain.trainers.train_gpu", "--problem=tsv_classification",
                               f"--data_dir={data}", "--model=bert_classifier", "--model_size=tiny",
                               f"--model_dir={tmp_path / tag}", "--train_batch_size=8", "--num_train_steps=1",
                               "--num_warmup_steps=0", "--seed=3", "--weight_decay=0", "--clip_norm=0", *extra],
                              cwd=REPO, env=cli_env(), capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-3000:]
        # Restore into a BertClassifier: every object must match (a pretrainer would not).
        import textrain.models as models  # noqa: F401
        from textrain.models.bert import BertClassifier, BertConfig

        manifest = json.load(open(data / "tsv_classification" / "tsv_classification-train.manifest.json"))
        clf = BertClassifier(BertConfig.preset("tiny", vocab_size=manifest["settings"]["vocab_size"]), num_labels=2)
        status = tf.train.Checkpoint(model=clf).read(tf.train.latest_checkpoint(str(tmp_path / tag)))
        status.expect_partial().assert_existing_objects_matched()
        return {"emb": clf.bert.embeddings.word_embeddings.numpy(), "top": clf.classifier.output_weights.numpy()}

    init = train("init", "--learning_rate=0")
    plain = train("plain", "--learning_rate=1e-3")
    decayed = train("decayed", "--learning_rate=1e-3", "--layerwise_lr_decay=0.5")
    # ELECTRA's depths for 2 layers: embeddings 0, head 4 -> the embeddings' step is 0.5**4 of the plain one.
    np.testing.assert_allclose(decayed["top"] - init["top"], plain["top"] - init["top"], rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(decayed["emb"] - init["emb"], 0.5 ** 4 * (plain["emb"] - init["emb"]), rtol=1e-3, atol=1e-7)
    assert np.abs(plain["emb"] - init["emb"]).max() > 1e-4


@pytest.mark.slow
def test_train_gpu_do_eval_reports_pretraining_metrics_on_dev(tmp_path):
    data, run = tmp_path / "data", tmp_path / "run"
    gen = subprocess.run([sys.executable, "-m", "textrain.framework.datagen", "--problem=bert_pretrain", f"--input_file={EMMA}",
                          f"--data_dir={data}", "--vocab_size=600", "--max_seq_length=32", "--max_predictions_per_seq=5",
                          "--dev_fraction=0.2", "--dupe_factor=1"], cwd=REPO, env=cli_env(), capture_output=True, text=True)
    assert gen.returncode == 0, gen.stderr[-2000:]
    proc = subprocess.run([sys.executable, "-m", "textrain.trainers.train_gpu", "--problem=bert_pretrain", "--model=bert",
                           "--model_size=tiny", f"--data_dir={data}", f"--model_dir={run}", "--max_seq_length=32",
                           "--max_predictions_per_seq=5", "--train_batch_size=16", "--num_train_steps=2", "--do_eval",
                           "--max_eval_steps=3", "--num_gpus=2"], cwd=REPO, env=cli_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    dev = json.load(open(run / "eval_results.json"))["dev"][-1]
    assert dev["step"] == 2 and dev["num_examples"] == 24  # 3 global batches of 8 (eval_batch_size), 2 replicas
    assert {"mlm_accuracy", "mlm_loss", "nsp_accuracy", "loss"} <= set(dev)
    assert dev["loss"] == pytest.approx(dev["mlm_loss"] + dev["nsp_loss"])
