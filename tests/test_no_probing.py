"""Contracts are declared, not probed: no `hasattr(x, ...)` or `getattr(x, name, default)` in framework/, models/
and trainers/ but on objects the project does not own (TensorFlow, Keras, absl, Python), each listed here with why.
A model, problem or task says what it can do on its class (models/base.py, framework/problem.py,
framework/tasks.py); the trainers read it there."""
from __future__ import annotations

import ast
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("framework", "models", "trainers")

# (file, the probed object as written, the attribute) -> why it is not a project object.
ALLOWED = {
    ("framework/cli.py", "main", "__module__"): "a Python function",
    ("framework/tf_errors.py", "error", "message"): "a TensorFlow error",
    ("framework/word_segmenters.py", "encoder", "encode_batch"): "a third-party segmenter (jieba, MeCab, ...)",
    ("framework/settings.py", "hparams", "validate"): "a problem's HParams: a plain user dataclass, validate optional",
    ("models/layers/fused.py", "fn", "__name__"): "a Python callable",
    ("trainers/checkpoint_checks.py", "v", "path"): "a Keras 3 or tf variable",
    ("trainers/optimization.py", "var", "path"): "a Keras 3 or tf variable",
    ("trainers/checkpointing.py", "layer", "_seed_generators"): "a Keras layer",
    ("trainers/strategy.py", "strategy", "cluster_resolver"): "a tf.distribute strategy",
    ("trainers/trainer_flags.py", "values", "name"): "absl's FLAGS (or a namespace of flag values)",
    ("trainers/run.py", "problem.hparams", "max_seq_length"): "a task's HParams: not every task has the setting",
    ("framework/shuffle.py", "st", "mtime_nsec"): "a tf.io.gfile stat result (no mtime on some file systems)",
    ("framework/corpus_formats/jsonl.py", "f", "compressed_offset"): "a file object: gzip/bz2 or zstd's",
}
def _probes(path: str, rel: str):
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        name = node.func.id
        if (name == "hasattr" and len(node.args) == 2) or (name == "getattr" and len(node.args) == 3):
            attribute = node.args[1].value if isinstance(node.args[1], ast.Constant) else ast.unparse(node.args[1])
            yield (rel, ast.unparse(node.args[0]), attribute), node.lineno


def test_no_probing_of_project_objects():
    found, seen = [], set()
    for package in PACKAGES:
        for root, _, files in os.walk(os.path.join(REPO, package)):
            for file in files:
                if not file.endswith(".py"):
                    continue
                path = os.path.join(root, file)
                rel = os.path.relpath(path, REPO).replace(os.sep, "/")
                for key, line in _probes(path, rel):
                    seen.add(key)
                    if key not in ALLOWED:
                        found.append(f"{rel}:{line}: {key[1]} . {key[2]}")
    assert not found, "declare it in the contract instead of probing:\n" + "\n".join(found)
    assert not set(ALLOWED) - seen, f"allowed but gone (remove it): {sorted(set(ALLOWED) - seen)}"
