"""Writes the Hugging Face fixtures of tests/test_hf_convert.py: one tiny random model per architecture,
saved with `save_pretrained`, plus fixed inputs and transformers' own outputs for them.

Run once, in a venv of its own (CI needs only safetensors; the fixtures are committed):

    python3 -m venv /tmp/hf-venv
    /tmp/hf-venv/bin/pip install torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl transformers safetensors
    /tmp/hf-venv/bin/python tests/data/hf/make_fixtures.py tests/data/hf [ARCHITECTURE ...]

Naming architectures writes only those (the others' committed files stay as they are); each keeps its seed.
Versions used for the committed fixtures: torch 2.13.0+cpu, transformers 5.24.0, safetensors 0.8.0 (all of
them, the *ForTokenClassification ones included; re-running every architecture with these versions rewrites
the committed files byte for byte).

Every parameter is moved by N(0, 0.05) after initialisation, so a LayerNorm or bias that an import skips
(left at its init value) changes the outputs. `<arch>/io.safetensors` holds the inputs (`input_ids`,
`attention_mask`, `token_type_ids`) and the outputs (`out.<name>`) of the model in eval mode.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np
import torch
import transformers
from safetensors.numpy import save_file

VOCAB = 99  # odd, so a transposed embedding cannot fit by accident
SMALL = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
             max_position_embeddings=40, type_vocab_size=2, vocab_size=VOCAB)
BERT_ARCHS = ("BertModel", "BertForPreTraining", "BertForMaskedLM", "BertForSequenceClassification",
              "BertForQuestionAnswering")
ELECTRA_ARCHS = ("ElectraForPreTraining", "ElectraForMaskedLM", "ElectraForSequenceClassification",
                 "ElectraForQuestionAnswering")
XLNET_ARCHS = ("XLNetModel", "XLNetLMHeadModel", "XLNetForSequenceClassification", "XLNetForQuestionAnswering")
# Added after the others (so their seeds are unchanged): a tagger's labels, named as a BIO scheme's.
TOKEN_ARCHS = ("BertForTokenClassification", "ElectraForTokenClassification", "XLNetForTokenClassification")
TAGS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")


def inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.RandomState(seed)
    ids = rng.randint(5, VOCAB, size=(2, 12)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[1, 9:] = 0  # padding at the end of the second row
    types = np.zeros_like(ids)
    types[:, 6:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def config_for(arch: str) -> transformers.PretrainedConfig:
    if arch in TOKEN_ARCHS:
        config = config_for(arch.replace("ForTokenClassification", "ForSequenceClassification"))
        config.id2label = dict(enumerate(TAGS))
        config.label2id = {t: i for i, t in enumerate(TAGS)}
        return config
    labels = 2 if arch.endswith("QuestionAnswering") else 3  # a span head has exactly start and end
    if arch.startswith("Bert"):
        return transformers.BertConfig(**SMALL, num_labels=labels)
    if arch.startswith("Electra"):
        # The generator of a real ELECTRA is smaller than its discriminator; the sizes differ here too.
        sizes = dict(SMALL, embedding_size=8)
        if arch == "ElectraForMaskedLM":
            sizes.update(hidden_size=8, num_attention_heads=1, intermediate_size=32)  # ELECTRA's FFN: 4x hidden
        return transformers.ElectraConfig(**sizes, num_labels=labels)
    return transformers.XLNetConfig(vocab_size=VOCAB, d_model=16, n_layer=2, n_head=2, d_inner=32,
                                    num_labels=3, start_n_top=3, end_n_top=3)


def outputs(arch: str, model: torch.nn.Module, x: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    if arch.startswith("XLNet"):
        x = {"input_ids": x["input_ids"], "attention_mask": x["attention_mask"], "token_type_ids": x["token_type_ids"]}
    with torch.no_grad():
        out = model(**x, output_hidden_states=True)
    found = {}
    for key, value in out.items():
        if key == "hidden_states":
            found["sequence_output"] = value[-1]
        elif isinstance(value, torch.Tensor):
            found[key] = value
    return {f"out.{k}": v.detach().numpy().astype(np.float32) if v.is_floating_point() else v.numpy()
            for k, v in found.items()}


def write_tokenizer(arch: str, path: str) -> None:
    if arch.startswith("XLNet"):
        return
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(VOCAB - 5)]
    with open(os.path.join(path, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("".join(w + "\n" for w in words))
    with open(os.path.join(path, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"do_lower_case": True, "tokenizer_class": "BertTokenizer"}, f, indent=2)


def make(arch: str, root: str, seed: int, made: dict[str, torch.nn.Module]) -> None:
    torch.manual_seed(seed)
    model = getattr(transformers, arch)(config_for(arch)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
        if arch == "ElectraForMaskedLM":
            # ELECTRA's generator and discriminator share their embeddings (as google/electra-*-generator
            # and -discriminator do), so the two fixtures combine into one textrain pretraining checkpoint.
            model.electra.embeddings.load_state_dict(made["ElectraForPreTraining"].electra.embeddings.state_dict())
    made[arch] = model
    path = os.path.join(root, arch)
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path)
    write_tokenizer(arch, path)
    x = inputs()
    io = dict(x)
    io.update(outputs(arch, model, {k: torch.from_numpy(v) for k, v in x.items()}))
    save_file(io, os.path.join(path, "io.safetensors"))
    print(arch, sorted(io))


def main(root: str, only: list[str]) -> None:
    made: dict[str, torch.nn.Module] = {}
    archs = BERT_ARCHS + ELECTRA_ARCHS + XLNET_ARCHS + TOKEN_ARCHS
    unknown = sorted(set(only) - set(archs))
    if unknown:
        sys.exit(f"unknown architectures: {', '.join(unknown)}; known: {', '.join(archs)}")
    for seed, arch in enumerate(archs):
        # ElectraForMaskedLM copies ElectraForPreTraining's embeddings, so that one is always built.
        if not only or arch in only or (arch == "ElectraForPreTraining" and "ElectraForMaskedLM" in only):
            make(arch, root, seed, made)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)), sys.argv[2:])
