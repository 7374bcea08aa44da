"""textrain-convert: checkpoint exchange between Hugging Face, the originals' TF1 layout and textrain.

    textrain-convert --from_hf=bert-base-chinese/ --to_textrain=init/bert      # --init_checkpoint=init/bert
    textrain-convert --from_textrain=runs/mrpc --model=bert_classifier --model_size=base \
        --labels_file=data/glue_mrpc/labels.json --vocab_file=vocab.txt --to_hf=mrpc_hf/ --to_saved_model=mrpc_sm/
    textrain-convert --from_tf1=uncased_L-2_H-128_A-2/bert_model.ckpt \
        --config_file=uncased_L-2_H-128_A-2/bert_config.json --vocab_file=uncased_L-2_H-128_A-2/vocab.txt --to_hf=hf/
    textrain-convert --from_hf=electra-small-discriminator/ --hf_generator=electra-small-generator/ --to_textrain=e/

Decisions:
- Every direction passes through one in-memory form, `Exchange`: the tensors under the originals' TF1
  names (models/hf_format.py maps HF names to them; each model's `tf1_variable_map` maps them to
  variables), the family's config, the HF architecture, labels and tokenizer files. Reading and writing
  are one function per format; every target is checked (the model loads every tensor, the HF table finds
  every name) before the first is written.
- A textrain checkpoint is `tf.train.Checkpoint(model=...)` (what the trainers and
  `finetune.init_checkpoint` read) with `textrain_model.json` (model name, config, labels, architecture)
  and the originals' config file and tokenizer files beside it, so `--from_textrain` of a converted
  directory needs no flags. A training run's model_dir has no such file: `--model` and `--config_file` or
  `--model_size` (and `--num_labels` / `--labels_file`) say what it holds.
- An architecture without all of a textrain model's parts (`BertModel`: no MLM/NSP; `BertForMaskedLM`: no
  pooler, no NSP; `BertForQuestionAnswering`, `BertForTokenClassification`: no pooler; `XLNetModel`: no LM bias;
  an ELECTRA discriminator without `--hf_generator`; `hf_format.ABSENT_PARTS`) goes in
  with those parts freshly initialised, and the command lists them; everything else must match exactly
  or nothing is written.
- HF heads unlike the original's (ELECTRA's classifier: dense, gelu, out_proj; its QA head: one linear
  start/end layer) are the textrain models' `head="hf"` variant: the architecture names the variant
  (`hf_format.HEAD_VARIANTS`), so they convert both ways, and `textrain_model.json` keeps it through
  textrain. The originals' ELECTRA heads have no HF architecture (--to_tf1 / --to_textrain only).
- ELECTRA's discriminator and generator are two HF directories and one textrain / TF1 checkpoint (they
  share the embeddings, which must be equal); `--to_hf_generator` writes the generator back.
- The tokenizer files travel with the weights; `--max_seq_length` (the fine-tuning length) is recorded as their
  tokenizer_config.json's `model_max_length`. `--max_shard_size` shards the HF weights as save_pretrained does.
- Output goes to a temporary directory beside the target, renamed into place when complete.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import sys
from typing import Any

import numpy as np
from absl import flags

from textrain.framework.cli import run_main
from textrain.framework.errors import UserError
from textrain.framework.lazy_tf import lazy_module, quiet_start

hf_format = lazy_module("textrain.models.hf_format")  # imports TensorFlow: after run()'s quiet start

FLAGS = flags.FLAGS
PROG = "textrain-convert"
MODEL_FILE = "textrain_model.json"
BERT_CONFIG = "bert_config.json"

# textrain model name <-> the HF architecture that holds it all.
MODEL_OF_ARCHITECTURE = {
    "BertModel": "bert", "BertForPreTraining": "bert", "BertForMaskedLM": "bert",
    "BertForSequenceClassification": "bert_classifier", "BertForQuestionAnswering": "bert_squad",
    "ElectraForPreTraining": "electra", "ElectraForSequenceClassification": "electra_classifier",
    "ElectraForQuestionAnswering": "electra_squad",
    "XLNetModel": "xlnet", "XLNetLMHeadModel": "xlnet", "XLNetForSequenceClassification": "xlnet_classifier",
    "XLNetForQuestionAnswering": "xlnet_squad",
    "BertForTokenClassification": "bert_tagger", "ElectraForTokenClassification": "electra_tagger",
    "XLNetForTokenClassification": "xlnet_tagger",
}
ARCHITECTURE_OF_MODEL = {"bert": "BertForPreTraining", "bert_classifier": "BertForSequenceClassification",
                         "bert_squad": "BertForQuestionAnswering", "electra": "ElectraForPreTraining",
                         "electra_classifier": "ElectraForSequenceClassification",
                         "electra_squad": "ElectraForQuestionAnswering",
                         "xlnet": "XLNetLMHeadModel", "xlnet_classifier": "XLNetForSequenceClassification",
                         "xlnet_squad": "XLNetForQuestionAnswering", "bert_tagger": "BertForTokenClassification",
                         "electra_tagger": "ElectraForTokenClassification",
                         "xlnet_tagger": "XLNetForTokenClassification"}
# Models whose head has one output per label (config.json's id2label; --num_labels, --labels_file).
LABELLED = ("bert_classifier", "electra_classifier", "xlnet_classifier", "bert_tagger", "electra_tagger",
            "xlnet_tagger")


@dataclasses.dataclass
class Exchange:
    """A model between formats: TF1-named tensors, its config and HF architecture, labels, tokenizer files."""

    architecture: str
    config: dict[str, Any]  # BertConfig / ElectraConfig .to_dict(), or XLNet's xlnet_config.json keys
    values: dict[str, np.ndarray]
    num_labels: int | None = None
    tokenizer_files: dict[str, str] = dataclasses.field(default_factory=dict)  # name -> source path
    fresh: tuple[str, ...] | None = None  # patterns of the model's TF1 names the source lacks (None: hf_format.ABSENT_PARTS's)
    n_top: tuple[int, int] = (5, 5)  # XLNet's span head: start_n_top, end_n_top
    labels: list[str] | None = None  # a classifier's label names (HF id2label), in id order
    do_lower_case: bool = True  # a vocab.txt without a tokenizer_config.json: the WordPiece casing to record
    max_seq_length: int | None = None  # the fine-tuning length: tokenizer_config.json's model_max_length

    def fresh_patterns(self) -> tuple[str, ...]:
        return hf_format.ABSENT_PARTS.get(self.architecture, ()) if self.fresh is None else self.fresh

    @property
    def model_name(self) -> str:  # a registered model with no HF architecture (a --usr_dir one) is its own
        return MODEL_OF_ARCHITECTURE.get(self.architecture, self.architecture)

    @property
    def head(self) -> str:
        """The textrain model's head variant this architecture holds."""
        return hf_format.HEAD_VARIANTS.get(self.architecture, "original")


# ------------------------------------------------------------------------------------ textrain models
def build_model(model_name: str, config: dict[str, Any], num_labels: int | None = None,
                n_top: tuple[int, int] = (5, 5), head: str = "original"):
    """The registered model `model_name` from an original config (its class's `from_config`)."""
    from textrain.framework import registry

    registry.import_builtins()
    try:
        return registry.models.get(model_name).from_config(config, num_labels=num_labels, n_top=n_top, head=head)
    except (KeyError, NotImplementedError):
        raise UserError(f"--model={model_name}: textrain-convert converts {', '.join(ARCHITECTURE_OF_MODEL)}") from None


def model_variable_map(model, fresh: tuple[str, ...] = ()) -> dict:
    """The model's TF1 names but those matching `fresh` (heads the source lacks)."""
    patterns = [re.compile(p) for p in fresh]
    return {n: v for n, v in model.tf1_variable_map().items() if not any(p.search(n) for p in patterns)}


def fresh_names(model, fresh: tuple[str, ...]) -> list[str]:
    kept = model_variable_map(model, fresh)
    return sorted(n for n in model.tf1_variable_map() if n not in kept)


def load_into_model(exchange: Exchange, source: str):
    """The textrain model of `exchange`, its variables assigned (every tensor accounted for)."""
    from textrain.models.checkpoints import assign_tf1_values
    model = build_model(exchange.model_name, exchange.config, exchange.num_labels, exchange.n_top, exchange.head)
    assign_tf1_values(source, exchange.values, model_variable_map(model, exchange.fresh_patterns()))
    return model


# ------------------------------------------------------------------------------------ readers
def _tokenizer_files(directory: str) -> dict[str, str]:
    return {n: os.path.join(directory, n) for n in hf_format.TOKENIZER_FILES
            if os.path.exists(os.path.join(directory, n))}


def _hf_source(path: str, flag: str) -> tuple[dict[str, Any], str]:
    if not hf_format.is_hf_directory(path):
        raise UserError(f"{flag}={path}: not a Hugging Face directory (config.json and model.safetensors)")
    config = hf_format.read_config(path)
    return config, hf_format.architecture_of(config, os.path.join(path, hf_format.CONFIG))


def read_hf(path: str, generator: str | None = None) -> Exchange:
    from textrain.models.checkpoints import hf_directory_values
    config, architecture = _hf_source(path, "--from_hf")
    if architecture == "ElectraForMaskedLM":
        raise UserError(f"--from_hf={path} is an ELECTRA generator alone: pass the discriminator "
                        f"(ElectraForPreTraining) as --from_hf and this directory as --hf_generator")
    if architecture == "ElectraForPreTraining":
        return _read_electra(path, config, generator)
    if generator:
        raise UserError(f"--hf_generator is for ELECTRA; --from_hf={path} is {architecture}")
    values = hf_directory_values(path)
    model_name = MODEL_OF_ARCHITECTURE[architecture]
    labels = hf_format.num_labels(config) if model_name in LABELLED else None
    names = hf_format.label_names(config) if labels else None
    source = os.path.join(path, hf_format.CONFIG)
    if model_name.startswith("xlnet"):
        n_top = (int(config.get("start_n_top", 5)), int(config.get("end_n_top", 5)))
        return Exchange(architecture, hf_format.xlnet_config_dict(config, source), values, labels,
                        _tokenizer_files(path), n_top=n_top, labels=names)
    family = hf_format.bert_config_dict(config, source) if model_name.startswith("bert") else \
        hf_format.electra_config_dicts(config, None, source)
    return Exchange(architecture, family, values, labels, _tokenizer_files(path), labels=names)


def _read_electra(path: str, config: dict[str, Any], generator: str | None) -> Exchange:
    """The discriminator and (if given) the generator, whose shared embeddings must be equal."""
    from textrain.models.checkpoints import hf_directory_values
    values = hf_directory_values(path)
    gen_config = None
    if generator:
        gen_config, gen_architecture = _hf_source(generator, "--hf_generator")
        if gen_architecture != "ElectraForMaskedLM":
            raise UserError(f"--hf_generator={generator} is {gen_architecture}, not ElectraForMaskedLM")
        gen_values = hf_directory_values(generator)
        differ = sorted(n for n in gen_values if n in values and (gen_values[n].shape != values[n].shape
                                                                  or not np.array_equal(gen_values[n], values[n])))
        if differ:
            raise UserError(f"--hf_generator={generator}: its embeddings differ from the discriminator's "
                            f"({', '.join(differ)}); textrain's ELECTRA shares them between the two")
        values.update(gen_values)
    electra = hf_format.electra_config_dicts(config, gen_config, os.path.join(path, hf_format.CONFIG))
    fresh = () if generator else (r"^generator",)
    return Exchange("ElectraForPreTraining", electra, values, None, _tokenizer_files(path), fresh)


def _architecture_of_tf1(names: set[str], model_name: str | None) -> str:
    found = _architecture_of_names(names)
    if model_name and MODEL_OF_ARCHITECTURE[found] != model_name:
        return ARCHITECTURE_OF_MODEL[model_name]
    return found


def _architecture_of_names(names: set[str]) -> str:
    for architecture, head in ((a, h) for a, h in hf_format.HF_ONLY_HEADS.items()):
        if f"{head}/kernel" in names:
            return architecture
    if "discriminator_predictions/dense/kernel" in names:
        return "ElectraForPreTraining"
    if "start_logits/dense/kernel" in names:
        return "XLNetForQuestionAnswering"
    if f"model/classification_{hf_format.HF_TASK_NAME}/logit/kernel" in names:
        return "XLNetForSequenceClassification"
    if f"model/tagging_{hf_format.HF_TASK_NAME}/logit/kernel" in names:
        return "XLNetForTokenClassification"
    if f"task_specific/{hf_format.HF_TASK_NAME}/dense/kernel" in names:
        return "ElectraForTokenClassification"
    if "model/transformer/word_embedding/lookup_table" in names:
        return "XLNetLMHeadModel" if "model/lm_loss/bias" in names else "XLNetModel"
    if "cls/squad/output_weights" in names:
        return "BertForQuestionAnswering"
    if "output_weights" in names:
        return "BertForSequenceClassification"
    if "cls/seq_relationship/output_weights" in names:
        return "BertForPreTraining"
    if "cls/predictions/output_bias" in names:
        return "BertForMaskedLM"
    return "BertModel"


def read_tf1(path: str, config_file: str | None, vocab_file: str | None, model_name: str | None) -> Exchange:
    import tensorflow as tf

    from textrain.models.checkpoints import DEFAULT_IGNORE
    if not config_file:
        raise UserError("--from_tf1 needs --config_file (the release's bert_config.json)")
    reader = tf.train.load_checkpoint(path)
    skip = [re.compile(p) for p in DEFAULT_IGNORE]
    values = {n: np.asarray(reader.get_tensor(n)) for n in reader.get_variable_to_shape_map()
              if not any(p.search(n) for p in skip)}
    architecture = _architecture_of_tf1(set(values), model_name)
    head = {"BertForSequenceClassification": ("output_weights", 0),
            "ElectraForSequenceClassification": (f"{hf_format.HF_ONLY_HEADS['ElectraForSequenceClassification']}"
                                                 f"/kernel", 1),
            "XLNetForSequenceClassification": (f"model/classification_{hf_format.HF_TASK_NAME}/logit/kernel", 1),
            "BertForTokenClassification": ("output_weights", 0),
            "ElectraForTokenClassification": (f"task_specific/{hf_format.HF_TASK_NAME}/dense/kernel", 1),
            "XLNetForTokenClassification": (f"model/tagging_{hf_format.HF_TASK_NAME}/logit/kernel", 1)}
    labels = int(values[head[architecture][0]].shape[head[architecture][1]]) if architecture in head else None
    files = {"vocab.txt": vocab_file} if vocab_file else {}
    return Exchange(architecture, _read_json(config_file, MODEL_OF_ARCHITECTURE[architecture]), values, labels, files)


def _read_json(path: str, model_name: str) -> dict[str, Any]:
    """The family config of an original config file, or of an HF directory (the one a run started from)."""
    from textrain.models.bert import BertConfig
    from textrain.models.electra import ElectraConfig
    from textrain.models.xlnet import MODEL_KEYS, XLNetConfig
    if model_name not in ARCHITECTURE_OF_MODEL:  # a --usr_dir model: its from_config reads the JSON as it is
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    if hf_format.is_hf_directory(path):
        config, source = hf_format.read_config(path), os.path.join(path, hf_format.CONFIG)
        if model_name.startswith("xlnet"):
            return hf_format.xlnet_config_dict(config, source)
        if model_name.startswith("electra"):
            return hf_format.electra_config_dicts(config, None, source)
        return hf_format.bert_config_dict(config, source)
    if model_name.startswith("xlnet"):
        config = XLNetConfig.from_json(path)
        return {k: getattr(config, k) for k in MODEL_KEYS}
    cls = ElectraConfig if model_name.startswith("electra") else BertConfig
    return cls.from_json_file(path).to_dict()


def read_textrain(path: str, model_name: str | None, config_file: str | None, num_labels: int | None,
                  vocab_file: str | None, model_size: str | None = None) -> Exchange:
    from textrain.trainers import checkpoint_checks
    directory = path if os.path.isdir(path) else os.path.dirname(path)
    prefix = checkpoint_checks.resolve_checkpoint(path, "--from_textrain")
    recorded = os.path.join(directory, MODEL_FILE)
    if os.path.exists(recorded):
        with open(recorded, encoding="utf-8") as f:
            spec = json.load(f)
        architecture, config, num_labels = spec["architecture"], spec["config"], spec.get("num_labels")
        n_top, labels = tuple(spec.get("n_top", (5, 5))), spec.get("labels")
    else:
        if not (model_name and (config_file or model_size)):
            raise UserError(f"--from_textrain={path} has no {MODEL_FILE}: say what it holds with --model and "
                            f"--config_file or --model_size (and --num_labels for a classifier)")
        architecture = ARCHITECTURE_OF_MODEL.get(model_name, model_name)
        config = _read_json(config_file, model_name) if config_file else _preset(model_name, model_size, prefix)
        n_top, labels = (5, 5), None
    model = build_model(MODEL_OF_ARCHITECTURE.get(architecture, architecture), config, num_labels, n_top,
                        hf_format.HEAD_VARIANTS.get(architecture, "original"))
    restore_textrain(prefix, model)
    values = {n: np.asarray(v.numpy()) for n, v in model_variable_map(model, hf_format.ABSENT_PARTS.get(architecture, ())).items()}
    files = _tokenizer_files(directory)
    if vocab_file:
        files["vocab.txt"] = vocab_file
    return Exchange(architecture, config, values, num_labels, files, n_top=n_top, labels=labels)


def check_vocabulary(exchange: Exchange) -> None:
    """Refuse a vocab.txt whose size is not the word embedding's row count."""
    vocab = exchange.tokenizer_files.get("vocab.txt")
    rows = [v.shape[0] for n, v in exchange.values.items() if n.endswith(("/word_embeddings", "/lookup_table"))]
    if not vocab or not rows:
        return
    with open(vocab, encoding="utf-8") as f:
        size = sum(1 for _ in f)
    if size != rows[0]:
        raise UserError(f"{vocab} has {size} entries but the word embedding has {rows[0]} rows (vocabulary of "
                        f"another model?)")


def read_labels(path: str) -> list[str]:
    """Label names in id order: a problem's labels.json ({"labels": [...]}) or one name a line."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith(".json"):
        try:
            names = json.loads(text)
        except json.JSONDecodeError as e:
            raise UserError(f"{path}:{e.lineno}: not valid JSON: {e.msg}") from None
        names = names.get("labels") if isinstance(names, dict) else names
        if not isinstance(names, list) or not names:
            raise UserError(f"{path}: expected a list of labels or {{\"labels\": [...]}}")
        return [str(n) for n in names]
    return [line.strip() for line in text.splitlines() if line.strip()]


def _preset(model_name: str, size: str, prefix: str) -> dict[str, Any]:
    """A size preset's config with the vocabulary size of the checkpoint's word embedding (as the trainers
    build it from --model_size and the data's vocabulary)."""
    from textrain.models import bert, electra
    from textrain.trainers import checkpoint_checks
    rows = [shape[0] for name, (_, shape) in checkpoint_checks.checkpoint_model_variables(prefix).items()
            if name.endswith("word_embeddings")]
    if not rows:
        raise UserError(f"--from_textrain={prefix}: no word embedding found; give --config_file")
    if model_name.startswith("electra"):
        return electra.ElectraConfig.preset(size, vocab_size=int(rows[0])).to_dict()
    if model_name.startswith("bert"):
        return bert.BertConfig.preset(size, vocab_size=int(rows[0])).to_dict()
    raise UserError(f"--model_size is for BERT and ELECTRA; give --config_file for {model_name}")


def restore_textrain(path: str, model) -> None:
    """Every variable of `model` from the textrain checkpoint `path`: by variable path, as the trainers'
    init_checkpoint (which also proves nothing is missing, extra or mis-shaped); where two variables share a
    path (XLNet's LayerNorms are all `LayerNorm/gamma`), by the object graph instead, which tells them apart."""
    from textrain.trainers import checkpoint_checks
    try:
        checkpoint_checks.load_init_checkpoint(path, model)
    except checkpoint_checks.CheckpointMismatchError as e:  # named as this CLI's flag
        raise UserError(str(e).replace(f"--init_checkpoint={path}", f"--from_textrain={path}")) from None


# ------------------------------------------------------------------------------------ writers
def _copy_tokenizer(exchange: Exchange, out: str) -> None:
    """The tokenizer files. A tokenizer.json alone also gives the vocab.txt textrain's WordPiece reads; a bare
    vocab.txt gets the tokenizer_config.json that tells transformers its casing; a known fine-tuning length
    goes in as `model_max_length`, so transformers truncates where the model was tuned and exported."""
    for name, source in exchange.tokenizer_files.items():
        shutil.copyfile(source, os.path.join(out, name))
    if "tokenizer.json" in exchange.tokenizer_files and "vocab.txt" not in exchange.tokenizer_files:
        tokens = hf_format.wordpiece_vocab_from_tokenizer_json(exchange.tokenizer_files["tokenizer.json"])
        if tokens:
            with open(os.path.join(out, "vocab.txt"), "w", encoding="utf-8") as f:
                f.write("".join(t + "\n" for t in tokens))
    if "vocab.txt" in exchange.tokenizer_files and "tokenizer_config.json" not in exchange.tokenizer_files:
        _write_json(os.path.join(out, "tokenizer_config.json"),
                    {"do_lower_case": exchange.do_lower_case, "tokenizer_class": "BertTokenizer"})
    if exchange.max_seq_length and exchange.tokenizer_files:
        path = os.path.join(out, "tokenizer_config.json")
        config = {}
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                config = json.load(f)
        _write_json(path, dict(config, model_max_length=exchange.max_seq_length))


def _write_json(path: str, value: Any) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, sort_keys=True)
        f.write("\n")


def hf_config_of(exchange: Exchange, architecture: str) -> dict[str, Any]:
    """The HF config.json of `architecture` (ELECTRA: each network's own sizes)."""
    config = exchange.config
    if exchange.model_name.startswith("electra"):
        from textrain.models.electra import ElectraConfig
        electra = ElectraConfig.from_dict(config)
        generator = architecture == "ElectraForMaskedLM"
        config = (electra.generator_config() if generator else electra.discriminator_config()).to_dict()
    if exchange.model_name.startswith("xlnet"):
        hf = hf_format.hf_xlnet_config(architecture, config, exchange.num_labels, exchange.n_top)
    else:
        hf = hf_format.hf_bert_config(architecture, config, exchange.num_labels)
    if exchange.labels and "id2label" in hf:
        hf["id2label"] = {str(i): name for i, name in enumerate(exchange.labels)}
        hf["label2id"] = {name: i for i, name in enumerate(exchange.labels)}
    return hf


def write_hf(exchange: Exchange, out: str, architecture: str | None = None, max_shard_size: int | None = None) -> None:
    architecture = architecture or exchange.architecture
    if MODEL_OF_ARCHITECTURE.get(architecture, "electra" if architecture == "ElectraForMaskedLM" else None) \
            != exchange.model_name:
        raise UserError(f"--hf_architecture={architecture} does not hold a {exchange.model_name} model; use "
                        f"{', '.join(a for a, m in MODEL_OF_ARCHITECTURE.items() if m == exchange.model_name)}")
    config = hf_config_of(exchange, architecture)
    fresh = fresh_names_of(exchange, architecture)
    if fresh:
        raise UserError(f"{exchange.architecture} has no {', '.join(fresh)}: it cannot be written as {architecture}")
    tensors = hf_format.hf_tensors(architecture, config, exchange.values)
    hf_format.write_weights(out, tensors, max_shard_size)
    _write_json(os.path.join(out, hf_format.CONFIG), config)
    _copy_tokenizer(exchange, out)


def fresh_names_of(exchange: Exchange, architecture: str) -> list[str]:
    """Tensors `architecture` holds that `exchange` lacks."""
    table = hf_format.name_table(architecture, hf_config_of(exchange, architecture))
    return sorted(t for _, t, _ in table if t not in exchange.values)


def write_tf1(exchange: Exchange, out: str) -> None:
    from textrain.models.checkpoints import write_tf1_checkpoint
    write_tf1_checkpoint(os.path.join(out, "model.ckpt"), exchange.values)
    _write_json(os.path.join(out, config_file_name(exchange)), exchange.config)
    _copy_tokenizer(exchange, out)


def config_file_name(exchange: Exchange) -> str:
    """The originals' config file name beside the weights (what --config_file / model_config_file read)."""
    return {"bert": BERT_CONFIG, "electra": "electra_config.json", "xlnet": "xlnet_config.json"}.get(
        exchange.model_name.split("_")[0], "config.json")


def write_textrain(exchange: Exchange, out: str, source: str) -> list[str]:
    """The textrain checkpoint (ckpt-0) with textrain_model.json, config and tokenizer; returns the
    variables left freshly initialised (heads the source architecture lacks)."""
    import tensorflow as tf
    model = load_into_model(exchange, source)
    tf.train.CheckpointManager(tf.train.Checkpoint(model=model), out, max_to_keep=1).save(checkpoint_number=0)
    _write_json(os.path.join(out, MODEL_FILE), {"model": exchange.model_name, "architecture": exchange.architecture,
                                                "config": exchange.config, "num_labels": exchange.num_labels,
                                                "n_top": list(exchange.n_top), "labels": exchange.labels})
    _write_json(os.path.join(out, config_file_name(exchange)), exchange.config)
    _copy_tokenizer(exchange, out)
    return fresh_names(model, exchange.fresh_patterns())


DEFAULT_SERVING_LENGTH = 128  # --to_saved_model without --max_seq_length
DEFAULT_TAGGING_STRIDE = 64  # a tagger's serve_text without --doc_stride (the tagging problem's default)
SERVABLE = ("bert_classifier", "bert_squad", "electra_classifier", "electra_squad", "xlnet_classifier", "xlnet_squad",
            "bert_tagger", "electra_tagger", "xlnet_tagger")


def write_saved_model(exchange: Exchange, out: str, source: str, max_seq_length: int, doc_stride: int) -> None:
    """The export of today's fine-tuning (trainers/export.py): ids in, the head's outputs out; raw text in
    (`serve_text`, `serve_text_pair`; a tagger's `serve_text`: one tag per word, windows `doc_stride` apart)
    for a WordPiece model with its vocabulary."""
    from textrain.trainers.export import export_classifier
    model = load_into_model(exchange, source)
    tokenizer = None
    vocab = exchange.tokenizer_files.get("vocab.txt")
    if model.serves_raw_text and vocab:
        from textrain.framework.graph_wordpiece import GraphWordpieceTokenizer
        lower = hf_format.do_lower_case(os.path.dirname(vocab))
        tokenizer = GraphWordpieceTokenizer(vocab, do_lower_case=exchange.do_lower_case if lower is None else lower,
                                            max_seq_length=max_seq_length)
    export_classifier(model, out, max_seq_length=max_seq_length, labels=exchange.labels, tokenizer=tokenizer,
                      doc_stride=doc_stride)


def _remove_stale_temp_dirs(parent: str, base: str) -> None:
    """Temp directories `<base><pid>` of writers that died (kill -9): nothing else would ever remove them.
    A live writer's stays."""
    from textrain.framework import locks
    for name in os.listdir(parent):
        pid = name[len(base):]
        if name.startswith(base) and pid.isdigit() and not locks.process_running(int(pid)):
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)


def write_atomically(out: str, write) -> Any:
    """Run `write(tmp)` into a fresh directory beside `out`, then rename it to `out` (absent or empty)."""
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise UserError(f"{out} exists and is not empty: choose a new output directory")
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    base = f".{os.path.basename(os.path.abspath(out))}.incomplete-"
    _remove_stale_temp_dirs(parent, base)
    tmp = os.path.join(parent, f"{base}{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        result = write(tmp)
        if os.path.isdir(out):
            os.rmdir(out)
        os.rename(tmp, out)
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------------------------ the command
def convert(*, from_hf: str | None = None, from_tf1: str | None = None, from_textrain: str | None = None,
            to_hf: str | None = None, to_tf1: str | None = None, to_textrain: str | None = None,
            model: str | None = None, config_file: str | None = None, num_labels: int | None = None,
            vocab_file: str | None = None, hf_architecture: str | None = None, hf_generator: str | None = None,
            to_hf_generator: str | None = None, to_saved_model: str | None = None,
            max_seq_length: int | None = None, model_size: str | None = None, labels_file: str | None = None,
            do_lower_case: bool = True, max_shard_size: str | None = None,
            doc_stride: int | None = None) -> list[str]:
    """One conversion; returns lines describing what was written."""
    from textrain.framework import registry
    from textrain.models.base import FinetuneModel

    registry.import_builtins()
    sources = [s for s in (from_hf, from_tf1, from_textrain) if s]
    targets = [t for t in (to_hf, to_tf1, to_textrain, to_hf_generator, to_saved_model) if t]
    if len(sources) != 1:
        raise UserError("give exactly one of --from_hf, --from_tf1, --from_textrain")
    if not targets:
        raise UserError("give at least one of --to_hf, --to_tf1, --to_textrain, --to_hf_generator, --to_saved_model")
    if hf_generator and not from_hf:
        raise UserError("--hf_generator goes with --from_hf (the discriminator)")
    if model and model not in ARCHITECTURE_OF_MODEL and model not in registry.models:
        raise UserError(f"--model={model}: textrain-convert converts {', '.join(ARCHITECTURE_OF_MODEL)} and the "
                        f"registered models of a --usr_dir")
    if hf_architecture and hf_architecture not in MODEL_OF_ARCHITECTURE:
        raise UserError(f"--hf_architecture={hf_architecture}: known: {', '.join(MODEL_OF_ARCHITECTURE)}")
    if from_hf:
        exchange = read_hf(from_hf, hf_generator)
    elif from_tf1:
        exchange = read_tf1(from_tf1, config_file, vocab_file, model)
    else:
        names = read_labels(labels_file) if labels_file else None
        if names and num_labels and num_labels != len(names):
            raise UserError(f"--labels_file={labels_file} names {len(names)} labels, --num_labels says {num_labels}")
        exchange = read_textrain(from_textrain, model, config_file, num_labels or (len(names) if names else None),
                                 vocab_file, model_size)
        if names:
            if exchange.num_labels != len(names):
                raise UserError(f"--labels_file={labels_file} names {len(names)} labels; the model has "
                                f"{exchange.num_labels}")
            exchange.labels = names
    source = sources[0]
    exchange.do_lower_case = do_lower_case
    exchange.max_seq_length = max_seq_length
    shard_bytes = hf_format.parse_shard_size(max_shard_size) if max_shard_size else None
    if max_seq_length is not None and max_seq_length < 1:
        raise UserError(f"--max_seq_length={max_seq_length}: expected a positive length")
    max_seq_length = max_seq_length or DEFAULT_SERVING_LENGTH
    doc_stride = doc_stride or min(DEFAULT_TAGGING_STRIDE, max_seq_length - 2)
    if not 1 <= doc_stride <= max_seq_length - 2:
        raise UserError(f"--doc_stride={doc_stride}: expected 1 .. max_seq_length - 2 = {max_seq_length - 2}")
    check_vocabulary(exchange)
    # Check everything the targets need before writing any of them.
    load_into_model(exchange, source)
    hf_targets = ([(to_hf, hf_architecture or exchange.architecture)] if to_hf else []) + (
        [(to_hf_generator, "ElectraForMaskedLM")] if to_hf_generator else [])
    if to_hf_generator and exchange.model_name != "electra":
        raise UserError(f"--to_hf_generator is for ELECTRA; {source} holds {exchange.model_name}")
    if to_hf and exchange.architecture not in MODEL_OF_ARCHITECTURE:
        raise UserError(f"--to_hf: {exchange.model_name} has no Hugging Face architecture")
    usr_finetune = (exchange.model_name not in ARCHITECTURE_OF_MODEL
                    and issubclass(registry.models.get(exchange.model_name), FinetuneModel))
    if to_saved_model and exchange.model_name not in SERVABLE and not usr_finetune:
        raise UserError(f"--to_saved_model exports a fine-tuning model ({', '.join(SERVABLE)}); {source} holds "
                        f"{exchange.model_name} ({exchange.architecture})")
    longest = exchange.config.get("max_position_embeddings")
    if to_saved_model and longest and max_seq_length > longest:
        raise UserError(f"--max_seq_length={max_seq_length} exceeds the model's max_position_embeddings {longest}")
    for _, architecture in hf_targets:
        fresh = fresh_names_of(exchange, architecture)
        if fresh:
            raise UserError(f"{source} has no {', '.join(fresh)}: it cannot be written as {architecture}")
    lines = []
    if to_textrain:
        fresh = write_atomically(to_textrain, lambda d: write_textrain(exchange, d, source))
        lines.append(f"wrote {to_textrain} (textrain {exchange.model_name}, from {exchange.architecture})"
                     + (f"; freshly initialised, {exchange.architecture} has none: {', '.join(fresh)}" if fresh else ""))
    if to_tf1:
        write_atomically(to_tf1, lambda d: write_tf1(exchange, d))
        lines.append(f"wrote {to_tf1}/model.ckpt (the originals' variable names)")
    for out, architecture in hf_targets:
        write_atomically(out, lambda d, a=architecture: write_hf(exchange, d, a, shard_bytes))
        lines.append(f"wrote {out} ({architecture}, safetensors)")
    if to_saved_model:
        write_atomically(to_saved_model, lambda d: write_saved_model(exchange, d, source, max_seq_length, doc_stride))
        lines.append(f"wrote {to_saved_model} (SavedModel of {exchange.model_name})")
    return lines


def define_flags() -> None:
    flags.DEFINE_string("from_hf", None, "A Hugging Face save_pretrained directory (config.json + safetensors).")
    flags.DEFINE_string("from_tf1", None, "A checkpoint in the originals' layout (as --init_checkpoint reads).")
    flags.DEFINE_string("from_textrain", None, "A textrain checkpoint prefix or model_dir.")
    flags.DEFINE_string("to_hf", None, "Write a Hugging Face directory (transformers.AutoModel* loads it).")
    flags.DEFINE_string("to_tf1", None, "Write the originals' layout: model.ckpt + bert_config.json.")
    flags.DEFINE_string("to_textrain", None, "Write a textrain checkpoint (--init_checkpoint / finetune.init_checkpoint).")
    flags.DEFINE_string("model", None, f"The textrain model a --from_textrain run or --from_tf1 checkpoint holds: "
                        f"{', '.join(ARCHITECTURE_OF_MODEL)}, or a registered model of --usr_dir.")
    flags.DEFINE_string("usr_dir", None, "Python package of user models to import (tensor2tensor's --t2t_usr_dir).")
    flags.DEFINE_alias("t2t_usr_dir", "usr_dir")
    flags.DEFINE_string("config_file", None, "bert_config.json (or the family's config file, or the HF directory "
                        "the run started from) of a --from_tf1 or --from_textrain checkpoint.")
    flags.DEFINE_integer("num_labels", None, "Labels of a --from_textrain classifier or tagger run.")
    flags.DEFINE_string("labels_file", None, "A --from_textrain classifier's label names in id order: the problem's "
                        "labels.json (in its data_dir) or one name a line; they become config.json's id2label.")
    flags.DEFINE_bool("do_lower_case", True, "With --vocab_file: the WordPiece casing the model was trained with "
                      "(written to tokenizer_config.json).")
    flags.DEFINE_string("model_size", None, "Instead of --config_file: the size preset a --from_textrain run was "
                        "trained with (tiny, mini, small, base, ...; the vocabulary size is the checkpoint's).")
    flags.DEFINE_string("vocab_file", None, "vocab.txt to write beside the converted model.")
    flags.DEFINE_string("hf_architecture", None, "The HF architecture --to_hf writes (default: the model's own).")
    flags.DEFINE_string("hf_generator", None, "ELECTRA: the generator's HF directory (ElectraForMaskedLM) to "
                        "combine with the --from_hf discriminator into one pretraining checkpoint.")
    flags.DEFINE_string("to_hf_generator", None, "ELECTRA: also write the generator as an HF ElectraForMaskedLM.")
    flags.DEFINE_string("to_saved_model", None, "Write a SavedModel of a fine-tuning model (ids in, the head's "
                        "outputs out; raw text in for a BERT classifier with a vocab.txt).")
    flags.DEFINE_integer("max_seq_length", None, "The length the model was fine-tuned with: --to_saved_model's "
                         "raw-text signatures truncate at it (default 128); --to_hf and the other targets record it "
                         "as tokenizer_config.json's model_max_length.")
    flags.DEFINE_integer("doc_stride", None, "--to_saved_model of a tagger: sub-tokens between the starts of two "
                         "windows over a long sentence in serve_text (default 64, at most max_seq_length - 2).")
    flags.DEFINE_string("max_shard_size", None, "--to_hf: write safetensors shards of at most this size (500MB, "
                        "2GB, 1GiB or bytes, as save_pretrained) with model.safetensors.index.json.")


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    from textrain.framework import registry

    registry.import_usr_dir(FLAGS.usr_dir)
    for line in convert(from_hf=FLAGS.from_hf, from_tf1=FLAGS.from_tf1, from_textrain=FLAGS.from_textrain,
                        to_hf=FLAGS.to_hf, to_tf1=FLAGS.to_tf1, to_textrain=FLAGS.to_textrain, model=FLAGS.model,
                        config_file=FLAGS.config_file, num_labels=FLAGS.num_labels, vocab_file=FLAGS.vocab_file,
                        hf_architecture=FLAGS.hf_architecture, hf_generator=FLAGS.hf_generator,
                        to_hf_generator=FLAGS.to_hf_generator, to_saved_model=FLAGS.to_saved_model,
                        max_seq_length=FLAGS.max_seq_length, model_size=FLAGS.model_size,
                        labels_file=FLAGS.labels_file, do_lower_case=FLAGS.do_lower_case,
                        max_shard_size=FLAGS.max_shard_size, doc_stride=FLAGS.doc_stride):
        print(line, flush=True)


def run() -> None:
    quiet_start(sys.argv)
    define_flags()
    run_main(PROG, main)


if __name__ == "__main__":
    run()
