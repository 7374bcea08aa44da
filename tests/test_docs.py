"""docs/ stays true to the code: every file, module and Python name that docs/CONTRACTS.md cites exists.

Checked statically (ast, no imports): a cited path (`framework/problem.py`, `configs/bert_base.gin`) must be a
file or folder of the repository; a dotted name under a package (`framework.records.SampleBatch`,
`models.base.Term`, `trainers.run.run`) must be defined at the top level of that module (or be a method or
attribute of a class defined there); a bare name written as a call or a class (`shard_rng(...)`, `StepOutput`)
must be defined somewhere in the library. A failure lists every missing name, so a rename is fixed in one pass.
The new-problem and new-model walk-throughs must show the classes and methods tests/usr_toy defines.
"""
from __future__ import annotations

import ast
import functools
import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("framework", "problems", "models", "trainers")
DOCS = os.path.join(REPO, "docs")
_PATH = re.compile(r"(?<![\w/.])((?:framework|problems|models|trainers|configs|tests|docs|benchmarks|scripts)"
                   r"/[\w/-]*(?:\.(?:py|md|gin|flags|sh|txt|json|model))?)")
_CODE = re.compile(r"`([^`\n]+)`")
_DOTTED = re.compile(r"^(?:textrain\.)?((?:framework|problems|models|trainers)(?:\.\w+)+)")
_BARE = re.compile(r"^([A-Za-z_]\w*)(\()?")


def _library_files() -> list[str]:
    out = []
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(REPO, package)):
            out += [os.path.join(folder, f) for f in files if f.endswith(".py")]
    return sorted(out)


@functools.lru_cache(maxsize=None)
def _tree(path: str) -> ast.Module:
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), path)


def _names(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """Top-level names a body defines: functions, classes, assignments (annotated too), imports."""
    out: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for n in ast.walk(target):
                    if isinstance(n, ast.Name):
                        out[n.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                out[(alias.asname or alias.name).split(".")[0]] = node
        elif isinstance(node, (ast.If, ast.Try)):
            out.update(_names(node.body))
    return out


@functools.lru_cache(maxsize=None)
def _defined_anywhere() -> frozenset[str]:
    names = set()
    for path in _library_files():
        for node in ast.walk(_tree(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
    return frozenset(names)


def _module_file(parts: list[str]) -> str | None:
    base = os.path.join(REPO, *parts)
    for candidate in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(candidate):
            return candidate
    return None


def dotted_exists(dotted: str) -> bool:
    """`framework.records.SampleBatch` / `models.base.TrainableModel.step_output` / `trainers.finetune`."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):  # the longest prefix that is a module
        path = _module_file(parts[:cut])
        if path is None:
            continue
        rest = parts[cut:]
        if not rest:
            return True
        names = _names(_tree(path).body)
        node = names.get(rest[0])
        if node is None:
            return False
        if len(rest) == 1:
            return True
        if isinstance(node, ast.ClassDef):  # a method / class attribute, defined in the class or its file
            return rest[1] in _names(node.body) or rest[1] in _defined_anywhere()
        return rest[1] in _defined_anywhere()
    return False


def _paths(text: str) -> set[str]:
    """Repository paths in `text`, leaving out patterns (`tests/test_golden_*.py`, `{data_dir}/...`)."""
    return {m.group(1) for m in _PATH.finditer(text)
            if not any(c in m.group(1) for c in "{}") and text[m.end():m.end() + 1] not in ("*", "<", "{")}


def cited(text: str) -> tuple[set[str], set[str], set[str]]:
    """(paths, dotted names, bare names) a Markdown text cites in code spans."""
    paths, dotted, bare = set(), set(), set()
    for span in _CODE.findall(text):
        span = span.strip()
        paths.update(_paths(span))
        m = _DOTTED.match(span)
        if m and m.group(1).rsplit(".", 1)[-1] in ("json", "py", "md", "gin", "txt"):  # a file name, not a module
            continue
        if m:
            dotted.add(m.group(1).rstrip("."))
            continue
        m = _BARE.match(span)
        if m and (m.group(2) or m.group(1)[0].isupper() and any(c.islower() for c in m.group(1))):
            bare.add(m.group(1))
    for heading in re.findall(r"^#+ .*$", text, flags=re.M):
        paths.update(_paths(heading))
    return paths, dotted, bare


# Names the text cites from outside the library (Python, TensorFlow, absl, gin, the originals).
EXTERNAL = {"Exception", "ValueError", "KeyError", "FileNotFoundError", "FloatingPointError", "OSError", "Protocol",
            "TPUStrategy", "MirroredStrategy", "OneDeviceStrategy", "MultiWorkerMirroredStrategy", "InputContext",
            "KeyboardInterrupt", "DataLossError", "UsageError", "RaggedTensor", "Dataset", "FixedLenFeature",
            "VarLenFeature", "Example", "Model", "Module", "Task", "GFile", "TFRecordWriter", "Checkpoint"}


def missing_names(doc: str) -> list[str]:
    with open(os.path.join(DOCS, doc), encoding="utf-8") as f:
        paths, dotted, bare = cited(f.read())
    missing = [p for p in sorted(paths) if not any(os.path.exists(os.path.join(REPO, p + ext)) for ext in ("", ".py"))]
    missing += [d for d in sorted(dotted) if not dotted_exists(d)]
    missing += [b for b in sorted(bare - EXTERNAL) if b not in _defined_anywhere()]
    return missing


def test_every_name_contracts_cites_exists():
    missing = missing_names("CONTRACTS.md")
    assert not missing, "docs/CONTRACTS.md cites names the code does not define: " + ", ".join(missing)


def test_the_checker_catches_a_missing_name():
    assert dotted_exists("framework.problem.Problem") and dotted_exists("models.base.TrainableModel.step_output")
    assert not dotted_exists("framework.problem.NoSuchThing") and not dotted_exists("framework.nosuchmodule.X")
    paths, dotted, bare = cited("see `framework/nope.py` and `framework.registry.nope` and `NoSuchClass`")
    assert paths == {"framework/nope.py"} and dotted == {"framework.registry.nope"} and bare == {"NoSuchClass"}


def test_walkthroughs_follow_usr_toy():
    """The walk-throughs quote tests/usr_toy: the classes and methods they show are the ones it defines."""
    toy = _names(_tree(os.path.join(REPO, "tests", "usr_toy", "__init__.py")).body)
    for doc, shown in (("new_problem.md", {"UsrToyProblem": ["dataset_splits", "generate_samples",
                                                            "example_reading_spec", "preprocess_example"]}),
                       ("new_model.md", {"UsrToyModel": ["step_output"]})):
        with open(os.path.join(DOCS, doc), encoding="utf-8") as f:
            text = f.read()
        assert "tests/usr_toy" in text, doc
        for cls, methods in shown.items():
            assert f"class {cls}(" in text and isinstance(toy.get(cls), ast.ClassDef), (doc, cls)
            assert all(f"def {m}(" in text and m in _names(toy[cls].body) for m in methods), (doc, cls)
