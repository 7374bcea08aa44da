"""trainers/run_spec.py + trainers/run.py: a RunSpec built in Python runs to the same result as the CLI
that translates its flags (textrain-train-gpu) or gin bindings (textrain-finetune) into one."""
from __future__ import annotations

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


def _weights(model_dir: str) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(model_dir))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name.startswith("model/") and "OPTIMIZER_SLOT" not in name}


def _same_weights(a: str, b: str) -> None:
    wa, wb = _weights(a), _weights(b)
    assert wa and sorted(wa) == sorted(wb)
    for name in wa:
        np.testing.assert_allclose(wa[name], wb[name], rtol=1e-6, atol=1e-7, err_msg=name)


def test_pretraining_spec_equals_the_train_gpu_cli(tmp_path):
    """The usr_dir toy problem and model: CLI and RunSpec train 6 steps to the same loss and weights."""
    from textrain.framework import registry
    from textrain.trainers.run import run
    from textrain.trainers.run_spec import ModelSpec, OptimizerSpec, ProblemSpec, RunSpec
    from textrain.trainers.train_config import TrainConfig

    data = tmp_path / "data"
    gen = subprocess.run([sys.executable, "-m", "textrain.framework.datagen", f"--usr_dir={USR_TOY}",
                          "--problem=usr_toy_problem", f"--data_dir={data}", f"--tmp_dir={tmp_path}"],
                         cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=180)
    assert gen.returncode == 0, gen.stderr[-3000:]
    cli_dir = str(tmp_path / "cli")
    proc = subprocess.run(
        [sys.executable, "-m", "textrain.trainers.train_gpu", f"--usr_dir={USR_TOY}", "--problem=usr_toy_problem",
         f"--data_dir={data}", "--model=usr_toy_model", f"--model_dir={cli_dir}", "--train_batch_size=16",
         "--num_train_steps=6", "--num_warmup_steps=1", "--learning_rate=0.1", "--iterations_per_loop=3",
         "--save_checkpoints_steps=3", "--seed=1"], cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cli = final_figures(proc.stdout)

    registry.import_usr_dir(USR_TOY)
    hparams = registry.problems.get("usr_toy_problem").HParams()
    spec_dir = str(tmp_path / "spec")
    spec = RunSpec(
        problem=ProblemSpec("usr_toy_problem", hparams), model=ModelSpec("usr_toy_model"), data_dir=str(data),
        train=TrainConfig(model_dir=spec_dir, num_train_steps=6, global_batch_size=16, iterations_per_loop=3,
                          save_checkpoints_steps=3),
        optimizer=OptimizerSpec(learning_rate=0.1, num_warmup_steps=1), seed=1)
    result = run(spec)
    assert result.step == cli["step"] == 6 and not result.preempted
    assert result.train.loss == pytest.approx(cli["loss"], rel=1e-6)
    _same_weights(cli_dir, spec_dir)
    # Resuming: the spec's own data seed (given) and checkpoint; nothing left to do at step 6.
    assert run(spec).step == 6


@pytest.fixture(scope="module")
def tsv_task(tmp_path_factory):
    from textrain.framework.encoders import build_wordpiece_vocab

    root = tmp_path_factory.mktemp("spec_ft")
    rows = emma_speech_rows()[:160]
    files = {}
    for name, part in {"train": rows[:120], "dev": rows[120:160]}.items():
        files[name] = str(root / f"{name}.tsv")
        with open(files[name], "w", encoding="utf-8") as f:
            f.write("sentence\tlabel\n" + "".join(f"{t}\t{l}\n" for t, l in part))
    vocab = build_wordpiece_vocab(os.path.join(HERE, "data", "austen_emma.txt"), vocab_size=400,
                                  out_file=str(root / "vocab.txt"))
    return root, files, vocab


def test_finetune_spec_equals_the_finetune_cli(tmp_path, tsv_task):
    """A tiny BERT classifier: textrain-finetune (gin) and a RunSpec reach the same loss, eval and weights."""
    from textrain.framework import registry
    from textrain.trainers.run import run
    from textrain.trainers.run_spec import EvalSpec, InputSpec, ModelSpec, OptimizerSpec, ProblemSpec, RunSpec
    from textrain.trainers.train_config import TrainConfig

    _, files, vocab = tsv_task
    data, overrides = tmp_path / "data", {"hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64}
    hp = {"train_file": files["train"], "dev_file": files["dev"]}
    cli_dir = str(tmp_path / "cli")
    params = ["finetune.model='bert_classifier'", "finetune.task='tsv_classification'", f"finetune.problem_hparams={hp!r}",
              f"finetune.data_dir='{data}'", f"finetune.model_dir='{cli_dir}'", f"finetune.vocab_file='{vocab}'",
              "finetune.max_seq_length=32", "finetune.train_batch_size=16", "finetune.eval_batch_size=16",
              "finetune.model_size='tiny'", f"finetune.model_overrides={overrides!r}", "finetune.num_train_steps=4",
              "finetune.learning_rate=1e-3", "finetune.seed=3"]
    proc = subprocess.run([sys.executable, "-m", "textrain.trainers.finetune", *[f"--gin_param={p}" for p in params]],
                          cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cli = final_figures(proc.stdout)

    registry.import_builtins()
    problem_cls = registry.problems.get("tsv_classification")
    hparams = problem_cls.HParams(vocab_file=vocab, max_seq_length=32, **hp)
    spec_dir = str(tmp_path / "spec")
    spec = RunSpec(  # what finetune() resolves: warmup = int(0.1 * 4) = 0, keep 2 checkpoints
        problem=ProblemSpec("tsv_classification", hparams),
        model=ModelSpec("bert_classifier", dict(num_labels=2, task_type="classification", size="tiny",
                                                overrides=overrides, task_name="tsv_classification")),
        data_dir=str(data),  # the records the CLI made
        train=TrainConfig(model_dir=spec_dir, num_train_steps=4, global_batch_size=16, keep_checkpoint_max=2),
        optimizer=OptimizerSpec(learning_rate=1e-3, num_warmup_steps=0),
        input=InputSpec(record_data_seed=False), eval=EvalSpec(enabled=True, batch_size=16), seed=3)
    result = run(spec)
    assert result.step == cli["step"] == 4
    assert result.train.loss == pytest.approx(cli["loss"], rel=1e-5)
    assert result.eval["dev"]["num_examples"] == cli["eval"]["dev"]["num_examples"] == 40
    for metric in ("accuracy", "loss"):
        assert result.eval["dev"][metric] == pytest.approx(cli["eval"]["dev"][metric], rel=1e-5)
    assert result.best["metric"] == "accuracy"
    _same_weights(cli_dir, spec_dir)


def test_flags_map_to_model_settings_by_one_adapter():
    """trainers/trainer_flags.model_settings_from_flags: set flags only, --model_size as `size`, the config-file flag
    given as `config_file`; every registered model takes the result through its one constructor."""
    import types

    from textrain.framework import registry
    from textrain.models.base import TrainableModel
    from textrain.trainers.trainer_flags import model_settings_from_flags

    flags = types.SimpleNamespace(model_size="tiny", bert_config_file=None, electra_config_file="e.json",
                                  mask_prob=None, disc_weight=20.0, n_layer=2, hparams="")
    assert model_settings_from_flags(flags) == {"size": "tiny", "config_file": "e.json", "disc_weight": 20.0,
                                                "n_layer": 2, "hparams": ""}
    registry.import_builtins()
    for name in registry.models.names():
        cls = registry.models.get(name)
        assert issubclass(cls, TrainableModel) and "from_settings" in vars(cls), name


def test_eval_on_a_pretraining_problem_is_one_user_error(tmp_path):
    """eval, predict and export need a fine-tuning task: run() says so in one line before building anything."""
    from textrain.framework import registry
    from textrain.framework.errors import UserError
    from textrain.trainers.run import run
    from textrain.trainers.run_spec import EvalSpec, ExportSpec, ModelSpec, PredictSpec, ProblemSpec, RunSpec
    from textrain.trainers.train_config import TrainConfig

    registry.import_usr_dir(USR_TOY)
    for part in (dict(eval=EvalSpec(enabled=True)), dict(predict=PredictSpec(enabled=True)),
                 dict(export=ExportSpec(enabled=True))):
        spec = RunSpec(problem=ProblemSpec("usr_toy_problem"), model=ModelSpec("usr_toy_model"),
                       data_dir=str(tmp_path / "data"),
                       train=TrainConfig(model_dir=str(tmp_path / "run"), num_train_steps=1), **part)
        with pytest.raises(UserError, match="'usr_toy_problem' is not a fine-tuning task") as raised:
            run(spec)
        assert "\n" not in str(raised.value)
        assert not (tmp_path / "run").exists()


def test_finetune_on_a_pretraining_problem_is_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "textrain.trainers.finetune", f"--gin_param=finetune.usr_dir='{USR_TOY}'",
         "--gin_param=finetune.model='bert_classifier'", "--gin_param=finetune.task='usr_toy_problem'",
         f"--gin_param=finetune.data_dir='{tmp_path / 'data'}'", f"--gin_param=finetune.model_dir='{tmp_path / 'm'}'"],
        cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("textrain-finetune: error:") and "'usr_toy_problem' is not a fine-tuning task" in last


def test_the_plain_spec_imports_no_tensorflow():
    code = ("import sys, textrain.trainers.run_spec, textrain.trainers.train_config; "
            "sys.exit('tensorflow' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO, env=cli_env(), timeout=120).returncode == 0
