"""Parity of a textrain BERT pretraining run exported with `textrain-convert --to_hf` against transformers
itself: the same ids through textrain and through `transformers.BertForPreTraining.from_pretrained` must
give the same MLM and NSP logits.

transformers and torch are not textrain dependencies, so they run in a venv of their own, as a subprocess:

    python3 -m venv /tmp/hf-venv
    /tmp/hf-venv/bin/pip install torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl transformers safetensors
    python3 benchmarks/hf_parity.py --model_dir=demo_out/bert_tiny --model_size=tiny \
        --vocab_file=demo_out/data/bert_pretrain/vocab.txt --hf_python=/tmp/hf-venv/bin/python --out=/tmp/parity

Prints one JSON line (max |difference| of each output over the real tokens) and exits 1 above --tolerance.

    python3 benchmarks/hf_parity.py --fixtures=tests/data/hf --hf_python=/tmp/hf-venv/bin/python --out=/tmp/parity

instead converts every fixture HF -> textrain -> HF and loads each result with its transformers class: no
missing or unexpected tensor, and transformers' outputs equal those the fixture recorded (one line each).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
from absl import app, flags

flags.DEFINE_string("fixtures", None, "tests/data/hf: check that transformers loads every converted fixture.")
flags.DEFINE_string("model_dir", None, "A textrain BERT pretraining run (or a --to_textrain directory).")
flags.DEFINE_string("model_size", None, "The run's --model_size (without a textrain_model.json beside it).")
flags.DEFINE_string("config_file", None, "Or its bert_config.json.")
flags.DEFINE_string("vocab_file", None, "The run's vocab.txt (written beside the HF export).")
flags.DEFINE_string("hf_python", None, "python of a venv with torch and transformers.")
flags.DEFINE_string("out", "/tmp/hf_parity", "Working directory (the HF export, inputs and outputs).")
flags.DEFINE_integer("batch", 4, "Rows of random ids.")
flags.DEFINE_integer("length", 64, "Their length (the last rows padded).")
flags.DEFINE_float("tolerance", 1e-4, "Largest accepted |difference| of a logit.")
FLAGS = flags.FLAGS

# Runs in the transformers venv: the exported directory through BertForPreTraining.
HF_SCRIPT = """
import sys, torch, transformers
from safetensors.numpy import load_file, save_file
hf_dir, inputs, outputs = sys.argv[1:4]
x = {k: torch.from_numpy(v).long() for k, v in load_file(inputs).items()}
model = transformers.BertForPreTraining.from_pretrained(hf_dir).eval()
with torch.no_grad():
    out = model(input_ids=x["input_ids"], attention_mask=x["input_mask"], token_type_ids=x["segment_ids"])
save_file({"mlm_logits": out.prediction_logits.numpy(), "nsp_logits": out.seq_relationship_logits.numpy()}, outputs)
print("transformers", transformers.__version__, "torch", torch.__version__)
"""


# Runs in the transformers venv: each exported fixture through its own class, against the fixture's outputs.
HF_FIXTURES_SCRIPT = """
import json, os, sys, numpy as np, torch, transformers
from safetensors.numpy import load_file
transformers.logging.set_verbosity_error()
fixtures, exported = sys.argv[1:3]
for arch in sorted(os.listdir(exported)):
    io = load_file(os.path.join(fixtures, arch, "io.safetensors"))
    model, info = getattr(transformers, arch).from_pretrained(os.path.join(exported, arch), output_loading_info=True)
    x = {k: torch.from_numpy(io[k]).long() for k in ("input_ids", "attention_mask", "token_type_ids")}
    with torch.no_grad():
        out = model.eval()(**x, output_hidden_states=True)
    real, worst = io["attention_mask"].astype(bool), 0.0
    for k, v in out.items():
        key = "out.sequence_output" if k == "hidden_states" else "out." + k
        if key not in io:
            continue
        v, w = (v[-1] if k == "hidden_states" else v).numpy(), io[key]
        if v.ndim == 3 and v.shape[:2] == real.shape:
            v, w = v[real], w[real]
        worst = max(worst, float(np.abs(v - w).max()))
    print(json.dumps({"architecture": arch, "missing": sorted(info["missing_keys"]),
                      "unexpected": sorted(info["unexpected_keys"]), "max_abs_diff": worst}))
"""


def check_fixtures() -> None:
    """Every fixture HF -> textrain -> HF, then loaded by transformers (see the module docstring)."""
    from textrain.models import hf_format
    from textrain.trainers import convert
    exported = os.path.join(FLAGS.out, "exported")
    for arch in sorted(os.listdir(FLAGS.fixtures)):
        source = os.path.join(FLAGS.fixtures, arch)
        if not hf_format.is_hf_directory(source) or arch == "ElectraForMaskedLM":
            continue
        electra = arch == "ElectraForPreTraining"
        textrain_dir = os.path.join(FLAGS.out, "textrain", arch)
        if not os.path.exists(textrain_dir):
            convert.convert(from_hf=source, to_textrain=textrain_dir,
                            hf_generator=os.path.join(FLAGS.fixtures, "ElectraForMaskedLM") if electra else None)
        if not os.path.exists(os.path.join(exported, arch)):
            convert.convert(from_textrain=textrain_dir, to_hf=os.path.join(exported, arch),
                            to_hf_generator=os.path.join(exported, "ElectraForMaskedLM") if electra else None)
    result = subprocess.run([FLAGS.hf_python, "-c", HF_FIXTURES_SCRIPT, FLAGS.fixtures, exported],
                            capture_output=True, text=True, check=False)
    if result.returncode:
        sys.exit(f"transformers failed:\n{result.stderr[-3000:]}")
    print(result.stdout.strip())
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    if any(r["missing"] or r["unexpected"] or r["max_abs_diff"] > FLAGS.tolerance for r in rows):
        sys.exit(1)


def random_inputs(vocab_size: int, batch: int, length: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.RandomState(seed)
    ids = rng.randint(5, vocab_size, size=(batch, length)).astype(np.int32)
    mask = np.ones_like(ids)
    for row in range(1, batch):
        mask[row, length - row * length // (2 * batch):] = 0
    segments = np.zeros_like(ids)
    segments[:, length // 2:] = 1
    return {"input_ids": ids * mask, "input_mask": mask, "segment_ids": segments * mask}


def main(argv: list[str]) -> None:
    import tensorflow as tf
    from safetensors.numpy import load_file, save_file

    from textrain.trainers import convert

    os.makedirs(FLAGS.out, exist_ok=True)
    if FLAGS.fixtures:
        check_fixtures()
        return
    if not FLAGS.model_dir:
        sys.exit("give --model_dir (a pretraining run) or --fixtures")
    hf_dir = os.path.join(FLAGS.out, "hf")
    exchange = convert.read_textrain(FLAGS.model_dir, "bert", FLAGS.config_file, None, FLAGS.vocab_file,
                                     FLAGS.model_size)
    if not os.path.exists(hf_dir):
        convert.write_atomically(hf_dir, lambda d: convert.write_hf(exchange, d))
    model = convert.load_into_model(exchange, FLAGS.model_dir)
    x = random_inputs(exchange.config["vocab_size"], FLAGS.batch, FLAGS.length)
    save_file(x, os.path.join(FLAGS.out, "inputs.safetensors"))
    ids = {k: tf.constant(v) for k, v in x.items()}
    sequence, pooled = model.bert(ids["input_ids"], ids["input_mask"], ids["segment_ids"])
    ours = {"mlm_logits": np.asarray(model.masked_lm(sequence)), "nsp_logits": np.asarray(model.next_sentence(pooled))}
    result = subprocess.run([FLAGS.hf_python, "-c", HF_SCRIPT, hf_dir, os.path.join(FLAGS.out, "inputs.safetensors"),
                             os.path.join(FLAGS.out, "hf_outputs.safetensors")], capture_output=True, text=True, check=False)
    if result.returncode:
        sys.exit(f"transformers failed:\n{result.stderr[-3000:]}")
    theirs = load_file(os.path.join(FLAGS.out, "hf_outputs.safetensors"))
    real = x["input_mask"].astype(bool)
    diff = {"mlm_logits": float(np.abs(ours["mlm_logits"][real] - theirs["mlm_logits"][real]).max()),
            "nsp_logits": float(np.abs(ours["nsp_logits"] - theirs["nsp_logits"]).max())}
    agree = float((ours["mlm_logits"][real].argmax(-1) == theirs["mlm_logits"][real].argmax(-1)).mean())
    print(json.dumps({"model_dir": FLAGS.model_dir, "hf_dir": hf_dir, "real_tokens": int(real.sum()),
                      "max_abs_diff": diff, "mlm_argmax_agreement": agree,
                      "logit_scale": float(np.abs(theirs["mlm_logits"]).max()),
                      "versions": result.stdout.strip()}))
    if max(diff.values()) > FLAGS.tolerance:
        sys.exit(1)


if __name__ == "__main__":
    flags.mark_flags_as_required(["hf_python"])
    app.run(main)
