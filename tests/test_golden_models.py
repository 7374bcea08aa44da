"""Goldens: one small checkpoint per model, restored and run forward on fixed inputs.

Each model's checkpoint (tests/golden/models/<model>/, `tf.train.Checkpoint(model=...)` as the trainers and
textrain-export read it) was written once by `python3 tests/test_golden_models.py --write` on the code before
the refactors that gave a run one assembly; its forward outputs are in tests/golden/models.json. The test builds the model again,
restores that checkpoint (every variable of the model must be matched: checkpoint keys are pinned) and compares
the outputs. A change to a constructor's signature changes only `build_<model>` below; a change to a checkpoint
key or to the math fails here.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import tensorflow as tf  # noqa: E402

from textrain.models import bert, electra, transformer, xlnet  # noqa: E402

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")
OUTPUTS = os.path.join(GOLDEN, "models.json")
VOCAB = 48
BATCH, LENGTH = 2, 12


def _ids(seed: int, shape: tuple[int, ...], low: int = 5, high: int = VOCAB) -> np.ndarray:
    return np.random.default_rng(seed).integers(low, high, size=shape).astype(np.int32)


def _bert_features() -> dict[str, np.ndarray]:
    mask = np.ones((BATCH, LENGTH), np.int32)
    mask[1, 9:] = 0
    return {"input_ids": _ids(1, (BATCH, LENGTH)) * mask, "input_mask": mask,
            "segment_ids": np.array([[0] * 6 + [1] * 6, [0] * 4 + [1] * 5 + [0] * 3], np.int32),
            "masked_lm_positions": np.array([[1, 3, 7], [2, 5, 0]], np.int32)}


def build_bert() -> tuple[tf.keras.Model, callable]:
    config = bert.BertConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                             intermediate_size=32, max_position_embeddings=32)
    model = bert.BertPretrainer(config)

    def forward() -> dict[str, tf.Tensor]:
        out = model(_bert_features(), training=False)
        return {k: out[k] for k in ("mlm_logits", "nsp_logits", "sequence_output", "pooled_output")}
    return model, forward


def build_electra() -> tuple[tf.keras.Model, callable]:
    config = electra.ElectraConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                   intermediate_size=32, max_position_embeddings=32, embedding_size=8,
                                   generator_hidden_size=0.5)
    model = electra.ElectraPretrainer(config)

    def forward() -> dict[str, tf.Tensor]:
        f = _bert_features()
        f["input_ids"][:, 0] = 101 % VOCAB  # arbitrary ids; the special ids come from the Google vocab
        disc = model.discriminator_logits(f["input_ids"], f["input_mask"], f["segment_ids"])
        gen = model.generator_logits(f["input_ids"], f["input_mask"], f["segment_ids"], f["masked_lm_positions"])
        return {"disc_logits": disc, "generator_logits": gen}
    return model, forward


def build_xlnet() -> tuple[tf.keras.Model, callable]:
    config = xlnet.XLNetConfig(n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=32, n_token=VOCAB,
                               dropout=0.0, dropatt=0.0)
    model = xlnet.XLNetPretrainer(config)
    rng = np.random.default_rng(3)
    perm = (rng.random((BATCH, LENGTH, LENGTH)) < 0.4).astype(np.float32)
    predicted = 3
    mapping = np.zeros((BATCH, predicted, LENGTH), np.float32)
    for b in range(BATCH):
        for p, pos in enumerate((2, 5, 9)):
            mapping[b, p, pos + b] = 1.0
    features = {"input_k": _ids(4, (BATCH, LENGTH)),
                "input_q": (mapping.sum(1) > 0).astype(np.float32),
                "seg_id": np.array([[0] * 7 + [1] * 4 + [2], [0] * 5 + [1] * 6 + [2]], np.int32),
                "perm_mask": perm, "target_mapping": mapping,
                "target": _ids(5, (BATCH, predicted)), "target_mask": np.ones((BATCH, predicted), np.float32)}

    def forward() -> dict[str, tf.Tensor]:
        return {"logits": model(features, training=False)["logits"]}
    return model, forward


def build_transformer() -> tuple[tf.keras.Model, callable]:
    hp = transformer.TransformerHParams(hidden_size=16, filter_size=32, num_heads=2, num_hidden_layers=2)
    model = transformer.Transformer(hp, input_vocab_size=VOCAB, target_vocab_size=VOCAB)
    inputs = _ids(6, (BATCH, 9), low=2)
    inputs[1, 6:] = 0
    targets = _ids(7, (BATCH, 7), low=2)
    targets[0, 5:] = 0

    def forward() -> dict[str, tf.Tensor]:
        return {"logits": model({"inputs": inputs, "targets": targets}, training=False)}
    return model, forward


BUILDERS = {"bert": build_bert, "electra": build_electra, "xlnet": build_xlnet, "transformer": build_transformer}


def _summary(value: tf.Tensor) -> dict:
    a = np.asarray(value, np.float64)
    return {"shape": list(a.shape), "sum": float(a.sum()), "abs_sum": float(np.abs(a).sum()),
            "head": [float(v) for v in a.reshape(-1)[:8]]}


def _checkpoint_prefix(name: str) -> str:
    return os.path.join(GOLDEN, "models", name, "ckpt-1")


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_checkpoint_restores_and_forward_outputs_match(name):
    with open(OUTPUTS, encoding="utf-8") as f:
        golden = json.load(f)[name]
    model, forward = BUILDERS[name]()
    status = tf.train.Checkpoint(model=model).read(_checkpoint_prefix(name))
    status.assert_existing_objects_matched()  # every variable of the model found its checkpoint value
    keys = sorted(k for k, _ in tf.train.list_variables(_checkpoint_prefix(name)) if k.startswith("model/"))
    assert keys == golden["checkpoint_keys"]
    got = {k: _summary(v) for k, v in forward().items()}
    assert sorted(got) == sorted(golden["outputs"])
    for key, want in golden["outputs"].items():
        assert got[key]["shape"] == want["shape"], key
        np.testing.assert_allclose([got[key]["sum"], got[key]["abs_sum"]], [want["sum"], want["abs_sum"]],
                                   rtol=1e-4, atol=1e-4, err_msg=key)
        np.testing.assert_allclose(got[key]["head"], want["head"], rtol=1e-4, atol=1e-5, err_msg=key)


def write_goldens() -> None:
    tf.keras.utils.set_random_seed(21)
    golden = {}
    for name, build in sorted(BUILDERS.items()):
        model, forward = build()
        # Non-zero everywhere (layer-norm gains and biases too), so a swapped or dropped variable shows.
        rng = np.random.default_rng(len(name))
        for var in model.variables:
            dtype = tf.as_dtype(var.dtype)
            if dtype.is_floating:
                var.assign(rng.normal(0.0, 0.2, var.shape).astype(dtype.as_numpy_dtype))
        prefix = tf.train.Checkpoint(model=model).write(_checkpoint_prefix(name))
        keys = sorted(k for k, _ in tf.train.list_variables(prefix) if k.startswith("model/"))
        golden[name] = {"checkpoint_keys": keys, "outputs": {k: _summary(v) for k, v in forward().items()}}
    with open(OUTPUTS, "w", encoding="utf-8") as f:
        json.dump(golden, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python3 tests/test_golden_models.py --write   (only on the code the goldens pin)")
    write_goldens()
