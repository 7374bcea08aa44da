"""Checkpoint exchange with the Hugging Face format (models/hf_format.py, trainers/convert.py), against
fixtures transformers itself wrote (tests/data/hf/make_fixtures.py: tiny random models, their inputs and
transformers' outputs). Needs only safetensors."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import load_file

from textrain.framework.errors import UserError
from textrain.models import hf_format
from textrain.models.checkpoints import CheckpointMismatchError
from textrain.trainers import convert

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "data", "hf")
BERT_ARCHS = ("BertModel", "BertForPreTraining", "BertForMaskedLM", "BertForSequenceClassification",
              "BertForQuestionAnswering")
TOL = 1e-5


def fixture(arch: str) -> str:
    return os.path.join(FIXTURES, arch)


def io(arch: str) -> dict[str, np.ndarray]:
    return load_file(os.path.join(fixture(arch), "io.safetensors"))


def textrain_outputs(model, arch: str, x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The fixture's outputs as the textrain model computes them (names as transformers')."""
    ids = tf.constant(x["input_ids"], tf.int32)
    mask = tf.constant(x["attention_mask"], tf.int32)
    types = tf.constant(x["token_type_ids"], tf.int32)
    sequence, pooled = model.bert(ids, mask, types)
    out = {"sequence_output": sequence}
    if arch == "BertModel":
        out.update(last_hidden_state=sequence, pooler_output=pooled)
    elif arch == "BertForPreTraining":
        out.update(prediction_logits=model.masked_lm(sequence), seq_relationship_logits=model.next_sentence(pooled))
    elif arch == "BertForMaskedLM":
        out.update(logits=model.masked_lm(sequence))
    elif arch == "BertForSequenceClassification":
        out.update(logits=model.logits({"input_ids": ids, "input_mask": mask, "segment_ids": types}))
    elif arch == "BertForQuestionAnswering":
        out.update(model({"input_ids": ids, "input_mask": mask, "segment_ids": types}))
    return {k: np.asarray(v) for k, v in out.items()}


def assert_outputs_match(model, arch: str) -> None:
    expected = io(arch)
    got = textrain_outputs(model, arch, expected)
    names = sorted(k[len("out."):] for k in expected if k.startswith("out."))
    assert names and set(names) <= set(got), (names, sorted(got))
    for name in names:
        want = expected[f"out.{name}"]
        if name in ("sequence_output", "last_hidden_state", "prediction_logits", "logits") and want.ndim == 3:
            real = expected["attention_mask"].astype(bool)  # padded positions' states are not defined the same
            np.testing.assert_allclose(got[name][real], want[real], atol=TOL, err_msg=f"{arch} {name}")
        else:
            np.testing.assert_allclose(got[name], want, atol=TOL, err_msg=f"{arch} {name}")


@pytest.mark.parametrize("arch", BERT_ARCHS)
def test_import_matches_transformers(arch):
    exchange = convert.read_hf(fixture(arch))
    model = convert.load_into_model(exchange, fixture(arch))
    assert_outputs_match(model, arch)


@pytest.mark.parametrize("arch", BERT_ARCHS)
def test_to_textrain_then_to_hf_is_exact(arch, tmp_path):
    lines = convert.convert(from_hf=fixture(arch), to_textrain=str(tmp_path / "tr"))
    assert (tmp_path / "tr" / "textrain_model.json").exists() and (tmp_path / "tr" / "vocab.txt").exists()
    if arch in hf_format.ABSENT_PARTS:
        assert "freshly initialised" in lines[0]
    convert.convert(from_textrain=str(tmp_path / "tr"), to_hf=str(tmp_path / "hf"))
    assert_same_hf(fixture(arch), str(tmp_path / "hf"))


def assert_same_tensors(want_dir: str, got_dir: str) -> None:
    want = hf_format.read_hf_directory(want_dir).tensors
    got = hf_format.read_hf_directory(got_dir).tensors
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name].shape == want[name].shape, name
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def assert_same_hf(want_dir: str, got_dir: str) -> None:
    assert_same_tensors(want_dir, got_dir)
    want_config = hf_format.read_config(want_dir)
    got_config = hf_format.read_config(got_dir)
    fields = hf_format.BERT_FIELDS + ("architectures", "model_type", "hidden_act", "layer_norm_eps")
    assert {k: got_config[k] for k in fields} == {k: want_config[k] for k in fields}
    if want_config["architectures"] == ["BertForSequenceClassification"]:
        assert hf_format.num_labels(got_config) == hf_format.num_labels(want_config)
    for name in ("vocab.txt", "tokenizer_config.json"):
        with open(os.path.join(want_dir, name), "rb") as a, open(os.path.join(got_dir, name), "rb") as b:
            assert a.read() == b.read(), name


@pytest.mark.parametrize("arch", ("BertForPreTraining", "BertForSequenceClassification", "BertForQuestionAnswering"))
def test_round_trip_through_tf1_is_exact(arch, tmp_path):
    convert.convert(from_hf=fixture(arch), to_textrain=str(tmp_path / "a"))
    convert.convert(from_textrain=str(tmp_path / "a"), to_tf1=str(tmp_path / "tf1"))
    convert.convert(from_tf1=str(tmp_path / "tf1" / "model.ckpt"), config_file=str(tmp_path / "tf1" / "bert_config.json"),
                    vocab_file=str(tmp_path / "tf1" / "vocab.txt"), to_textrain=str(tmp_path / "b"),
                    to_hf=str(tmp_path / "hf_direct"))
    convert.convert(from_textrain=str(tmp_path / "b"), to_hf=str(tmp_path / "hf"))
    load = lambda d: load_file(os.path.join(d, "model.safetensors"))
    want, got, direct = load(fixture(arch)), load(str(tmp_path / "hf")), load(str(tmp_path / "hf_direct"))
    assert sorted(got) == sorted(want) == sorted(direct)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
        np.testing.assert_array_equal(direct[name], want[name], err_msg=name)


def test_from_tf1_equals_from_hf(tmp_path):
    """An original-layout checkpoint (the TF1 names models/hf_format.py maps to) converts to the same HF
    directory as its HF counterpart."""
    from textrain.models.checkpoints import write_tf1_checkpoint
    arch = "BertForPreTraining"
    exchange = convert.read_hf(fixture(arch))
    write_tf1_checkpoint(str(tmp_path / "bert_model.ckpt"), exchange.values)
    with open(tmp_path / "bert_config.json", "w") as f:
        json.dump(exchange.config, f)
    convert.convert(from_tf1=str(tmp_path / "bert_model.ckpt"), config_file=str(tmp_path / "bert_config.json"),
                    vocab_file=os.path.join(fixture(arch), "vocab.txt"), to_hf=str(tmp_path / "hf"))
    want = load_file(os.path.join(fixture(arch), "model.safetensors"))
    got = load_file(str(tmp_path / "hf" / "model.safetensors"))
    assert sorted(got) == sorted(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_sharded_directory_reads_like_one_file(tmp_path):
    from safetensors.numpy import save_file
    arch = "BertForPreTraining"
    tensors = load_file(os.path.join(fixture(arch), "model.safetensors"))
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, part in shards.items():
        save_file({n: tensors[n] for n in part}, str(tmp_path / file), metadata={"format": "pt"})
    with open(tmp_path / "model.safetensors.index.json", "w") as f:
        json.dump({"weight_map": {n: file for file, part in shards.items() for n in part}}, f)
    for name in ("config.json", "vocab.txt", "tokenizer_config.json"):
        shutil.copy(os.path.join(fixture(arch), name), tmp_path / name)
    model = convert.load_into_model(convert.read_hf(str(tmp_path)), str(tmp_path))
    assert_outputs_match(model, arch)


# ------------------------------------------------------------------------------------ init_checkpoint
def test_max_shard_size_writes_shards_that_read_back(tmp_path):
    """--max_shard_size (as save_pretrained's) writes model-0000i-of-0000n.safetensors and the index; they read
    back to the same tensors, and a size that is not one is one line."""
    arch = "BertForPreTraining"
    proc = _run_cli("textrain.trainers.convert", f"--from_hf={fixture(arch)}", f"--to_hf={tmp_path / 'sharded'}",
                    "--max_shard_size=10KB")
    assert proc.returncode == 0, proc.stderr[-3000:]
    index = json.load(open(tmp_path / "sharded" / "model.safetensors.index.json"))
    files = sorted(set(index["weight_map"].values()))
    assert len(files) >= 3 and files == sorted(p for p in os.listdir(tmp_path / "sharded") if p.startswith("model-"))
    assert files[0] == f"model-00001-of-{len(files):05d}.safetensors"
    assert not (tmp_path / "sharded" / "model.safetensors").exists()
    for file in files:
        assert os.path.getsize(tmp_path / "sharded" / file) <= 10_000 + 2_000  # + the safetensors header
    sizes = [v.size * 4 for v in hf_format.read_hf_directory(str(tmp_path / "sharded")).tensors.values()]
    assert index["metadata"]["total_size"] == sum(sizes)
    assert_same_hf(fixture(arch), str(tmp_path / "sharded"))
    convert.convert(from_hf=str(tmp_path / "sharded"), to_textrain=str(tmp_path / "tr"))
    convert.convert(from_textrain=str(tmp_path / "tr"), to_hf=str(tmp_path / "one"))
    assert_same_hf(fixture(arch), str(tmp_path / "one"))
    assert (tmp_path / "one" / "model.safetensors").exists()
    proc = _run_cli("textrain.trainers.convert", f"--from_hf={fixture(arch)}", f"--to_hf={tmp_path / 'bad'}",
                    "--max_shard_size=lots")
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1].startswith(
        "textrain-convert: error: --max_shard_size=lots: expected a positive size")
    assert not (tmp_path / "bad").exists()


def test_classifier_init_checkpoint_reads_hf_directory():
    """finetune.init_checkpoint / --init_checkpoint of a fine-tuning model: the encoder from an HF
    directory; the head fresh by default, the HF classifier's head with init_head=True."""
    from textrain.models.bert import BertClassifier
    arch = "BertForSequenceClassification"
    exchange = convert.read_hf(fixture(arch))
    model = BertClassifier(convert.build_model("bert", exchange.config).config, num_labels=3)
    fresh_head = model.classifier.output_weights.numpy().copy()
    loaded = model.load_init_checkpoint(fixture(arch))
    assert "bert/pooler/dense/kernel" in loaded and "output_weights" not in loaded
    np.testing.assert_array_equal(model.classifier.output_weights.numpy(), fresh_head)
    model.load_init_checkpoint(fixture(arch), init_head=True)
    assert_outputs_match(model, arch)


def test_pretrainer_tf1_map_reads_hf_directory():
    """--init_checkpoint of a pretraining run (trainers/core.py reads TF1 releases with load_tf1_checkpoint)."""
    from textrain.models.checkpoints import load_tf1_checkpoint
    arch = "BertForPreTraining"
    model = convert.build_model("bert", convert.read_hf(fixture(arch)).config)
    load_tf1_checkpoint(fixture(arch), model.tf1_variable_map())
    assert_outputs_match(model, arch)


def test_trainer_init_checkpoint_reads_hf_directory(tmp_path):
    from textrain.trainers import core
    from textrain.trainers.train_config import TrainConfig
    arch = "BertForPreTraining"
    model = convert.build_model("bert", convert.read_hf(fixture(arch)).config)
    trainer = core.Trainer.__new__(core.Trainer)  # only the init path: no strategy, data or optimizer
    trainer.model = model
    trainer.config = TrainConfig(model_dir=str(tmp_path), num_train_steps=1, init_checkpoint=fixture(arch))
    trainer._load_init_checkpoint(fixture(arch))
    assert_outputs_match(model, arch)


# ------------------------------------------------------------------------------------ errors
def _copy_fixture(arch: str, to) -> str:
    shutil.copytree(fixture(arch), to)
    return str(to)


def _edit(path: str, change) -> None:
    from safetensors.numpy import save_file
    tensors = load_file(os.path.join(path, "model.safetensors"))
    change(tensors)
    save_file(tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})


def _one_line_error(tmp_path, **kwargs) -> str:
    out = tmp_path / "out"
    with pytest.raises(UserError) as e:
        convert.convert(to_textrain=str(out), to_hf=str(tmp_path / "out_hf"), **kwargs)
    assert not out.exists() and not (tmp_path / "out_hf").exists()
    assert not [p for p in os.listdir(tmp_path) if "incomplete" in p]
    return str(e.value)


def test_unknown_architecture(tmp_path):
    path = _copy_fixture("BertModel", tmp_path / "m")
    config = hf_format.read_config(path)
    config["architectures"] = ["RobertaModel"]
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    message = _one_line_error(tmp_path, from_hf=path)
    assert "RobertaModel is not one textrain converts" in message and "BertForPreTraining" in message


def test_missing_and_extra_tensors_listed(tmp_path):
    path = _copy_fixture("BertForPreTraining", tmp_path / "m")
    _edit(path, lambda t: t.pop("bert.encoder.layer.1.output.LayerNorm.bias"))
    message = _one_line_error(tmp_path, from_hf=path)
    assert "missing from checkpoint (1): bert/encoder/layer_1/output/LayerNorm/beta" in message
    assert "\n" not in message
    path = _copy_fixture("BertForPreTraining", tmp_path / "n")
    _edit(path, lambda t: t.update({"bert.encoder.layer.2.output.dense.bias": np.zeros(16, np.float32)}))
    message = _one_line_error(tmp_path, from_hf=path)
    assert "bert.encoder.layer.2.output.dense.bias" in message and "\n" not in message


def test_shape_mismatch(tmp_path):
    path = _copy_fixture("BertModel", tmp_path / "m")
    _edit(path, lambda t: t.update({"pooler.dense.bias": np.zeros(17, np.float32)}))
    with pytest.raises(CheckpointMismatchError, match=r"bert/pooler/dense/bias: checkpoint \(17,\) vs model \(16,\)"):
        convert.convert(from_hf=path, to_textrain=str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_vocabulary_disagrees_with_embedding(tmp_path):
    path = _copy_fixture("BertModel", tmp_path / "m")
    with open(os.path.join(path, "vocab.txt"), "a") as f:
        f.write("extra\n")
    message = _one_line_error(tmp_path, from_hf=path)
    assert "100 entries but the word embedding has 99 rows" in message


def test_pickled_weights_refused_with_the_command(tmp_path):
    path = tmp_path / "m"
    path.mkdir()
    shutil.copy(os.path.join(fixture("BertModel"), "config.json"), path / "config.json")
    (path / "pytorch_model.bin").write_bytes(b"not unpickled")
    message = _one_line_error(tmp_path, from_hf=str(path))
    assert "does not unpickle" in message and "save_pretrained" in message and "\n" not in message


# ------------------------------------------------------------------------------------ ELECTRA
def electra_outputs(model, network: str, x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """transformers' outputs of the discriminator (ElectraForPreTraining) or generator (ElectraForMaskedLM)."""
    args = [tf.constant(x[k], tf.int32) for k in ("input_ids", "attention_mask", "token_type_ids")]
    if network == "discriminator":
        sequence = model.discriminator(*args)
        return {"sequence_output": np.asarray(sequence), "logits": np.asarray(model.discriminator_head(sequence))}
    sequence = model.generator(*args)
    return {"sequence_output": np.asarray(sequence), "logits": np.asarray(model.generator_head(sequence))}


def assert_electra_matches(model) -> None:
    for arch, network in (("ElectraForPreTraining", "discriminator"), ("ElectraForMaskedLM", "generator")):
        expected = io(arch)
        got = electra_outputs(model, network, expected)
        real = expected["attention_mask"].astype(bool)
        for name in ("sequence_output", "logits"):
            np.testing.assert_allclose(got[name][real], expected[f"out.{name}"][real], atol=TOL,
                                       err_msg=f"{arch} {name}")


def test_electra_discriminator_and_generator_combine(tmp_path):
    exchange = convert.read_hf(fixture("ElectraForPreTraining"), fixture("ElectraForMaskedLM"))
    assert exchange.config["generator_hidden_size"] == 0.5 and exchange.config["embedding_size"] == 8
    assert_electra_matches(convert.load_into_model(exchange, "fixtures"))
    # One textrain pretraining checkpoint, split back into the two HF directories exactly.
    lines = convert.convert(from_hf=fixture("ElectraForPreTraining"), hf_generator=fixture("ElectraForMaskedLM"),
                            to_textrain=str(tmp_path / "tr"))
    assert "freshly" not in lines[0]
    convert.convert(from_textrain=str(tmp_path / "tr"), to_hf=str(tmp_path / "disc"),
                    to_hf_generator=str(tmp_path / "gen"))
    for arch, out in (("ElectraForPreTraining", "disc"), ("ElectraForMaskedLM", "gen")):
        want = load_file(os.path.join(fixture(arch), "model.safetensors"))
        got = load_file(str(tmp_path / out / "model.safetensors"))
        assert sorted(got) == sorted(want)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"{arch} {name}")
        want_config, got_config = hf_format.read_config(fixture(arch)), hf_format.read_config(str(tmp_path / out))
        fields = hf_format.BERT_FIELDS + ("architectures", "model_type", "hidden_act", "embedding_size")
        assert {k: got_config[k] for k in fields} == {k: want_config[k] for k in fields}
    # ... and through the originals' layout.
    convert.convert(from_textrain=str(tmp_path / "tr"), to_tf1=str(tmp_path / "tf1"))
    convert.convert(from_tf1=str(tmp_path / "tf1" / "model.ckpt"), config_file=str(tmp_path / "tf1" / "electra_config.json"),
                    to_hf_generator=str(tmp_path / "gen2"))
    want = load_file(os.path.join(fixture("ElectraForMaskedLM"), "model.safetensors"))
    got = load_file(str(tmp_path / "gen2" / "model.safetensors"))
    assert all(np.array_equal(got[n], want[n]) for n in want) and sorted(got) == sorted(want)


def test_electra_discriminator_alone_says_the_generator_is_fresh(tmp_path):
    lines = convert.convert(from_hf=fixture("ElectraForPreTraining"), to_textrain=str(tmp_path / "tr"))
    assert "freshly initialised" in lines[0] and "generator/encoder/layer_0" in lines[0]
    with pytest.raises(UserError, match="generator alone"):
        convert.convert(from_hf=fixture("ElectraForMaskedLM"), to_textrain=str(tmp_path / "x"))


def test_electra_generator_with_other_embeddings_refused(tmp_path):
    path = _copy_fixture("ElectraForMaskedLM", tmp_path / "g")
    _edit(path, lambda t: t.update({"electra.embeddings.LayerNorm.bias": t["electra.embeddings.LayerNorm.bias"] + 1}))
    message = _one_line_error(tmp_path, from_hf=fixture("ElectraForPreTraining"), hf_generator=path)
    assert "embeddings differ" in message and "electra/embeddings/LayerNorm/beta" in message


ELECTRA_HF_HEADS = ("ElectraForSequenceClassification", "ElectraForQuestionAnswering")


def _bert_features(x: dict[str, np.ndarray]) -> dict[str, tf.Tensor]:
    return {"input_ids": tf.constant(x["input_ids"], tf.int32), "input_mask": tf.constant(x["attention_mask"], tf.int32),
            "segment_ids": tf.constant(x["token_type_ids"], tf.int32)}


@pytest.mark.parametrize("arch", ELECTRA_HF_HEADS)
def test_electra_hf_heads_match_transformers_and_round_trip(arch, tmp_path):
    """transformers' ELECTRA heads (unlike the original's) are the textrain models' head="hf": same outputs,
    and HF -> textrain -> HF, and through the originals' layout, give the same tensors."""
    exchange = convert.read_hf(fixture(arch))
    assert exchange.head == "hf"
    model = convert.load_into_model(exchange, fixture(arch))
    assert model.head_variant == "hf"
    x = io(arch)
    got = model.predict_outputs(_bert_features(x))
    names = [k[len("out."):] for k in x if k.startswith("out.") and k != "out.sequence_output"]
    assert names
    for name in names:
        np.testing.assert_allclose(np.asarray(got[name]), x[f"out.{name}"], atol=TOL, err_msg=f"{arch} {name}")
    convert.convert(from_hf=fixture(arch), to_textrain=str(tmp_path / "tr"), to_tf1=str(tmp_path / "tf1"))
    convert.convert(from_textrain=str(tmp_path / "tr"), to_hf=str(tmp_path / "hf"))
    assert_same_hf(fixture(arch), str(tmp_path / "hf"))
    convert.convert(from_tf1=str(tmp_path / "tf1" / "model.ckpt"), config_file=str(tmp_path / "tf1" / "electra_config.json"),
                    vocab_file=str(tmp_path / "tf1" / "vocab.txt"), to_hf=str(tmp_path / "hf_tf1"))
    assert_same_tensors(fixture(arch), str(tmp_path / "hf_tf1"))
    convert.convert(from_hf=fixture(arch), to_saved_model=str(tmp_path / "export"), max_seq_length=16)
    served = tf.saved_model.load(str(tmp_path / "export")).signatures["serving_default"]
    out = served(input_ids=tf.constant(x["input_ids"], tf.int32), input_mask=tf.constant(x["attention_mask"], tf.int32),
                 segment_ids=tf.constant(x["token_type_ids"], tf.int32))
    for name in names:
        np.testing.assert_allclose(out[name].numpy(), x[f"out.{name}"], atol=TOL, err_msg=f"export {name}")


@pytest.mark.parametrize("arch", ELECTRA_HF_HEADS)
def test_electra_hf_head_init_checkpoint(arch):
    """An HF directory with such a head initialises the encoder of either variant; its head loads
    (init_head) into the "hf" variant only, and the original variant is told which to use."""
    from textrain.models.electra import ElectraClassifier, ElectraConfig
    from textrain.models.qa_heads import ElectraSquad
    config = ElectraConfig.from_dict(hf_format.electra_config_dicts(hf_format.read_config(fixture(arch)), None, arch))
    build = (lambda head: ElectraClassifier(config, num_labels=3, head=head)) if arch.endswith("Classification") \
        else (lambda head: ElectraSquad(config, head=head))
    original = build("original")
    original.load_init_checkpoint(fixture(arch))
    x = io(arch)
    sequence = np.asarray(original.discriminator(*_bert_features(x).values()))
    real = x["attention_mask"].astype(bool)
    np.testing.assert_allclose(sequence[real], x["out.sequence_output"][real], atol=TOL)
    with pytest.raises(UserError, match="the 'hf' variant.*head='original'.*model_settings"):
        original.load_init_checkpoint(fixture(arch), init_head=True)
    hf = build("hf")
    hf.load_init_checkpoint(fixture(arch), init_head=True)
    out = hf.predict_outputs(_bert_features(x))
    name = "logits" if arch.endswith("Classification") else "start_logits"
    np.testing.assert_allclose(np.asarray(out[name]), x[f"out.{name}"], atol=TOL)


def _run_cli(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
                          capture_output=True, text=True, timeout=600, check=False)


def test_finetune_keeps_an_hf_electra_head_and_converts_best_back(tmp_path):
    """textrain-finetune from ElectraForSequenceClassification with init_head=True takes head="hf" (its own
    head), evaluates and exports it; with learning rate 0 the SavedModel gives transformers' logits, and
    textrain-convert --from_textrain=<run>/best writes back the same tensors."""
    arch = "ElectraForSequenceClassification"
    rows = [f"w{i} w{i + 1} w{i + 2}\t{'abc'[i % 3]}" for i in range(30)]
    for split in ("train", "dev"):
        (tmp_path / f"{split}.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
    hp = {"train_file": str(tmp_path / "train.tsv"), "dev_file": str(tmp_path / "dev.tsv")}
    run = tmp_path / "run"
    params = ["finetune.task='tsv_classification'", f"finetune.problem_hparams={hp!r}",
              f"finetune.data_dir='{tmp_path / 'data'}'", f"finetune.model_dir='{run}'",
              f"finetune.vocab_file='{os.path.join(fixture(arch), 'vocab.txt')}'",
              f"finetune.init_checkpoint='{fixture(arch)}'", "finetune.init_head=True", "finetune.max_seq_length=16",
              "finetune.train_batch_size=8", "finetune.eval_batch_size=8", "finetune.num_train_steps=2",
              "finetune.learning_rate=0.0", "finetune.export=True"]
    proc = _run_cli("textrain.trainers.finetune",
                    f"--gin_file={os.path.join(os.path.dirname(HERE), 'configs', 'electra_base.gin')}",
                    *[f"--gin_param={p}" for p in params])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "head='hf'" in proc.stderr
    assert json.load(open(run / "eval_results.json"))["dev"][-1]["num_examples"] == 30
    x = io(arch)
    served = tf.saved_model.load(str(run / "export"))
    out = served.signatures["serving_default"](
        input_ids=tf.constant(x["input_ids"], tf.int32), input_mask=tf.constant(x["attention_mask"], tf.int32),
        segment_ids=tf.constant(x["token_type_ids"], tf.int32))
    np.testing.assert_allclose(out["logits"].numpy(), x["out.logits"], atol=TOL)
    assert "serve_text" in served.signatures
    proc = _run_cli("textrain.trainers.convert", f"--from_textrain={run / 'best'}", "--model=electra_classifier",
                    f"--config_file={fixture(arch)}", "--num_labels=3", f"--to_hf={tmp_path / 'hf'}",
                    f"--vocab_file={os.path.join(fixture(arch), 'vocab.txt')}", "--max_seq_length=16")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.load(open(tmp_path / "hf" / "tokenizer_config.json"))["model_max_length"] == 16
    want = load_file(os.path.join(fixture(arch), "model.safetensors"))
    got = load_file(str(tmp_path / "hf" / "model.safetensors"))
    assert sorted(got) == sorted(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


# ------------------------------------------------------------------------------------ token classification
TOKEN_ARCHS = ("BertForTokenClassification", "ElectraForTokenClassification", "XLNetForTokenClassification")
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]  # the fixtures' id2label


def _tagger_features(arch: str, x: dict[str, np.ndarray]) -> dict[str, tf.Tensor]:
    if arch.startswith("XLNet"):  # XLNet's input_mask: float, 1 = padding
        return {"input_ids": tf.constant(x["input_ids"], tf.int32),
                "input_mask": tf.constant(1 - x["attention_mask"], tf.float32),
                "segment_ids": tf.constant(x["token_type_ids"], tf.int32)}
    return _bert_features(x)


@pytest.mark.parametrize("arch", TOKEN_ARCHS)
def test_token_classification_matches_transformers_and_round_trips(arch, tmp_path):
    """*ForTokenClassification <-> the textrain taggers: transformers' logits to 1e-5 on the real tokens, the
    label names kept, HF -> textrain -> HF and through the originals' layout exact (all through the CLI)."""
    proc = _run_cli("textrain.trainers.convert", f"--from_hf={fixture(arch)}", f"--to_textrain={tmp_path / 'tr'}",
                    f"--to_tf1={tmp_path / 'tf1'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    model_name = convert.MODEL_OF_ARCHITECTURE[arch]
    assert json.load(open(tmp_path / "tr" / "textrain_model.json"))["model"] == model_name
    exchange = convert.read_hf(fixture(arch))
    assert exchange.labels == TAGS and exchange.num_labels == 5
    model = convert.load_into_model(exchange, fixture(arch))
    x = io(arch)
    logits = np.asarray(model.predict_outputs(_tagger_features(arch, x))["logits"])
    real = x["attention_mask"].astype(bool)
    assert logits.shape == x["out.logits"].shape == (2, 12, 5)
    np.testing.assert_allclose(logits[real], x["out.logits"][real], atol=TOL)
    proc = _run_cli("textrain.trainers.convert", f"--from_textrain={tmp_path / 'tr'}", f"--to_hf={tmp_path / 'hf'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_same_tensors(fixture(arch), str(tmp_path / "hf"))
    got_config, want_config = hf_format.read_config(str(tmp_path / "hf")), hf_format.read_config(fixture(arch))
    assert got_config["architectures"] == [arch] and got_config["id2label"] == want_config["id2label"]
    if not arch.startswith("XLNet"):
        assert_same_hf(fixture(arch), str(tmp_path / "hf"))
    config_file = {"bert": "bert_config.json", "electra": "electra_config.json", "xlnet": "xlnet_config.json"}
    proc = _run_cli("textrain.trainers.convert", f"--from_tf1={tmp_path / 'tf1' / 'model.ckpt'}",
                    f"--config_file={tmp_path / 'tf1' / config_file[model_name.split('_')[0]]}", f"--model={model_name}",
                    f"--to_hf={tmp_path / 'hf_tf1'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_same_tensors(fixture(arch), str(tmp_path / "hf_tf1"))


@pytest.mark.parametrize("arch", TOKEN_ARCHS)
def test_token_classification_to_saved_model(arch, tmp_path):
    """--to_saved_model of a tagger: the ids signature gives transformers' per-token logits; BERT's and ELECTRA's
    serve_text one tag per word, those of the words' sub-tokens."""
    convert.convert(from_hf=fixture(arch), to_saved_model=str(tmp_path / "export"), max_seq_length=16, doc_stride=5)
    loaded = tf.saved_model.load(str(tmp_path / "export"))
    served = loaded.signatures["serving_default"]
    x = io(arch)
    out = served(input_ids=tf.constant(x["input_ids"], tf.int32), input_mask=tf.constant(x["attention_mask"], tf.int32)
                 if not arch.startswith("XLNet") else tf.constant(1 - x["attention_mask"], tf.int32),
                 segment_ids=tf.constant(x["token_type_ids"], tf.int32))
    real = x["attention_mask"].astype(bool)
    np.testing.assert_allclose(out["logits"].numpy()[real], x["out.logits"][real], atol=TOL)
    if arch.startswith("XLNet"):
        assert "serve_text" not in loaded.signatures  # SentencePiece has no core TensorFlow op
        return
    words = loaded.signatures["serve_text"](text=tf.constant(["w1 W2 w3"]))
    ids = tf.constant([[2, 6, 7, 8, 3]], tf.int32)  # [CLS] w1 w2 w3 [SEP] in the fixtures' vocab.txt
    tag_ids = served(input_ids=ids, input_mask=tf.ones_like(ids), segment_ids=tf.zeros_like(ids))["tag_ids"]
    assert words["tag_ids"].numpy().tolist() == [tag_ids.numpy()[0, 1:4].tolist()]
    assert [t.decode() for t in words["tags"].numpy()[0]] == [TAGS[i] for i in tag_ids.numpy()[0, 1:4]]


@pytest.mark.parametrize("arch", TOKEN_ARCHS)
def test_token_classification_init_head(arch):
    """An HF tagger as init_checkpoint with init_head: encoder and head load (finetune scopes a task-scoped head
    by hf_format.HF_TASK_NAME then), giving transformers' logits; BERT's absent pooler stays fresh."""
    from textrain.framework import registry
    cls = registry.models.get(convert.MODEL_OF_ARCHITECTURE[arch])
    model = cls.from_settings(config_file=fixture(arch), num_labels=5, task_name=hf_format.HF_TASK_NAME)
    model.load_init_checkpoint(fixture(arch), init_head=True)
    x = io(arch)
    logits = np.asarray(model.predict_outputs(_tagger_features(arch, x))["logits"])
    real = x["attention_mask"].astype(bool)
    np.testing.assert_allclose(logits[real], x["out.logits"][real], atol=TOL)


def test_finetune_init_head_refuses_other_label_order(tmp_path):
    """The task's labels (sorted from the data) in another order than the HF head's id2label: one line."""
    arch = "ElectraForTokenClassification"
    conll = "w1 B-PER\nw2 I-PER\nw3 O\nw4 B-LOC\nw5 I-LOC\n"
    (tmp_path / "train.conll").write_text(conll * 4)
    hp = {"train_file": str(tmp_path / "train.conll"), "dev_file": str(tmp_path / "train.conll"), "doc_stride": 3}
    params = ["finetune.model='electra_tagger'", f"finetune.problem_hparams={hp!r}", f"finetune.data_dir='{tmp_path / 'd'}'",
              f"finetune.model_dir='{tmp_path / 'run'}'", f"finetune.vocab_file='{os.path.join(fixture(arch), 'vocab.txt')}'",
              f"finetune.init_checkpoint='{fixture(arch)}'", "finetune.init_head=True", "finetune.max_seq_length=8",
              "finetune.num_train_steps=1"]
    proc = _run_cli("textrain.trainers.finetune", "--gin_file=tagging.gin", *[f"--gin_param={p}" for p in params])
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        f"textrain-finetune: error: finetune.init_head: {fixture(arch)}/config.json's id2label (O, B-PER, I-PER, B-LOC, "
        f"I-LOC) is not the task's label order (B-LOC, B-PER, I-LOC, I-PER, O): its head's rows would score other labels")
    assert not (tmp_path / "run").exists()


# transformers' logits of an HF directory, where a venv with torch and transformers is named (tests/data/hf/
# make_fixtures.py's): `TEXTRAIN_HF_PYTHON=/tmp/hf-venv/bin/python`.
HF_LOGITS_SCRIPT = """
import json, sys
import numpy as np, torch, transformers
path, ids = sys.argv[1], np.array(json.loads(sys.argv[2]))
arch = json.load(open(path + "/config.json"))["architectures"][0]
model = getattr(transformers, arch).from_pretrained(path).eval()
with torch.no_grad():
    out = model(input_ids=torch.tensor(ids), attention_mask=torch.ones_like(torch.tensor(ids)))
print(json.dumps(out.logits.numpy().tolist()))
"""


def test_tagging_run_to_hf_serves_the_same_tags(tmp_path):
    """A tagging fine-tune (encoder from BertForTokenClassification, head fresh) -> textrain-convert
    --from_textrain=<run>/best --to_hf: read back, it serves the run's SavedModel's logits and raw-text tags;
    with TEXTRAIN_HF_PYTHON set, transformers' logits of it equal them to 1e-5."""
    arch = "BertForTokenClassification"
    vocab = os.path.join(fixture(arch), "vocab.txt")
    tags = ["B-PER", "I-PER", "O", "O", "B-LOC", "O"]
    sentences = [([f"w{(7 * i + j) % 90 + 1}" for j in range(len(tags))], tags) for i in range(24)]
    conll = "\n".join("".join(f"{w} {t}\n" for w, t in zip(words, ts)) for words, ts in sentences)
    (tmp_path / "train.conll").write_text(conll)
    (tmp_path / "dev.conll").write_text(conll)
    hp = {"train_file": str(tmp_path / "train.conll"), "dev_file": str(tmp_path / "dev.conll"), "doc_stride": 4}
    run, data = tmp_path / "run", tmp_path / "data"
    params = ["finetune.model='bert_tagger'", f"finetune.problem_hparams={hp!r}", f"finetune.data_dir='{data}'",
              f"finetune.model_dir='{run}'", f"finetune.vocab_file='{vocab}'", f"finetune.init_checkpoint='{fixture(arch)}'",
              "finetune.max_seq_length=8", "finetune.train_batch_size=8", "finetune.eval_batch_size=8",
              "finetune.num_train_steps=6", "finetune.learning_rate=1e-3", "finetune.export=True",
              "finetune.do_predict=False"]
    proc = _run_cli("textrain.trainers.finetune", "--gin_file=tagging.gin", *[f"--gin_param={p}" for p in params])
    assert proc.returncode == 0, proc.stderr[-3000:]
    labels = os.path.join(data, "tagging", "labels.json")
    proc = _run_cli("textrain.trainers.convert", f"--from_textrain={run / 'best'}", "--model=bert_tagger",
                    f"--config_file={fixture(arch)}", f"--labels_file={labels}", f"--vocab_file={vocab}",
                    "--max_seq_length=8", f"--to_hf={tmp_path / 'hf'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = hf_format.read_config(str(tmp_path / "hf"))
    assert config["architectures"] == [arch] and sorted(config["id2label"].values()) == ["B-LOC", "B-PER", "I-PER", "O"]
    proc = _run_cli("textrain.trainers.convert", f"--from_hf={tmp_path / 'hf'}", f"--to_saved_model={tmp_path / 'again'}",
                    "--max_seq_length=8", "--doc_stride=4")
    assert proc.returncode == 0, proc.stderr[-3000:]
    exported, again = (tf.saved_model.load(str(d)).signatures for d in (run / "export", tmp_path / "again"))
    ids = tf.constant([[2, 10, 20, 30, 40, 50, 3], [2, 11, 12, 13, 3, 0, 0]], tf.int32)
    mask = tf.cast(ids > 0, tf.int32)
    a, b = (s["serving_default"](input_ids=ids, input_mask=mask, segment_ids=tf.zeros_like(ids)) for s in (exported, again))
    np.testing.assert_allclose(a["logits"].numpy(), b["logits"].numpy(), atol=TOL)
    text = tf.constant([" ".join(words) for words, _ in sentences[:6]])
    assert (exported["serve_text"](text=text)["tags"].numpy() == again["serve_text"](text=text)["tags"].numpy()).all()
    hf_python = os.environ.get("TEXTRAIN_HF_PYTHON")
    if hf_python:
        row = ids.numpy()[:1].tolist()
        proc = subprocess.run([hf_python, "-c", HF_LOGITS_SCRIPT, str(tmp_path / "hf"), json.dumps(row)],
                              capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        np.testing.assert_allclose(np.array(json.loads(proc.stdout)), a["logits"].numpy()[:1], atol=TOL)


# ------------------------------------------------------------------------------------ XLNet
XLNET_ARCHS = ("XLNetModel", "XLNetLMHeadModel", "XLNetForSequenceClassification", "XLNetForQuestionAnswering")


def xlnet_outputs(model, arch: str, x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    ids = tf.constant(x["input_ids"], tf.int32)
    padding = tf.constant(1 - x["attention_mask"], tf.float32)  # XLNet's input_mask: 1 = padding
    types = tf.constant(x["token_type_ids"], tf.int32)
    features = {"input_ids": ids, "input_mask": padding, "segment_ids": types}
    sequence = model.transformer(ids, seg_ids=types, input_mask=padding)["output"]
    out = {"sequence_output": sequence, "last_hidden_state": sequence}
    if arch == "XLNetLMHeadModel":
        out["logits"] = tf.einsum("bld,nd->bln", sequence, model.transformer.lookup_table) + model.lm_bias
    elif arch == "XLNetForSequenceClassification":
        out["logits"] = model.logits(features)
    elif arch == "XLNetForQuestionAnswering":
        length = ids.shape[1]
        got = model.predict_outputs({**features, "p_mask": tf.zeros_like(padding),
                                     "cls_index": tf.fill([ids.shape[0]], length - 1)})
        out.update(got)
        # transformers flattens the end beams as [end rank, start beam], the original as [start beam, end rank].
        k1, k2 = model.start_n_top, model.end_n_top
        for name in ("end_top_log_probs", "end_top_index"):
            out[name] = tf.reshape(tf.transpose(tf.reshape(got[name], [-1, k1, k2]), [0, 2, 1]), [-1, k1 * k2])
    return {k: np.asarray(v) for k, v in out.items()}


@pytest.mark.parametrize("arch", XLNET_ARCHS)
def test_xlnet_import_matches_transformers(arch, tmp_path):
    exchange = convert.read_hf(fixture(arch))
    model = convert.load_into_model(exchange, fixture(arch))
    expected = io(arch)
    got = xlnet_outputs(model, arch, expected)
    real = expected["attention_mask"].astype(bool)
    names = [k[len("out."):] for k in expected if k.startswith("out.")]
    for name in names:
        want = expected[f"out.{name}"]
        if name in ("sequence_output", "last_hidden_state") or (name == "logits" and want.ndim == 3):
            np.testing.assert_allclose(got[name][real], want[real], atol=TOL, err_msg=f"{arch} {name}")
        elif name.endswith("_log_probs"):  # transformers' "log_probs" are softmax probabilities
            np.testing.assert_allclose(np.exp(got[name]), want, atol=TOL, err_msg=f"{arch} {name}")
        elif name.endswith("_index"):
            np.testing.assert_array_equal(got[name], want, err_msg=f"{arch} {name}")
        else:
            np.testing.assert_allclose(got[name], want, atol=TOL, err_msg=f"{arch} {name}")
    # Export: through textrain and the originals' layout back to the same HF tensors and config.
    convert.convert(from_hf=fixture(arch), to_textrain=str(tmp_path / "tr"))
    convert.convert(from_textrain=str(tmp_path / "tr"), to_tf1=str(tmp_path / "tf1"))
    convert.convert(from_tf1=str(tmp_path / "tf1" / "model.ckpt"), config_file=str(tmp_path / "tf1" / "xlnet_config.json"),
                    model=convert.MODEL_OF_ARCHITECTURE[arch], to_textrain=str(tmp_path / "tr2"))
    convert.convert(from_textrain=str(tmp_path / "tr2"), to_hf=str(tmp_path / "hf"),
                    hf_architecture=arch if arch == "XLNetModel" else None)
    want = load_file(os.path.join(fixture(arch), "model.safetensors"))
    got = load_file(str(tmp_path / "hf" / "model.safetensors"))
    assert sorted(got) == sorted(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    want_config, got_config = hf_format.read_config(fixture(arch)), hf_format.read_config(str(tmp_path / "hf"))
    fields = ("architectures", "model_type", "vocab_size", "d_model", "n_layer", "n_head", "d_inner", "ff_activation",
              "untie_r", "attn_type", "summary_type", "start_n_top", "end_n_top", "layer_norm_eps")
    fields = [k for k in fields if k in want_config]  # transformers 5 leaves out fields at their default
    assert len(fields) >= 10
    n_top = ("start_n_top", "end_n_top")  # run settings: the originals' xlnet_config.json does not keep them
    assert {k: got_config[k] for k in fields if k not in n_top} == {k: want_config[k] for k in fields if k not in n_top}
    convert.convert(from_textrain=str(tmp_path / "tr"), to_hf=str(tmp_path / "hf_direct"))
    direct = hf_format.read_config(str(tmp_path / "hf_direct"))
    assert {k: direct[k] for k in fields} == {k: want_config[k] for k in fields}


# ------------------------------------------------------------------------------------ SavedModel
def test_to_saved_model_serves_ids_and_text(tmp_path):
    arch = "BertForSequenceClassification"
    convert.convert(from_hf=fixture(arch), to_saved_model=str(tmp_path / "export"), max_seq_length=32)
    served = tf.saved_model.load(str(tmp_path / "export"))
    x = io(arch)
    out = served.signatures["serving_default"](
        input_ids=tf.constant(x["input_ids"], tf.int32), input_mask=tf.constant(x["attention_mask"], tf.int32),
        segment_ids=tf.constant(x["token_type_ids"], tf.int32))
    np.testing.assert_allclose(out["logits"].numpy(), x["out.logits"], atol=TOL)
    assert out["label"].numpy()[0].decode().startswith("LABEL_")
    text = served.signatures["serve_text"](text_a=tf.constant(["w1 w2 W3 unknownword"]))
    assert text["probabilities"].shape == (1, 3)


def test_to_saved_model_refuses_a_pretraining_model(tmp_path):
    message = _one_line_error(tmp_path, from_hf=fixture("BertForPreTraining"), to_saved_model=str(tmp_path / "e"))
    assert "--to_saved_model exports a fine-tuning model" in message


def test_from_textrain_run_with_size_labels_and_vocab(tmp_path):
    """A training run's model_dir (no textrain_model.json): --model, --model_size, --labels_file, --vocab_file."""
    from textrain.models.bert import BertClassifier, BertConfig
    model = BertClassifier(BertConfig.preset("tiny", vocab_size=99), num_labels=2)
    tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(tmp_path / "run"), 1).save(checkpoint_number=7)
    (tmp_path / "labels.json").write_text(json.dumps({"labels": ["narration", "speech"]}))
    vocab = os.path.join(fixture("BertModel"), "vocab.txt")
    convert.convert(from_textrain=str(tmp_path / "run"), model="bert_classifier", model_size="tiny",
                    labels_file=str(tmp_path / "labels.json"), vocab_file=vocab, do_lower_case=False,
                    max_seq_length=48, to_hf=str(tmp_path / "hf"))
    config = hf_format.read_config(str(tmp_path / "hf"))
    assert config["id2label"] == {"0": "narration", "1": "speech"} and config["hidden_size"] == 128
    # transformers' tokenizer truncates at model_max_length and lowercases as the model was tuned
    assert json.load(open(tmp_path / "hf" / "tokenizer_config.json")) == {
        "do_lower_case": False, "model_max_length": 48, "tokenizer_class": "BertTokenizer"}
    got = load_file(str(tmp_path / "hf" / "model.safetensors"))
    np.testing.assert_array_equal(got["classifier.weight"], model.classifier.output_weights.numpy())
    np.testing.assert_array_equal(got["bert.encoder.layer.1.output.dense.weight"],
                                  model.bert.encoder.blocks[1].output_dense.kernel.numpy().T)
    with open(tmp_path / "short_vocab.txt", "w") as f:
        f.write("[PAD]\n")
    message = _one_line_error(tmp_path, from_textrain=str(tmp_path / "run"), model="bert_classifier",
                              model_size="tiny", num_labels=2, vocab_file=str(tmp_path / "short_vocab.txt"))
    assert "1 entries but the word embedding has 99 rows" in message


def test_finetune_init_checkpoint_is_an_hf_directory(tmp_path):
    """textrain-finetune with finetune.init_checkpoint = an HF directory and bert_base.gin: the HF config.json
    decides the architecture (not the gin file's size), the encoder loads, the head starts fresh;
    finetune.init_head=True takes the HF classifier's head, refused here (3 HF labels, 2 task labels)."""
    import subprocess
    import sys
    arch = "BertForSequenceClassification"
    rows = ["She said hello\tspeech", "He walked home\tnarration"] * 20
    for split in ("train", "dev"):
        (tmp_path / f"{split}.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
    hp = {"train_file": str(tmp_path / "train.tsv"), "dev_file": str(tmp_path / "dev.tsv")}

    def finetune(model_dir: str, *extra: str) -> subprocess.CompletedProcess:
        params = ["finetune.task='tsv_classification'", f"finetune.problem_hparams={hp!r}",
                  f"finetune.data_dir='{tmp_path / 'data'}'", f"finetune.model_dir='{tmp_path / model_dir}'",
                  f"finetune.vocab_file='{os.path.join(fixture(arch), 'vocab.txt')}'",
                  f"finetune.init_checkpoint='{fixture(arch)}'", "finetune.max_seq_length=16",
                  "finetune.train_batch_size=8", "finetune.eval_batch_size=8", "finetune.num_train_steps=2", *extra]
        cmd = [sys.executable, "-m", "textrain.trainers.finetune",
               f"--gin_file={os.path.join(os.path.dirname(HERE), 'configs', 'bert_base.gin')}",
               *[f"--gin_param={p}" for p in params]]
        return subprocess.run(cmd, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), capture_output=True, text=True,
                              timeout=600, check=False)

    proc = finetune("fresh_head")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "initialised" in proc.stderr and "encoder variables from" in proc.stderr
    assert f"model config from {fixture(arch)}/config.json" in proc.stderr
    proc = finetune("hf_head", "finetune.init_head=True")
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("textrain-finetune: error:") and "output_weights: checkpoint (3, 16) vs model (2, 16)" in last


def test_tokenizer_json_alone_gives_vocab_txt(tmp_path):
    path = _copy_fixture("BertModel", tmp_path / "m")
    words = (tmp_path / "m" / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    os.remove(os.path.join(path, "vocab.txt"))
    with open(os.path.join(path, "tokenizer.json"), "w") as f:
        json.dump({"model": {"type": "WordPiece", "vocab": {w: i for i, w in enumerate(words)}}}, f)
    convert.convert(from_hf=path, to_textrain=str(tmp_path / "tr"))
    assert (tmp_path / "tr" / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1] == words
    with open(os.path.join(path, "tokenizer.json"), "w") as f:
        json.dump({"model": {"type": "WordPiece", "vocab": {w: i for i, w in enumerate(words + ["x"])}}}, f)
    assert "100 entries but the word embedding has 99 rows" in _one_line_error(tmp_path, from_hf=path)


def test_cli_prints_one_line_and_writes_nothing(tmp_path):
    import subprocess
    import sys
    path = _copy_fixture("BertModel", tmp_path / "m")
    _edit(path, lambda t: t.update({"pooler.dense.bias": np.zeros(17, np.float32)}))
    proc = subprocess.run([sys.executable, "-m", "textrain.trainers.convert", f"--from_hf={path}",
                           f"--to_hf={tmp_path / 'out'}"], env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("textrain-convert: error: checkpoint") and "shape mismatch (1): bert/pooler/dense/bias" in last
    assert not (tmp_path / "out").exists()


def test_sentencepiece_vocabulary_checked_and_kept(tmp_path):
    import sentencepiece
    arch = "XLNetLMHeadModel"
    path = _copy_fixture(arch, tmp_path / "m")
    sentencepiece.SentencePieceTrainer.train(input=os.path.join(HERE, "data", "austen_emma.txt"),
                                             model_prefix=str(tmp_path / "sp"), vocab_size=99, num_threads=1,
                                             hard_vocab_limit=False)
    shutil.copy(tmp_path / "sp.model", os.path.join(path, "spiece.model"))
    convert.convert(from_hf=path, to_textrain=str(tmp_path / "tr"))
    convert.convert(from_textrain=str(tmp_path / "tr"), to_hf=str(tmp_path / "hf"))
    assert (tmp_path / "hf" / "spiece.model").read_bytes() == (tmp_path / "sp.model").read_bytes()
    sentencepiece.SentencePieceTrainer.train(input=os.path.join(HERE, "data", "austen_emma.txt"),
                                             model_prefix=str(tmp_path / "sp80"), vocab_size=80, num_threads=1)
    shutil.copy(tmp_path / "sp80.model", os.path.join(path, "spiece.model"))
    assert "80 entries but the word embedding has 99 rows" in _one_line_error(tmp_path, from_hf=path)


@pytest.mark.parametrize("family,arch", [("bert", "BertModel"), ("electra", "ElectraForPreTraining"),
                                         ("xlnet", "XLNetModel")])
def test_an_hf_directory_is_a_model_config(family, arch):
    """config_file = an HF directory (what finetune passes for an HF init_checkpoint): its config.json's
    architecture, whatever size preset is also named."""
    import importlib

    module = importlib.import_module(f"textrain.models.{family}")
    hf = json.load(open(os.path.join(fixture(arch), "config.json")))
    config = module.config_from_settings("base", fixture(arch), None, None)
    config = config[0] if isinstance(config, tuple) else config
    width = hf.get("hidden_size") or hf.get("d_model")
    depth = hf.get("num_hidden_layers") or hf.get("n_layer")
    got = (getattr(config, "hidden_size", None) or config.d_model,
           getattr(config, "num_hidden_layers", None) or config.n_layer)
    assert got == (width, depth)
