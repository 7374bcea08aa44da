"""Lines of the library's largest modules and functions at a git revision (before/after figures of a refactor).

    python3 scripts/module_sizes.py REV      # e.g. 10d19e5 or HEAD
"""
import ast
import subprocess
import sys

LIBRARY = ("framework", "problems", "models", "trainers")


def main(rev: str) -> None:
    listing = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev], capture_output=True, text=True, check=True)
    files = [f for f in listing.stdout.split() if f.endswith(".py") and f.split("/")[0] in LIBRARY]
    modules, functions = [], []
    for f in files:
        src = subprocess.run(["git", "show", f"{rev}:{f}"], capture_output=True, text=True, check=True).stdout
        modules.append((src.count("\n"), f))
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions.append((node.end_lineno - node.lineno + 1, f"{f}:{node.name}"))
    modules.sort(reverse=True)
    functions.sort(reverse=True)
    print(f"{rev}: {len(files)} modules, {sum(n for n, _ in modules)} lines")
    print(" largest modules:", "; ".join(f"{f} {n}" for n, f in modules[:8]))
    print(" largest functions:", "; ".join(f"{f} {n}" for n, f in functions[:8]))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "HEAD")
