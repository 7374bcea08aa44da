"""textrain-convert: checkpoint exchange between Hugging Face, the originals' TF1 layout and textrain.

    textrain-convert --from_hf=bert-base-chinese/ --to_textrain=init/
    textrain-convert --from_textrain=run/ --model=bert_classifier --config_file=run/bert_config.json \
        --num_labels=2 --vocab_file=vocab.txt --to_hf=hf_out/
    textrain-convert --from_tf1=uncased_L-2_H-128_A-2/bert_model.ckpt \
        --config_file=uncased_L-2_H-128_A-2/bert_config.json --to_hf=hf_out/

Decisions:
- Every direction passes through one in-memory form, `Exchange`: the tensors under the originals' TF1
  names (models/hf_format.py maps HF names to them; each model's `tf1_variable_map` maps them to
  variables), the BERT config, the HF architecture and the tokenizer files. Reading and writing are one
  function per format.
- A textrain checkpoint is `tf.train.Checkpoint(model=...)` (what the trainers and
  `finetune.init_checkpoint` read) with `textrain_model.json` (model name, config, labels, architecture)
  and the config and tokenizer files beside it, so `--from_textrain` of a converted directory needs no
  flags. A training run's model_dir has no such file: `--model`, `--config_file` (and `--num_labels`) say
  what it holds.
- An architecture without a textrain head (`BertModel`: no MLM/NSP; `BertForMaskedLM`: no pooler and
  no NSP) goes into the BERT pretrainer with those heads freshly initialised, and the command says so;
  everything else must match exactly or nothing is written.
- Output goes to a temporary directory beside the target, renamed into place when complete.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
from typing import Any

import numpy as np
from absl import flags

from textrain.framework.cli import UserError, run_main
from textrain.models import hf_format

FLAGS = flags.FLAGS
PROG = "textrain-convert"
MODEL_FILE = "textrain_model.json"
BERT_CONFIG = "bert_config.json"

log = logging.getLogger("textrain.convert")

# textrain model name <-> the HF architecture that holds it all.
MODEL_OF_ARCHITECTURE = {
    "BertModel": "bert", "BertForPreTraining": "bert", "BertForMaskedLM": "bert",
    "BertForSequenceClassification": "bert_classifier", "BertForQuestionAnswering": "bert_squad",
}
ARCHITECTURE_OF_MODEL = {"bert": "BertForPreTraining", "bert_classifier": "BertForSequenceClassification",
                         "bert_squad": "BertForQuestionAnswering"}
# Variables of the textrain model an architecture does not have (they stay freshly initialised).
# (BertForQuestionAnswering has no pooler: textrain's span head keeps one it never uses.)
FRESH = {"BertModel": (r"^cls/",), "BertForMaskedLM": (r"^cls/seq_relationship/", r"^bert/pooler/"),
         "BertForQuestionAnswering": (r"^bert/pooler/",)}


@dataclasses.dataclass
class Exchange:
    """A model between formats: TF1-named tensors, its BERT config and HF architecture, tokenizer files."""

    architecture: str
    config: dict[str, Any]  # BertConfig.to_dict() fields
    values: dict[str, np.ndarray]
    num_labels: int | None = None
    tokenizer_files: dict[str, str] = dataclasses.field(default_factory=dict)  # name -> source path

    @property
    def model_name(self) -> str:
        return MODEL_OF_ARCHITECTURE[self.architecture]


# ------------------------------------------------------------------------------------ textrain models
def build_model(model_name: str, config: dict[str, Any], num_labels: int | None = None):
    from textrain.models import bert, qa_heads
    bert_config = bert.BertConfig.from_dict(config)
    if model_name == "bert":
        return bert.BertPretrainer(bert_config)
    if model_name == "bert_classifier":
        return bert.BertClassifier(bert_config, num_labels=int(num_labels or 2))
    if model_name == "bert_squad":
        return qa_heads.BertSquad(bert_config)
    raise UserError(f"--model={model_name}: textrain-convert converts {', '.join(ARCHITECTURE_OF_MODEL)}")


def model_variable_map(model, architecture: str) -> dict:
    """The model's TF1 names that `architecture` holds (heads it lacks stay fresh, see FRESH)."""
    fresh = [re.compile(p) for p in FRESH.get(architecture, ())]
    return {n: v for n, v in model.tf1_variable_map().items() if not any(p.search(n) for p in fresh)}


def fresh_names(model, architecture: str) -> list[str]:
    kept = model_variable_map(model, architecture)
    return sorted(n for n in model.tf1_variable_map() if n not in kept)


def load_into_model(exchange: Exchange, source: str):
    """The textrain model of `exchange`, its variables assigned (every tensor accounted for)."""
    from textrain.models.checkpoints import assign_tf1_values
    model = build_model(exchange.model_name, exchange.config, exchange.num_labels)
    assign_tf1_values(source, exchange.values, model_variable_map(model, exchange.architecture))
    return model


# ------------------------------------------------------------------------------------ readers
def _tokenizer_files(directory: str) -> dict[str, str]:
    return {n: os.path.join(directory, n) for n in hf_format.TOKENIZER_FILES
            if os.path.exists(os.path.join(directory, n))}


def read_hf(path: str) -> Exchange:
    from textrain.models.checkpoints import hf_directory_values
    if not hf_format.is_hf_directory(path):
        raise UserError(f"--from_hf={path}: not a Hugging Face directory (config.json and model.safetensors)")
    config = hf_format.read_config(path)
    architecture = hf_format.architecture_of(config, os.path.join(path, hf_format.CONFIG))
    values = hf_directory_values(path)
    labels = hf_format.num_labels(config) if MODEL_OF_ARCHITECTURE[architecture] == "bert_classifier" else None
    return Exchange(architecture, hf_format.bert_config_dict(config, os.path.join(path, hf_format.CONFIG)),
                    values, labels, _tokenizer_files(path))


def _architecture_of_tf1(names: set[str], model_name: str | None) -> str:
    if model_name:
        return ARCHITECTURE_OF_MODEL[model_name]
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
    labels = int(values["output_weights"].shape[0]) if "output_weights" in values else None
    files = {"vocab.txt": vocab_file} if vocab_file else {}
    return Exchange(architecture, _read_json(config_file), values, labels, files)


def _read_json(path: str) -> dict[str, Any]:
    from textrain.models.bert import BertConfig
    return BertConfig.from_json_file(path).to_dict()


def read_textrain(path: str, model_name: str | None, config_file: str | None, num_labels: int | None,
                  vocab_file: str | None) -> Exchange:
    from textrain.trainers import checkpoint_checks
    directory = path if os.path.isdir(path) else os.path.dirname(path)
    recorded = os.path.join(directory, MODEL_FILE)
    if os.path.exists(recorded):
        with open(recorded, encoding="utf-8") as f:
            spec = json.load(f)
        architecture, config, num_labels = spec["architecture"], spec["config"], spec.get("num_labels")
    else:
        if not (model_name and config_file):
            raise UserError(f"--from_textrain={path} has no {MODEL_FILE}: say what it holds with --model and "
                            f"--config_file (and --num_labels for a classifier)")
        architecture, config = ARCHITECTURE_OF_MODEL[model_name], _read_json(config_file)
    model = build_model(MODEL_OF_ARCHITECTURE[architecture], config, num_labels)
    checkpoint_checks.load_init_checkpoint(checkpoint_checks.resolve_checkpoint(path, "--from_textrain"), model)
    values = {n: np.asarray(v.numpy()) for n, v in model_variable_map(model, architecture).items()}
    files = _tokenizer_files(directory)
    if vocab_file:
        files["vocab.txt"] = vocab_file
    return Exchange(architecture, config, values, num_labels, files)


# ------------------------------------------------------------------------------------ writers
def _copy_tokenizer(exchange: Exchange, out: str) -> None:
    for name, source in exchange.tokenizer_files.items():
        shutil.copyfile(source, os.path.join(out, name))


def _write_json(path: str, value: Any) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, sort_keys=True)
        f.write("\n")


def write_hf(exchange: Exchange, out: str, architecture: str | None = None) -> None:
    architecture = architecture or exchange.architecture
    if MODEL_OF_ARCHITECTURE.get(architecture) != exchange.model_name:
        raise UserError(f"--hf_architecture={architecture} does not hold a {exchange.model_name} model; use "
                        f"{', '.join(a for a, m in MODEL_OF_ARCHITECTURE.items() if m == exchange.model_name)}")
    config = hf_format.hf_bert_config(architecture, exchange.config, exchange.num_labels)
    fresh = fresh_names_of(exchange, architecture)
    if fresh:
        raise UserError(f"{exchange.architecture} has no {', '.join(fresh)}: it cannot be written as {architecture}")
    tensors = hf_format.hf_tensors(architecture, config, exchange.values)
    hf_format.write_safetensors(os.path.join(out, hf_format.WEIGHTS), tensors)
    _write_json(os.path.join(out, hf_format.CONFIG), config)
    _copy_tokenizer(exchange, out)


def fresh_names_of(exchange: Exchange, architecture: str) -> list[str]:
    """Tensors `architecture` holds that `exchange` lacks."""
    table = hf_format.name_table(architecture, {"num_hidden_layers": exchange.config["num_hidden_layers"]})
    return sorted(t for _, t, _ in table if t not in exchange.values)


def write_tf1(exchange: Exchange, out: str) -> None:
    from textrain.models.checkpoints import write_tf1_checkpoint
    write_tf1_checkpoint(os.path.join(out, "model.ckpt"), exchange.values)
    _write_json(os.path.join(out, BERT_CONFIG), exchange.config)
    _copy_tokenizer(exchange, out)


def write_textrain(exchange: Exchange, out: str, source: str) -> list[str]:
    """The textrain checkpoint (ckpt-0) with textrain_model.json, config and tokenizer; returns the
    variables left freshly initialised (heads the source architecture lacks)."""
    import tensorflow as tf
    model = load_into_model(exchange, source)
    tf.train.CheckpointManager(tf.train.Checkpoint(model=model), out, max_to_keep=1).save(checkpoint_number=0)
    _write_json(os.path.join(out, MODEL_FILE), {"model": exchange.model_name, "architecture": exchange.architecture,
                                                "config": exchange.config, "num_labels": exchange.num_labels})
    _write_json(os.path.join(out, BERT_CONFIG), exchange.config)
    _copy_tokenizer(exchange, out)
    return fresh_names(model, exchange.architecture)


def write_atomically(out: str, write) -> Any:
    """Run `write(tmp)` into a fresh directory beside `out`, then rename it to `out` (absent or empty)."""
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise UserError(f"{out} exists and is not empty: choose a new output directory")
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(os.path.abspath(out))}.incomplete-{os.getpid()}")
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
            vocab_file: str | None = None, hf_architecture: str | None = None) -> list[str]:
    """One conversion; returns lines describing what was written."""
    sources = [s for s in (from_hf, from_tf1, from_textrain) if s]
    targets = [t for t in (to_hf, to_tf1, to_textrain) if t]
    if len(sources) != 1:
        raise UserError("give exactly one of --from_hf, --from_tf1, --from_textrain")
    if not targets:
        raise UserError("give at least one of --to_hf, --to_tf1, --to_textrain")
    if model and model not in ARCHITECTURE_OF_MODEL:
        raise UserError(f"--model={model}: textrain-convert converts {', '.join(ARCHITECTURE_OF_MODEL)}")
    if hf_architecture and hf_architecture not in MODEL_OF_ARCHITECTURE:
        raise UserError(f"--hf_architecture={hf_architecture}: known: {', '.join(MODEL_OF_ARCHITECTURE)}")
    if from_hf:
        exchange = read_hf(from_hf)
    elif from_tf1:
        exchange = read_tf1(from_tf1, config_file, vocab_file, model)
    else:
        exchange = read_textrain(from_textrain, model, config_file, num_labels, vocab_file)
    source = sources[0]
    # Check everything the targets need before writing any of them.
    load_into_model(exchange, source)
    if to_hf:
        fresh = fresh_names_of(exchange, hf_architecture or exchange.architecture)
        if fresh:
            raise UserError(f"{source} has no {', '.join(fresh)}: it cannot be written as "
                            f"{hf_architecture or exchange.architecture}")
    lines = []
    if to_textrain:
        fresh = write_atomically(to_textrain, lambda d: write_textrain(exchange, d, source))
        lines.append(f"wrote {to_textrain} (textrain {exchange.model_name}, from {exchange.architecture})"
                     + (f"; freshly initialised, {exchange.architecture} has none: {', '.join(fresh)}" if fresh else ""))
    if to_tf1:
        write_atomically(to_tf1, lambda d: write_tf1(exchange, d))
        lines.append(f"wrote {to_tf1}/model.ckpt (the originals' variable names)")
    if to_hf:
        write_atomically(to_hf, lambda d: write_hf(exchange, d, hf_architecture))
        lines.append(f"wrote {to_hf} ({hf_architecture or exchange.architecture}, safetensors)")
    return lines


def define_flags() -> None:
    flags.DEFINE_string("from_hf", None, "A Hugging Face save_pretrained directory (config.json + safetensors).")
    flags.DEFINE_string("from_tf1", None, "A checkpoint in the originals' layout (as --init_checkpoint reads).")
    flags.DEFINE_string("from_textrain", None, "A textrain checkpoint prefix or model_dir.")
    flags.DEFINE_string("to_hf", None, "Write a Hugging Face directory (transformers.AutoModel* loads it).")
    flags.DEFINE_string("to_tf1", None, "Write the originals' layout: model.ckpt + bert_config.json.")
    flags.DEFINE_string("to_textrain", None, "Write a textrain checkpoint (--init_checkpoint / finetune.init_checkpoint).")
    flags.DEFINE_enum("model", None, list(ARCHITECTURE_OF_MODEL),
                      "The textrain model a --from_textrain run or --from_tf1 checkpoint holds.")
    flags.DEFINE_string("config_file", None, "bert_config.json of a --from_tf1 or --from_textrain checkpoint.")
    flags.DEFINE_integer("num_labels", None, "Labels of a --from_textrain bert_classifier run.")
    flags.DEFINE_string("vocab_file", None, "vocab.txt to write beside the converted model.")
    flags.DEFINE_string("hf_architecture", None, "The HF architecture --to_hf writes (default: the model's own).")


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    for line in convert(from_hf=FLAGS.from_hf, from_tf1=FLAGS.from_tf1, from_textrain=FLAGS.from_textrain,
                        to_hf=FLAGS.to_hf, to_tf1=FLAGS.to_tf1, to_textrain=FLAGS.to_textrain, model=FLAGS.model,
                        config_file=FLAGS.config_file, num_labels=FLAGS.num_labels, vocab_file=FLAGS.vocab_file,
                        hf_architecture=FLAGS.hf_architecture):
        print(line, flush=True)


def run() -> None:
    define_flags()
    run_main(PROG, main)


if __name__ == "__main__":
    run()
