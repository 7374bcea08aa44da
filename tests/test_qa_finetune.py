"""QA and multiple choice through the command line a user types: textrain-finetune with the configs/
files, a few steps per model, EM/F1 in eval_results.json, predictions.json, and the exported
SavedModel's serving signature reloaded and checked against the trained model."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers import qa_fixtures

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("qa")
    return {"vocab": qa_fixtures.write_vocab(str(d / "vocab.txt")), "sp": qa_fixtures.train_spm(str(d / "sp")),
            "v1": qa_fixtures.write_squad(str(d / "v1.json")), "v2": qa_fixtures.write_squad(str(d / "v2.json"), True),
            "race": qa_fixtures.write_race(str(d / "race"))}


def _finetune(tmp_path, gin_file, *params):
    cmd = [sys.executable, "-m", "textrain.trainers.finetune", f"--gin_file=configs/{gin_file}",
           f"--gin_param=finetune.data_dir='{tmp_path}/data'", f"--gin_param=finetune.model_dir='{tmp_path}/model'",
           "--gin_param=finetune.max_seq_length=64", "--gin_param=finetune.num_train_steps=3",
           "--gin_param=finetune.train_batch_size=4", "--gin_param=finetune.eval_batch_size=3",
           *[f"--gin_param={p}" for p in params]]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert proc.returncode == 0, proc.stderr[-4000:]
    final = [line for line in proc.stdout.splitlines() if line.startswith("final ")]
    return json.loads(final[-1][len("final "):])


def _check_squad_outputs(tmp_path, summary, gold_path, v2):
    model_dir = tmp_path / "model"
    dev = json.load(open(model_dir / "eval_results.json"))["dev"][-1]
    for key in ("exact_match", "f1") + (("HasAns_f1", "NoAns_f1", "best_f1", "best_f1_thresh") if v2 else ()):
        assert key in dev and 0.0 <= dev[key] <= 100.0 or key.endswith("thresh")
    assert summary["best"]["metric"] == "f1"
    preds = json.load(open(model_dir / "predict_dev" / "predictions.json"))
    gold = json.load(open(gold_path))
    qids = {qa["id"] for a in gold["data"] for p in a["paragraphs"] for qa in p["qas"]}
    assert set(preds) == qids and all(isinstance(v, str) for v in preds.values())
    nbest = json.load(open(model_dir / "predict_dev" / "nbest_predictions.json"))
    assert set(nbest) == qids and all(abs(sum(e["probability"] for e in v) - 1) < 1e-6 for v in nbest.values())
    assert os.path.exists(model_dir / "predict_dev" / "null_odds.json") == v2
    # the metrics in eval_results.json are those of the written predictions, by the official rules
    from textrain.problems import qa_postprocess as qp
    if not v2:
        assert qp.squad_v1_metrics(qp.gold_from_dataset(gold), preds)["f1"] == pytest.approx(dev["f1"])


@pytest.mark.slow
def test_bert_squad_v2_trains_evaluates_predicts_and_exports(tmp_path, files):
    summary = _finetune(tmp_path, "bert_squad_v2.gin",
                        f"finetune.problem_hparams={{'train_file': '{files['v2']}', 'predict_file': '{files['v2']}', "
                        f"'doc_stride': 16, 'null_score_diff_threshold': 100.0}}",
                        f"finetune.vocab_file='{files['vocab']}'", "finetune.model_size='tiny'", "finetune.export=True")
    assert summary["step"] == 3 and summary["task_type"] == "span_extraction"
    _check_squad_outputs(tmp_path, summary, files["v2"], v2=True)
    # threshold 100: the null odds never exceed it, so every question gets its best non-null span. (A
    # model trained 3 steps from random init can leave a question with no valid span among its top
    # start x end logits; its n-best is then the null alone and its prediction "" — not a threshold case.)
    preds = json.load(open(tmp_path / "model" / "predict_dev" / "predictions.json"))
    nbest = json.load(open(tmp_path / "model" / "predict_dev" / "nbest_predictions.json"))
    for qid, text in preds.items():
        spans = [e["text"] for e in nbest[qid] if e["text"]]
        assert text == (spans[0] if spans else ""), qid
    assert any(preds.values())
    # the SavedModel: ids in -> start/end logits out, equal to the best checkpoint's Keras model
    from textrain.framework.problem import DataParams, ModeKeys
    from textrain.models.bert import BertConfig
    from textrain.models.qa_heads import BertSquad
    from textrain.problems.squad import SquadHParams, SquadV2

    problem = SquadV2(SquadHParams(predict_file=files["v2"], vocab_file=files["vocab"], max_seq_length=64))
    batch = next(iter(problem.dataset(ModeKeys.EVAL, str(tmp_path / "data"),
                                      DataParams(batch_size=4, drop_remainder=False))))
    model = BertSquad(BertConfig.preset("tiny", vocab_size=problem.encoder().vocab_size))
    best = json.load(open(tmp_path / "model" / "best" / "best_metrics.json"))["checkpoint"]
    tf.train.Checkpoint(model=model).read(str(tmp_path / "model" / "best" / best)).assert_existing_objects_matched()
    served = tf.saved_model.load(str(tmp_path / "model" / "export")).signatures["serving_default"](
        input_ids=batch["input_ids"], input_mask=batch["input_mask"], segment_ids=batch["segment_ids"])
    expected = model.predict_outputs(batch)
    for key in ("start_logits", "end_logits"):
        np.testing.assert_allclose(served[key].numpy(), expected[key].numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_xlnet_squad_v1_through_the_cli(tmp_path, files):
    summary = _finetune(tmp_path, "xlnet_squad_v1.gin",
                        f"finetune.problem_hparams={{'train_file': '{files['v1']}', 'predict_file': '{files['v1']}', "
                        f"'doc_stride': 16}}",
                        f"finetune.sp_model='{files['sp']}'", "finetune.model_size='tiny'")
    assert summary["step"] == 3 and "answer_class_loss" in summary["eval"]["dev"]
    _check_squad_outputs(tmp_path, summary, files["v1"], v2=False)


@pytest.mark.slow
def test_electra_squad_v2_through_the_cli(tmp_path, files):
    summary = _finetune(tmp_path, "electra_squad_v2.gin",
                        f"finetune.problem_hparams={{'train_file': '{files['v2']}', 'predict_file': '{files['v2']}', "
                        f"'doc_stride': 16}}",
                        f"finetune.vocab_file='{files['vocab']}'", "finetune.model_size='small'",
                        "finetune.model_overrides={'hidden_size': 32, 'num_hidden_layers': 2, 'embedding_size': 16, "
                        "'num_attention_heads': 2, 'intermediate_size': 64}")
    assert "answerable_loss" in summary["eval"]["dev"]  # v2 data -> ELECTRA's answerable classifier
    _check_squad_outputs(tmp_path, summary, files["v2"], v2=True)


@pytest.mark.slow
def test_electra_squad_hf_head_through_the_cli(tmp_path, files):
    """head="hf" (transformers' linear start/end layer): trains, evaluates with BERT's n-best and null score,
    predicts and exports start/end logits."""
    summary = _finetune(tmp_path, "electra_squad_v2.gin",
                        f"finetune.problem_hparams={{'train_file': '{files['v2']}', 'predict_file': '{files['v2']}', "
                        f"'doc_stride': 16}}",
                        f"finetune.vocab_file='{files['vocab']}'", "finetune.model_size='small'",
                        "finetune.model_settings={'head': 'hf'}", "finetune.export=True",
                        "finetune.model_overrides={'hidden_size': 32, 'num_hidden_layers': 2, 'embedding_size': 16, "
                        "'num_attention_heads': 2, 'intermediate_size': 64}")
    assert "answerable_loss" not in summary["eval"]["dev"] and "start_loss" in summary["eval"]["dev"]
    _check_squad_outputs(tmp_path, summary, files["v2"], v2=True)
    served = tf.saved_model.load(str(tmp_path / "model" / "export")).signatures["serving_default"]
    ids = tf.constant([[2, 7, 8, 3, 9, 10, 3]], tf.int32)
    out = served(input_ids=ids, input_mask=tf.ones_like(ids), segment_ids=tf.constant([[0, 0, 0, 0, 1, 1, 1]]))
    assert out["start_logits"].shape == (1, 7) and out["end_logits"].shape == (1, 7)


@pytest.mark.slow
def test_xlnet_race_through_the_cli(tmp_path, files):
    summary = _finetune(tmp_path, "xlnet_race.gin", f"finetune.problem_hparams={{'race_dir': '{files['race']}'}}",
                        f"finetune.sp_model='{files['sp']}'", "finetune.model_size='tiny'")
    dev = summary["eval"]["dev"]
    assert summary["num_labels"] == 4 and dev["num_examples"] == 8 and 0.0 <= dev["accuracy"] <= 1.0
    assert summary["best"]["metric"] == "accuracy"
