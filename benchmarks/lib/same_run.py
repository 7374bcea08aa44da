"""What every side-by-side benchmark shares: run a command as a fresh process and measure it, run an
original's script unchanged, and build a plain-text corpus of a given size from ../shared/corpora/en.

A ratio counts only when both sides ran in the same benchmark run on the same machine, so
both sides go through `run_measured`: a fresh process each (both include their imports),
CPU seconds of the whole process tree (reaped descendants included; the per-core measure, less distorted
than wall time on a shared machine) and peak RSS of the tree, sampled every 20 ms from /proc.

The originals live unchanged in ../shared/originals/ with `run_original.py`, which runs them on TF 2.21
(`import tensorflow` -> tensorflow.compat.v1). They read plain text only, hence `plain_corpus`.
"""
from __future__ import annotations

import glob
import gzip
import os
import resource
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.environ.get("TEXTRAIN_SHARED") or os.path.join(os.path.dirname(REPO), "shared")  # CI: beside the clone
CORPUS_EN = os.path.join(SHARED, "corpora", "en")
ORIGINALS = os.path.join(SHARED, "originals")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except OSError:
        return 0


class PeakRss:
    """Samples the RSS of a process and all its descendants until stopped."""

    def __init__(self, pid: int, every: float = 0.02):
        self.pid, self.every = pid, every
        self.total = self.single = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            pids, todo = [], [self.pid]
            while todo:
                p = todo.pop()
                pids.append(p)
                todo.extend(_children(p))
            sizes = [_rss_bytes(p) for p in pids]
            self.total = max(self.total, sum(sizes))
            self.single = max(self.single, max(sizes))
            time.sleep(self.every)

    def stop(self) -> tuple[float, float]:
        """(peak RSS of the tree, peak RSS of its largest process), MiB."""
        self._stop.set()
        self._thread.join()
        return self.total / 2**20, self.single / 2**20


def children_cpu() -> float:
    """CPU seconds (user + system) of every reaped child of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _become_subreaper() -> bool:
    """Linux: orphaned descendants are re-parented to this process (not init), so it can reap them and
    their CPU lands in RUSAGE_CHILDREN (prctl PR_SET_CHILD_SUBREAPER). False where unavailable."""
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _child_pids() -> set[int]:
    """This process's children now (Linux /proc)."""
    me, pids = os.getpid(), set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == me:  # field 4, after the command name in parentheses
                pids.add(int(entry))
    return pids


def _reap_adopted(before: set[int]) -> None:
    """Wait for the children that were not there before the command ran (its adopted orphans). Children the
    caller already had (a pytest run's own multiprocessing fork server) are left alone: waiting for any
    child would wait for them forever."""
    while True:
        new = _child_pids() - before
        if not new:
            return
        for pid in new:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def run_measured(cmd: list[str], cwd: str = REPO, env: dict | None = None, adopt_orphans: bool = False) -> dict:
    """Runs `cmd` to completion: wall s, CPU s of its process tree, peak RSS MiB (tree and largest
    process) and its output. A failure raises with the tail of the output.

    `adopt_orphans`: also count processes the command leaves running when it exits, e.g. a
    multiprocessing forkserver (it reaps the pool workers it forked, but nobody reaps it, so without this
    its and its workers' CPU escape RUSAGE_CHILDREN): this process becomes their subreaper and waits for
    them. Only for callers that run nothing else in the background."""
    before = set()
    if adopt_orphans:
        _become_subreaper()
        before = _child_pids()
    cpu0, start = children_cpu(), time.time()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    rss = PeakRss(proc.pid)
    out, _ = proc.communicate()
    if adopt_orphans:
        _reap_adopted(before)
    wall = time.time() - start
    total, single = rss.stop()
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed ({proc.returncode}):\n{out[-3000:]}")
    return dict(wall=wall, cpu=children_cpu() - cpu0, rss_mib=total, rss_single_mib=single, output=out)


def original_cmd(script: str, args: list[str]) -> list[str]:
    """The command that runs ../shared/originals/<script> (e.g. "bert/create_pretraining_data.py")
    unchanged on this TensorFlow. Raises FileNotFoundError when the originals are not beside the repo."""
    runner = os.path.join(ORIGINALS, "run_original.py")
    path = os.path.join(ORIGINALS, script)
    for p in (runner, path):
        if not os.path.exists(p):
            raise FileNotFoundError(f"{p} not found: the originals are expected in ../shared/originals")
    return [sys.executable, runner, path, *args]


def import_original(script: str, module_name: str | None = None):
    """Imports ../shared/originals/<script> (e.g. "bert/tokenization.py") unchanged as a module, with
    `import tensorflow` giving tf.compat.v1 while it loads (as run_original.py does; the real module is put
    back afterwards). For comparing with an original's functions in-process (tokenizers). Raises
    FileNotFoundError when the originals are not beside the repo."""
    import importlib.util

    import tensorflow as tf
    path = os.path.join(ORIGINALS, script)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not found: the originals are expected in ../shared/originals")
    name = module_name or "original_" + os.path.splitext(script)[0].replace("/", "_")
    real = sys.modules["tensorflow"]
    sys.modules["tensorflow"] = tf.compat.v1
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.modules["tensorflow"] = real
    return module


def plain_corpus(out_path: str, min_mb: float, sources: list[str] | None = None) -> str:
    """Writes a plain UTF-8 text corpus of at least `min_mb` MB (whole documents, in the corpus's own
    format: one sentence per line, a blank line between documents) from ../shared/corpora/en/*.txt.gz
    (or `sources`, in that order), cycling through them only if they hold less. Kept when it exists with
    the same size request (the name should carry the size). Returns `out_path`."""
    if os.path.exists(out_path):
        return out_path
    sources = sources or sorted(glob.glob(os.path.join(CORPUS_EN, "*.txt.gz")))
    if not sources:
        raise FileNotFoundError(f"no *.txt.gz in {CORPUS_EN}")
    target, written = int(min_mb * 1e6), 0
    tmp = out_path + ".tmp"
    with open(tmp, "wb") as dst:
        while written < target:
            for src in sources:
                with gzip.open(src, "rb") as f:
                    data = f.read()
                if not data.endswith(b"\n\n"):
                    data = data.rstrip(b"\n") + b"\n\n"
                dst.write(data)
                written += len(data)
                if written >= target:
                    break
    os.replace(tmp, out_path)
    return out_path


def ratio_line(name: str, ours: dict, original: dict, corpus_tokens: int) -> str:
    """One line: tokens per CPU-second and per wall-second of both sides and ours / original."""
    def per(d: dict, key: str) -> float:
        return corpus_tokens / d[key]
    return (f"{name}: tokens/CPU-s ours {per(ours, 'cpu'):,.0f} vs original {per(original, 'cpu'):,.0f} "
            f"= {original['cpu'] / ours['cpu']:.2f}x per core; tokens/wall-s ours {per(ours, 'wall'):,.0f} "
            f"vs {per(original, 'wall'):,.0f} = {original['wall'] / ours['wall']:.2f}x; peak RSS ours "
            f"{ours['rss_mib']:,.0f} MiB vs {original['rss_mib']:,.0f} MiB")
