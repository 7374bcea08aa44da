"""The Hugging Face checkpoint format: a `save_pretrained` directory read into, and written from, the
originals' TF1 variable names.

A directory holds `config.json` (with `architectures`), `model.safetensors` (or shards
`model-0000x-of-0000y.safetensors` with `model.safetensors.index.json`) and tokenizer files.

Decisions:
- HF names <-> the originals' TF1 names is a fixed table per architecture (`name_table`); the TF1
  names <-> textrain variables mapping is each model's own `tf1_variable_map` (models/checkpoints.py
  checks and assigns). So there are two maps, not three: everything that reads a TF1 release reads an
  HF directory through `tf1_values`.
- A torch `Linear` weight is `[out, in]`, a TF1 kernel `[in, out]`: "linear" rows of the table
  transpose; embeddings, LayerNorms (`weight`/`bias` <-> `gamma`/`beta`) and the originals' `[units, in]`
  `output_weights` do not.
- Tensors are read and written with safetensors' numpy API; no torch. Pickled `pytorch_model.bin` is
  refused with the command that converts it (unpickling runs code).
- A tensor the table does not know, or a table name the file lacks, is an error listing every one
  (models/checkpoints.py), never a partial load. Tied decoder weights (`cls.predictions.decoder.*`)
  are the word embeddings and the MLM bias, accepted only when equal to them.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import numpy as np

from textrain.framework.errors import UserError

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
PICKLED = ("pytorch_model.bin", "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "spiece.model")

# Architecture -> (family, head). The head decides the textrain model (models/hf_models.py).
ARCHITECTURES: dict[str, tuple[str, str]] = {
    "BertModel": ("bert", "encoder"),
    "BertForPreTraining": ("bert", "pretraining"),
    "BertForMaskedLM": ("bert", "masked_lm"),
    "BertForSequenceClassification": ("bert", "classification"),
    "BertForQuestionAnswering": ("bert", "question_answering"),
    "BertForTokenClassification": ("bert", "token_classification"),
    "ElectraForPreTraining": ("electra", "discriminator"),
    "ElectraForMaskedLM": ("electra", "generator"),
    "ElectraForSequenceClassification": ("electra", "classification"),
    "ElectraForQuestionAnswering": ("electra", "question_answering"),
    "ElectraForTokenClassification": ("electra", "token_classification"),
    "XLNetModel": ("xlnet", "encoder"),
    "XLNetLMHeadModel": ("xlnet", "lm"),
    "XLNetForSequenceClassification": ("xlnet", "classification"),
    "XLNetForQuestionAnswering": ("xlnet", "question_answering"),
    "XLNetForTokenClassification": ("xlnet", "token_classification"),
}
# HF heads that are not the original's: the textrain model's `head` variant that holds them (models/electra.py
# ElectraClassifier: dense, gelu, out_proj on [CLS]; models/qa_heads.py ElectraSquad: one linear start/end
# layer, where the original predicts the end from the start). Every other architecture holds "original".
HEAD_VARIANTS = {"ElectraForSequenceClassification": "hf", "ElectraForQuestionAnswering": "hf"}
# Parts of the textrain model an architecture does not hold (patterns of TF1 names): they stay freshly initialised
# when it is read, by textrain-convert and as an init_checkpoint. (BertForQuestionAnswering and
# BertForTokenClassification have no pooler: textrain's span head and tagger keep one they never use.)
ABSENT_PARTS = {"BertModel": (r"^cls/",), "BertForMaskedLM": (r"^cls/seq_relationship/", r"^bert/pooler/"),
                "BertForQuestionAnswering": (r"^bert/pooler/",), "BertForTokenClassification": (r"^bert/pooler/",),
                "XLNetModel": (r"^model/lm_loss/",)}
HF_ONLY_SCOPE = "hf_only_head"  # TF1 scope of such heads' tensors (no original checkpoint has it)
# The TF1 name of each such head's last layer: what tells a TF1-layout checkpoint's architecture.
HF_ONLY_HEADS = {"ElectraForSequenceClassification": f"{HF_ONLY_SCOPE}/classifier/out_proj",
                 "ElectraForQuestionAnswering": f"{HF_ONLY_SCOPE}/qa_outputs"}


class HFFormatError(UserError, ValueError):
    pass


@dataclasses.dataclass
class HFCheckpoint:
    """What an HF directory holds: its config, architecture and tensors by HF name."""

    path: str
    config: dict[str, Any]
    architecture: str
    tensors: dict[str, np.ndarray]

    @property
    def family(self) -> str:
        return ARCHITECTURES[self.architecture][0]

    @property
    def head(self) -> str:
        return ARCHITECTURES[self.architecture][1]


# ------------------------------------------------------------------------------------ detection, reading
def is_hf_directory(path: str) -> bool:
    """A `save_pretrained` directory (config.json beside safetensors or pickled weights)."""
    if not path or not os.path.isdir(path) or not os.path.exists(os.path.join(path, CONFIG)):
        return False
    return any(os.path.exists(os.path.join(path, n)) for n in (WEIGHTS, WEIGHTS_INDEX) + PICKLED)


def read_config(path: str) -> dict[str, Any]:
    file = os.path.join(path, CONFIG)
    try:
        with open(file, encoding="utf-8") as f:
            config = json.load(f)
    except json.JSONDecodeError as e:
        raise HFFormatError(f"{file}:{e.lineno}: not valid JSON: {e.msg}") from None
    if not isinstance(config, dict):
        raise HFFormatError(f"{file}: expected a JSON object, got {type(config).__name__}")
    check_fields(config, file)
    return config


# The size fields each family's table and config need (ints), and the optional numeric ones: checked when the
# file is read, so a missing or mistyped field is named with its file, not met as a KeyError further on.
_REQUIRED_INTS = {"bert": ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"),
                  "xlnet": ("vocab_size", "d_model", "n_layer", "n_head", "d_inner")}
_REQUIRED_INTS["electra"] = _REQUIRED_INTS["bert"]
_OPTIONAL_INTS = ("max_position_embeddings", "type_vocab_size", "embedding_size")
_OPTIONAL_NUMBERS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range", "layer_norm_eps",
                     "dropout")


def check_fields(config: dict[str, Any], file: str) -> None:
    """Each size field of the config's family present as an integer, each numeric field a number."""
    names = config.get("architectures") or []
    family = ARCHITECTURES[names[0]][0] if len(names) == 1 and names[0] in ARCHITECTURES else None
    if family is None:
        return  # architecture_of names what is wrong with `architectures`
    for field in _REQUIRED_INTS[family]:
        if field not in config:
            raise HFFormatError(f"{file}: field {field!r} is missing; a {family} config needs an integer there")
    for field in _REQUIRED_INTS[family] + _OPTIONAL_INTS:
        value = config.get(field)
        if field in config and value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise HFFormatError(f"{file}: field {field!r} is {value!r}; expected an integer")
    for field in _OPTIONAL_NUMBERS:
        value = config.get(field)
        if field in config and value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise HFFormatError(f"{file}: field {field!r} is {value!r}; expected a number")


def architecture_of(config: dict[str, Any], source: str) -> str:
    names = config.get("architectures") or []
    if len(names) != 1:
        raise HFFormatError(f"{source}: 'architectures' must name one architecture, got {names!r}")
    if names[0] not in ARCHITECTURES:
        raise HFFormatError(f"{source}: architecture {names[0]} is not one textrain converts; known: "
                            f"{', '.join(ARCHITECTURES)}")
    return names[0]


def weight_files(path: str) -> list[str]:
    """The safetensors files of `path` (one, or the shards its index lists); pickled weights refused."""
    if os.path.exists(os.path.join(path, WEIGHTS)):
        return [os.path.join(path, WEIGHTS)]
    index = os.path.join(path, WEIGHTS_INDEX)
    if os.path.exists(index):
        with open(index, encoding="utf-8") as f:
            shards = sorted(set(json.load(f).get("weight_map", {}).values()))
        missing = [s for s in shards if not os.path.exists(os.path.join(path, s))]
        if missing or not shards:
            raise HFFormatError(f"{index}: shards missing from {path}: {', '.join(missing) or '(index lists none)'}")
        return [os.path.join(path, s) for s in shards]
    for name in PICKLED:
        if os.path.exists(os.path.join(path, name)):
            raise HFFormatError(
                f"{os.path.join(path, name)} is a pickled PyTorch file, which textrain does not unpickle (it can "
                f"run code); write model.safetensors beside it where torch and transformers are installed: python3 -c "
                f"\"import json, transformers as t; d='{path}'; a=json.load(open(d + '/config.json'))['architectures'][0]; "
                f"getattr(t, a).from_pretrained(d).save_pretrained(d)\"")
    raise HFFormatError(f"{path}: no {WEIGHTS} or {WEIGHTS_INDEX}")


def read_hf_directory(path: str) -> HFCheckpoint:
    config = read_config(path)
    architecture = architecture_of(config, os.path.join(path, CONFIG))
    tensors: dict[str, np.ndarray] = {}
    for file in weight_files(path):
        tensors.update(read_safetensors(file))
    return HFCheckpoint(path, config, architecture, tensors)


def read_safetensors(file: str) -> dict[str, np.ndarray]:
    """The tensors of one safetensors file; a damaged one is an error naming it (safetensors' own message is
    about its header, not the file)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file
    try:
        return load_file(file)
    except SafetensorError as e:
        raise HFFormatError(f"{file}: truncated or not a safetensors file ({e})") from None


# ------------------------------------------------------------------------------------ the name tables
@dataclasses.dataclass(frozen=True)
class Row:
    """One HF module <-> one TF1 scope; `kind` says which tensors it has and whether they transpose."""

    hf: str
    tf1: str
    kind: str  # linear | linear_no_bias | layer_norm | embedding | matrix (originals' [units, in]) | tensor
    index: int | None = None  # kind "tensor": the HF tensor is row `index` of the TF1 one (XLNet's per-layer biases)

    def pairs(self) -> list[tuple[str, str, bool | int]]:
        """(hf name, tf1 name, transpose or the row index) of each tensor of the module."""
        if self.kind == "linear_no_bias":
            return [(f"{self.hf}.weight", f"{self.tf1}/kernel", True)]
        if self.kind == "linear":
            return [(f"{self.hf}.weight", f"{self.tf1}/kernel", True), (f"{self.hf}.bias", f"{self.tf1}/bias", False)]
        if self.kind == "layer_norm":
            return [(f"{self.hf}.weight", f"{self.tf1}/gamma", False), (f"{self.hf}.bias", f"{self.tf1}/beta", False)]
        if self.kind == "embedding":
            return [(f"{self.hf}.weight", self.tf1, False)]
        if self.kind == "matrix":
            return [(f"{self.hf}.weight", f"{self.tf1}/output_weights", False),
                    (f"{self.hf}.bias", f"{self.tf1}/output_bias", False)]
        if self.kind in ("bias", "tensor"):
            return [(self.hf, self.tf1, False if self.index is None else self.index)]
        raise ValueError(f"unknown row kind {self.kind!r}")


def _bert_layer(hf: str, tf1: str) -> list[Row]:
    return [Row(f"{hf}.attention.self.{p}", f"{tf1}/attention/self/{p}", "linear") for p in ("query", "key", "value")] + [
        Row(f"{hf}.attention.output.dense", f"{tf1}/attention/output/dense", "linear"),
        Row(f"{hf}.attention.output.LayerNorm", f"{tf1}/attention/output/LayerNorm", "layer_norm"),
        Row(f"{hf}.intermediate.dense", f"{tf1}/intermediate/dense", "linear"),
        Row(f"{hf}.output.dense", f"{tf1}/output/dense", "linear"),
        Row(f"{hf}.output.LayerNorm", f"{tf1}/output/LayerNorm", "layer_norm")]


def _bert_encoder(hf: str, tf1: str, layers: int, pooler: bool = True, embeddings: str | None = None,
                  project: bool = False) -> list[Row]:
    """BERT's embeddings, blocks and pooler under HF prefix `hf` ("" or "bert.") and TF1 scope `tf1`;
    ELECTRA's have `embeddings_project` and may read embeddings of another scope (its generator)."""
    emb = embeddings or f"{tf1}/embeddings"
    rows = [Row(f"{hf}embeddings.{e}_embeddings", f"{emb}/{e}_embeddings", "embedding")
            for e in ("word", "position", "token_type")]
    rows.append(Row(f"{hf}embeddings.LayerNorm", f"{emb}/LayerNorm", "layer_norm"))
    if project:
        rows.append(Row(f"{hf}embeddings_project", f"{tf1}/embeddings_project", "linear"))
    for i in range(layers):
        rows += _bert_layer(f"{hf}encoder.layer.{i}", f"{tf1}/encoder/layer_{i}")
    if pooler:
        rows.append(Row(f"{hf}pooler.dense", f"{tf1}/pooler/dense", "linear"))
    return rows


def _bert_mlm() -> list[Row]:
    return [Row("cls.predictions.transform.dense", "cls/predictions/transform/dense", "linear"),
            Row("cls.predictions.transform.LayerNorm", "cls/predictions/transform/LayerNorm", "layer_norm"),
            Row("cls.predictions.bias", "cls/predictions/output_bias", "bias")]


def _electra(config: dict[str, Any], tf1: str = "electra") -> list[Row]:
    project = int(config.get("embedding_size") or config["hidden_size"]) != int(config["hidden_size"])
    return _bert_encoder("electra.", tf1, int(config["num_hidden_layers"]), pooler=False,
                         embeddings="electra/embeddings", project=project)


def _xlnet(hf: str, layers: int) -> list[Row]:
    """XLNet's transformer: HF keeps the relative biases and segment embedding per layer, the original
    stacks them `[n_layer, ...]` (untie_r)."""
    tf1 = "model/transformer"
    rows = [Row(f"{hf}word_embedding", f"{tf1}/word_embedding/lookup_table", "embedding"),
            Row(f"{hf}mask_emb", f"{tf1}/mask_emb/mask_emb", "tensor")]
    for i in range(layers):
        layer, out = f"{hf}layer.{i}", f"{tf1}/layer_{i}"
        rows += [Row(f"{layer}.rel_attn.{p}", f"{out}/rel_attn/{p}/kernel", "tensor") for p in "qkvor"]
        rows += [Row(f"{layer}.rel_attn.{p}", f"{tf1}/{p}", "tensor", i) for p in ("r_w_bias", "r_r_bias", "r_s_bias",
                                                                                  "seg_embed")]
        rows += [Row(f"{layer}.rel_attn.layer_norm", f"{out}/rel_attn/LayerNorm", "layer_norm"),
                 Row(f"{layer}.ff.layer_1", f"{out}/ff/layer_1", "linear"),
                 Row(f"{layer}.ff.layer_2", f"{out}/ff/layer_2", "linear"),
                 Row(f"{layer}.ff.layer_norm", f"{out}/ff/LayerNorm", "layer_norm")]
    return rows


# The task name in the TF1 names of heads scoped by task (XLNet's classifier and tagger, ELECTRA's tagger) when
# they come from or go to an HF directory (textrain's default).
HF_TASK_NAME = "task"


def name_table(architecture: str, config: dict[str, Any]) -> list[tuple[str, str, bool | int]]:
    """Every tensor of `architecture`: (HF name, TF1 name, transpose or row index)."""
    if architecture.startswith("XLNet"):
        return _xlnet_table(architecture, int(config["n_layer"]))
    layers = int(config["num_hidden_layers"])
    rows: list[Row]
    if architecture == "BertModel":
        rows = _bert_encoder("", "bert", layers)
    elif architecture == "BertForPreTraining":
        rows = _bert_encoder("bert.", "bert", layers) + _bert_mlm() + [
            Row("cls.seq_relationship", "cls/seq_relationship", "matrix")]
    elif architecture == "BertForMaskedLM":
        rows = _bert_encoder("bert.", "bert", layers, pooler=False) + _bert_mlm()
    elif architecture == "BertForSequenceClassification":
        rows = _bert_encoder("bert.", "bert", layers) + [Row("classifier", "", "matrix")]
    elif architecture == "BertForQuestionAnswering":
        rows = _bert_encoder("bert.", "bert", layers, pooler=False) + [Row("qa_outputs", "cls/squad", "matrix")]
    elif architecture == "BertForTokenClassification":  # models/tagging_heads.py: the classifier's names
        rows = _bert_encoder("bert.", "bert", layers, pooler=False) + [Row("classifier", "", "matrix")]
    elif architecture == "ElectraForPreTraining":
        rows = _electra(config) + [
            Row("discriminator_predictions.dense", "discriminator_predictions/dense", "linear"),
            Row("discriminator_predictions.dense_prediction", "discriminator_predictions/dense_1", "linear")]
    elif architecture == "ElectraForMaskedLM":
        rows = _electra(config, "generator") + [
            Row("generator_predictions.dense", "generator_predictions/dense", "linear"),
            Row("generator_predictions.LayerNorm", "generator_predictions/LayerNorm", "layer_norm"),
            Row("generator_lm_head.bias", "generator_predictions/output_bias", "bias")]
    elif architecture == "ElectraForSequenceClassification":
        rows = _electra(config) + [Row(f"classifier.{p}", f"{HF_ONLY_SCOPE}/classifier/{p}", "linear")
                                   for p in ("dense", "out_proj")]
    elif architecture == "ElectraForQuestionAnswering":
        rows = _electra(config) + [Row("qa_outputs", f"{HF_ONLY_SCOPE}/qa_outputs", "linear")]
    elif architecture == "ElectraForTokenClassification":
        rows = _electra(config) + [Row("classifier", f"task_specific/{HF_TASK_NAME}/dense", "linear")]
    else:
        raise HFFormatError(f"architecture {architecture} is not one textrain converts; known: {', '.join(ARCHITECTURES)}")
    return [(h, t.lstrip("/"), tr) for row in rows for h, t, tr in row.pairs()]


def _xlnet_table(architecture: str, layers: int) -> list[tuple[str, str, bool | int]]:
    if architecture == "XLNetModel":
        rows = _xlnet("", layers)
    elif architecture == "XLNetLMHeadModel":
        rows = _xlnet("transformer.", layers) + [Row("lm_loss.bias", "model/lm_loss/bias", "bias")]
    elif architecture == "XLNetForSequenceClassification":
        rows = _xlnet("transformer.", layers) + [
            Row("sequence_summary.summary", "model/sequnece_summary/summary", "linear"),  # the original's spelling
            Row("logits_proj", f"model/classification_{HF_TASK_NAME}/logit", "linear")]
    elif architecture == "XLNetForQuestionAnswering":
        rows = _xlnet("transformer.", layers) + [
            Row("start_logits.dense", "start_logits/dense", "linear"),
            Row("end_logits.dense_0", "end_logits/dense_0", "linear"),
            Row("end_logits.LayerNorm", "end_logits/LayerNorm", "layer_norm"),
            Row("end_logits.dense_1", "end_logits/dense_1", "linear"),
            Row("answer_class.dense_0", "answer_class/dense_0", "linear"),
            Row("answer_class.dense_1", "answer_class/dense_1", "linear_no_bias")]
    elif architecture == "XLNetForTokenClassification":
        rows = _xlnet("transformer.", layers) + [Row("classifier", f"model/tagging_{HF_TASK_NAME}/logit", "linear")]
    else:
        raise HFFormatError(f"architecture {architecture} is not one textrain converts; known: {', '.join(ARCHITECTURES)}")
    return [pair for row in rows for pair in row.pairs()]


# Tied copies HF may store beside the tensors they repeat: HF name -> the HF name it must equal.
TIED = {"cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
        "cls.predictions.decoder.bias": "cls.predictions.bias",
        "generator_lm_head.weight": "electra.embeddings.word_embeddings.weight",
        "lm_loss.weight": "transformer.word_embedding.weight"}


def tf1_values(checkpoint: HFCheckpoint) -> dict[str, np.ndarray]:
    """The checkpoint's tensors under the originals' TF1 names. Unknown HF tensors are an error naming
    them; tensors the table expects but the file lacks are left out (the loader lists them as missing)."""
    table = name_table(checkpoint.architecture, checkpoint.config)
    known = {h for h, _, _ in table}
    unknown = []
    for name, value in checkpoint.tensors.items():
        if name in known:
            continue
        tied_to = TIED.get(name)
        if tied_to in checkpoint.tensors and np.array_equal(value, checkpoint.tensors[tied_to]):
            continue
        unknown.append(name)
    if unknown:
        raise HFFormatError(f"{checkpoint.path}: tensors that {checkpoint.architecture} does not have "
                            f"({len(unknown)}): {', '.join(sorted(unknown))}")
    values, rows = {}, {}
    for h, t, how in table:
        if h not in checkpoint.tensors:
            continue
        if how is True or how is False:
            values[t] = checkpoint.tensors[h].T if how else checkpoint.tensors[h]
        else:
            rows.setdefault(t, {})[how] = checkpoint.tensors[h]
    for t, parts in rows.items():
        if sorted(parts) == list(range(len(parts))) and len({p.shape for p in parts.values()}) == 1:
            values[t] = np.stack([parts[i] for i in range(len(parts))])  # a missing layer leaves it missing
    return values


def hf_tensors(architecture: str, config: dict[str, Any], values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`values` (TF1 names) as `architecture`'s HF tensors; every table name must be there."""
    table = name_table(architecture, config)
    missing = sorted(t for _, t, _ in table if t not in values)
    if missing:
        raise HFFormatError(f"{architecture} needs tensors the model does not have ({len(missing)}): "
                            f"{', '.join(missing)}")
    def one(t: str, how: bool | int) -> np.ndarray:
        if how is True or how is False:
            return values[t].T if how else values[t]
        return values[t][how]
    return {h: np.ascontiguousarray(one(t, how)) for h, t, how in table}


# ------------------------------------------------------------------------------------ configs
# HF's "gelu" is the erf form; the originals' (and textrain's) "gelu" is the tanh approximation.
HF_TO_TEXTRAIN_ACT = {"gelu": "gelu_exact", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "relu": "relu",
                      "tanh": "tanh"}
TEXTRAIN_TO_HF_ACT = {"gelu_exact": "gelu", "gelu": "gelu_new", "relu": "relu", "tanh": "tanh"}
BERT_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
               "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
               "type_vocab_size", "initializer_range")


def bert_config_dict(config: dict[str, Any], source: str) -> dict[str, Any]:
    """The original `bert_config.json` fields of an HF BERT config."""
    eps = float(config.get("layer_norm_eps", 1e-12))
    if abs(eps - 1e-12) > 1e-15:
        raise HFFormatError(f"{source}: layer_norm_eps {eps} differs from the 1e-12 textrain's BERT uses")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise HFFormatError(f"{source}: position_embedding_type {config['position_embedding_type']!r} is not "
                            f"BERT's 'absolute'")
    act = config.get("hidden_act", "gelu")
    if act not in HF_TO_TEXTRAIN_ACT:
        raise HFFormatError(f"{source}: hidden_act {act!r} has no textrain equivalent; known: "
                            f"{', '.join(HF_TO_TEXTRAIN_ACT)}")
    values = {k: config[k] for k in BERT_FIELDS if k in config}
    values["hidden_act"] = HF_TO_TEXTRAIN_ACT[act]
    return values


def electra_config_dicts(discriminator: dict[str, Any], generator: dict[str, Any] | None,
                         source: str) -> dict[str, Any]:
    """ElectraConfig fields from the discriminator's HF config and (if given) the generator's, whose
    width and depth textrain keeps as fractions of the discriminator's."""
    values = bert_config_dict(discriminator, source)
    values["embedding_size"] = int(discriminator.get("embedding_size") or discriminator["hidden_size"])
    if generator is None:
        return values
    gen = bert_config_dict(generator, source)
    hidden, layers = int(gen["hidden_size"]), int(gen["num_hidden_layers"])
    values["generator_hidden_size"] = hidden / values["hidden_size"]
    values["generator_layers"] = layers / values["num_hidden_layers"]
    derived = {"intermediate_size": 4 * hidden, "num_attention_heads": max(1, hidden // 64),
               "embedding_size": values["embedding_size"]}
    given = dict(gen, embedding_size=int(generator.get("embedding_size") or hidden))
    odd = [f"{k} {given[k]} (textrain's ELECTRA generator has {v})" for k, v in derived.items() if given[k] != v]
    if odd:
        raise HFFormatError(f"{source}: the generator's {'; '.join(odd)}")
    return values


def hf_bert_config(architecture: str, bert_config: dict[str, Any], num_labels: int | None = None) -> dict[str, Any]:
    """An HF `config.json` for a textrain BERT or ELECTRA network (`bert_config` as BertConfig.to_dict())."""
    if bert_config.get("hidden_act") not in TEXTRAIN_TO_HF_ACT:
        raise HFFormatError(f"hidden_act {bert_config.get('hidden_act')!r} has no Hugging Face equivalent")
    config = {k: bert_config[k] for k in BERT_FIELDS}
    electra = architecture.startswith("Electra")
    config.update(architectures=[architecture], model_type="electra" if electra else "bert", layer_norm_eps=1e-12,
                  hidden_act=TEXTRAIN_TO_HF_ACT[bert_config["hidden_act"]], pad_token_id=0,
                  position_embedding_type="absolute", tie_word_embeddings=True)
    if electra:
        config["embedding_size"] = int(bert_config.get("embedding_size") or bert_config["hidden_size"])
    if num_labels is not None:
        config["id2label"] = {str(i): f"LABEL_{i}" for i in range(num_labels)}
        config["label2id"] = {f"LABEL_{i}": i for i in range(num_labels)}
    return config


def xlnet_config_dict(config: dict[str, Any], source: str) -> dict[str, Any]:
    """The original `xlnet_config.json` keys of an HF XLNet config."""
    eps = float(config.get("layer_norm_eps", 1e-12))
    if abs(eps - 1e-12) > 1e-15:
        raise HFFormatError(f"{source}: layer_norm_eps {eps} differs from the 1e-12 textrain's XLNet uses")
    if config.get("attn_type", "bi") != "bi":
        raise HFFormatError(f"{source}: attn_type {config['attn_type']!r}: textrain converts 'bi' XLNets")
    act = config.get("ff_activation", "gelu")
    if act not in HF_TO_TEXTRAIN_ACT or HF_TO_TEXTRAIN_ACT[act] not in ("gelu", "gelu_exact", "relu"):
        raise HFFormatError(f"{source}: ff_activation {act!r} has no textrain XLNet equivalent")
    d_model, n_head = int(config["d_model"]), int(config["n_head"])
    return {"n_layer": int(config["n_layer"]), "d_model": d_model, "n_head": n_head, "d_head": d_model // n_head,
            "d_inner": int(config["d_inner"]), "ff_activation": HF_TO_TEXTRAIN_ACT[act], "untie_r": True,
            "n_token": int(config["vocab_size"])}


def hf_xlnet_config(architecture: str, xlnet: dict[str, Any], num_labels: int | None = None,
                    n_top: tuple[int, int] = (5, 5)) -> dict[str, Any]:
    """An HF `config.json` for a textrain XLNet (`xlnet` as the original xlnet_config.json keys)."""
    if xlnet["d_head"] * xlnet["n_head"] != xlnet["d_model"]:
        raise HFFormatError(f"d_head {xlnet['d_head']} x n_head {xlnet['n_head']} != d_model {xlnet['d_model']}: "
                            f"transformers' XLNet needs d_head = d_model / n_head")
    config = {"architectures": [architecture], "model_type": "xlnet", "vocab_size": xlnet["n_token"],
              "d_model": xlnet["d_model"], "n_layer": xlnet["n_layer"], "n_head": xlnet["n_head"],
              "d_inner": xlnet["d_inner"], "ff_activation": TEXTRAIN_TO_HF_ACT[xlnet["ff_activation"]],
              "untie_r": True, "attn_type": "bi", "layer_norm_eps": 1e-12, "bi_data": False, "clamp_len": -1,
              "same_length": False, "summary_type": "last", "summary_use_proj": True, "summary_activation": "tanh",
              "summary_last_dropout": 0.1, "start_n_top": n_top[0], "end_n_top": n_top[1],
              "tie_word_embeddings": True}
    if num_labels is not None:
        config["id2label"] = {str(i): f"LABEL_{i}" for i in range(num_labels)}
        config["label2id"] = {f"LABEL_{i}": i for i in range(num_labels)}
    return config


def label_names(config: dict[str, Any]) -> list[str] | None:
    """id2label's names in id order (None without one)."""
    id2label = config.get("id2label")
    if not id2label:
        return None
    return [str(id2label[k]) for k in sorted(id2label, key=int)]


def num_labels(config: dict[str, Any]) -> int:
    if "id2label" in config:
        return len(config["id2label"])
    return int(config.get("num_labels", 2))


# ------------------------------------------------------------------------------------ tokenizer files
def do_lower_case(path: str) -> bool | None:
    """`do_lower_case` of the directory's tokenizer config (None when it does not say)."""
    file = os.path.join(path, "tokenizer_config.json")
    if not os.path.exists(file):
        return None
    with open(file, encoding="utf-8") as f:
        value = json.load(f).get("do_lower_case")
    return None if value is None else bool(value)


def vocab_size_of(path: str) -> int | None:
    """Entries of the directory's vocabulary (vocab.txt, spiece.model, else tokenizer.json), None if none."""
    spiece = os.path.join(path, "spiece.model")
    if os.path.exists(spiece):
        import sentencepiece
        return int(sentencepiece.SentencePieceProcessor(model_file=spiece).get_piece_size())
    txt = os.path.join(path, "vocab.txt")
    if os.path.exists(txt):
        with open(txt, encoding="utf-8") as f:
            return sum(1 for _ in f)
    file = os.path.join(path, "tokenizer.json")
    if os.path.exists(file):
        with open(file, encoding="utf-8") as f:
            vocab = (json.load(f).get("model") or {}).get("vocab")
        return len(vocab) if isinstance(vocab, (dict, list)) else None
    return None


def wordpiece_vocab_from_tokenizer_json(file: str) -> list[str] | None:
    """The tokens of a `tokenizer.json` WordPiece model in id order (what vocab.txt lists), else None."""
    with open(file, encoding="utf-8") as f:
        model = json.load(f).get("model") or {}
    vocab = model.get("vocab")
    if model.get("type") != "WordPiece" or not isinstance(vocab, dict):
        return None
    tokens = sorted(vocab, key=vocab.get)
    if [vocab[t] for t in tokens] != list(range(len(tokens))):
        raise HFFormatError(f"{file}: the WordPiece ids are not 0..{len(tokens) - 1}")
    return tokens


def check_vocabulary(path: str, embedding_rows: int) -> None:
    """Refuse a vocabulary file whose size disagrees with the word embedding."""
    size = vocab_size_of(path)
    if size is not None and size != embedding_rows:
        raise HFFormatError(f"{path}: the vocabulary has {size} entries but the word embedding has "
                            f"{embedding_rows} rows (vocabulary of another model?)")


_SIZE_UNITS = {"GIB": 2 ** 30, "MIB": 2 ** 20, "KIB": 2 ** 10, "GB": 10 ** 9, "MB": 10 ** 6, "KB": 10 ** 3, "B": 1}


def parse_shard_size(value: str | int, flag: str = "--max_shard_size") -> int:
    """Bytes of a size as `save_pretrained`'s max_shard_size takes it: an integer, or a number with
    GB / MB / KB (powers of 10) or GiB / MiB / KiB (powers of 2)."""
    text = str(value).strip()
    upper = text.upper()
    for unit, factor in _SIZE_UNITS.items():
        if upper.endswith(unit):
            number, scale = upper[:-len(unit)].strip(), factor
            break
    else:
        number, scale = upper, 1
    try:
        size = int(float(number) * scale)
    except ValueError:
        size = 0
    if size <= 0:
        raise HFFormatError(f"{flag}={text}: expected a positive size such as 500MB, 2GB, 1GiB or a number of bytes")
    return size


def shard_names(tensors: dict[str, np.ndarray], max_shard_size: int) -> list[list[str]]:
    """The tensors' names in shards of at most `max_shard_size` bytes, in their order (as save_pretrained:
    a tensor larger than the limit gets a shard of its own)."""
    shards: list[list[str]] = [[]]
    size = 0
    for name, value in tensors.items():
        nbytes = int(np.asarray(value).size) * 4  # written as float32
        if shards[-1] and size + nbytes > max_shard_size:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    return shards


def write_weights(directory: str, tensors: dict[str, np.ndarray], max_shard_size: int | None = None) -> list[str]:
    """`model.safetensors`, or with `max_shard_size` (bytes) and more than one shard's worth the shards
    `model-0000i-of-0000n.safetensors` and `model.safetensors.index.json`; returns the files written."""
    shards = shard_names(tensors, max_shard_size) if max_shard_size else [list(tensors)]
    if len(shards) == 1:
        write_safetensors(os.path.join(directory, WEIGHTS), tensors)
        return [WEIGHTS]
    files, weight_map = [], {}
    for i, names in enumerate(shards, 1):
        file = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(os.path.join(directory, file), {n: tensors[n] for n in names})
        weight_map.update({n: file for n in names})
        files.append(file)
    total = sum(int(np.asarray(v).size) * 4 for v in tensors.values())
    with open(os.path.join(directory, WEIGHTS_INDEX), "w", encoding="utf-8") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
        f.write("\n")
    return files + [WEIGHTS_INDEX]


def write_safetensors(path: str, tensors: dict[str, np.ndarray]) -> None:
    from safetensors.numpy import save_file
    save_file({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in tensors.items()}, path,
              metadata={"format": "pt"})  # transformers reads files marked "pt" (torch tensors) only
