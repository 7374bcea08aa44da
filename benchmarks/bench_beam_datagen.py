"""bert_pretrain datagen on the Beam DirectRunner (1 and 2 workers) against local datagen: identical shards?
throughput, peak memory per worker.

    nice -n 10 /work/venv-beam/bin/python benchmarks/bench_beam_datagen.py [--mb 50] [--num_shards 16]

Run it with a Python that has apache-beam (`pip install -e ".[beam]"`, or a venv). The corpus is the first
`--mb` MB (uncompressed, whole documents) of ../shared/corpora/en/*.txt.gz written to a scratch file
(en/ holds ~68 MB); the WordPiece vocabulary is built once (`--vocab_only`, timed apart) and given to every
run with --vocab_file, so every run makes the same shards from the same vocab. Each configuration runs
`python -m framework.datagen` as a subprocess in a fresh data_dir:

  local-1   --runner=local --num_workers=1   (the baseline: everything in the launcher)
  local-2   --runner=local --num_workers=2
  beam-1    --runner=beam  DirectRunner, --direct_num_workers=1 --direct_running_mode=multi_processing
  beam-2    --runner=beam  DirectRunner, --direct_num_workers=2 --direct_running_mode=multi_processing

Printed per run: wall seconds, CPU seconds of the whole process tree, MB/s of raw text
and examples/s (wall), the sha256 of every shard (all runs must agree: the script exits 1 otherwise), and
peak memory: every process of the run's tree is polled every 0.2 s for VmHWM in /proc/<pid>/status (the
peak resident set size, what ru_maxrss reports for that process) and utime+stime in /proc/<pid>/stat (CPU
seconds of the tree: the sum over its processes), listed as launcher / worker. A worker
is a process that made shards: the pool workers (local-2), the Beam SDK harness processes (beam-*), or
the launcher itself for local-1. The machine may be shared: quote CPU seconds beside wall times.
"""
from __future__ import annotations

import argparse
import glob
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPORA = os.path.join(ROOT, "..", "shared", "corpora", "en")


def make_corpus(path: str, megabytes: float, corpora: str) -> int:
    """Whole documents of the en/ corpora up to `megabytes` MB; returns the bytes written."""
    budget = int(megabytes * 1e6)
    written = 0
    with open(path, "wb") as out:
        for source in sorted(glob.glob(os.path.join(corpora, "*.txt.gz"))):
            with gzip.open(source, "rb") as f:
                for line in f:
                    out.write(line)
                    written += len(line)
                    if written >= budget and not line.strip():  # stop at a document end
                        return written
            out.write(b"\n")  # documents never cross files
            written += 1
    return written


def process_table() -> dict[int, int]:
    """pid -> parent pid of every process."""
    parents = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    parents[int(pid)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    return parents


def sample(pid: int) -> tuple[int, float, str] | None:
    """(peak RSS in KiB = VmHWM, CPU seconds so far, command line) of a live process."""
    try:
        with open(f"/proc/{pid}/status") as f:
            hwm = next((int(l.split()[1]) for l in f if l.startswith("VmHWM:")), 0)
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        return hwm, cpu, cmd
    except (OSError, IndexError, ValueError):
        return None


class TreeMonitor(threading.Thread):
    """Polls every process under `root` every 0.2 s: peak RSS, CPU seconds, parent, command line."""

    def __init__(self, root: int):
        super().__init__(daemon=True)
        self.root = root
        self.procs: dict[int, dict] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            parents = process_table()
            children: dict[int, list[int]] = {}
            for pid, ppid in parents.items():
                children.setdefault(ppid, []).append(pid)
            stack = [self.root]
            while stack:
                pid = stack.pop()
                stack.extend(children.get(pid, []))
                got = sample(pid)
                if got:
                    p = self.procs.setdefault(pid, dict(kb=0, cpu=0.0, ppid=parents.get(pid), cmd=got[2]))
                    p["kb"], p["cpu"] = max(p["kb"], got[0]), max(p["cpu"], got[1])
            self.stop.wait(0.2)

    def workers(self, local_single: bool) -> list[int]:
        """Peak RSS (KiB) of each process that made shards."""
        if local_single:
            return [self.procs.get(self.root, {}).get("kb", 0)]
        out = []
        for pid, p in self.procs.items():
            parent_cmd = self.procs.get(p["ppid"], {}).get("cmd", "")
            argv0 = p["cmd"].split(" ", 1)[0]
            if "python" in argv0 and "sdk_worker_main" in p["cmd"]:
                out.append(p["kb"])                  # a Beam SDK harness
            elif "forkserver" in parent_cmd and p["ppid"] != self.root:
                out.append(p["kb"])                  # a local pool worker (a child of the fork server)
        return sorted(out, reverse=True)


def run_config(name: str, args: list[str], data_dir: str) -> dict:
    cmd = [sys.executable, "-m", "textrain.framework.datagen", f"--data_dir={data_dir}", *args]
    start = time.time()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    monitor = TreeMonitor(proc.pid)
    monitor.start()
    out, _ = proc.communicate()
    wall = time.time() - start
    monitor.stop.set()
    monitor.join()
    if proc.returncode:
        print(out[-4000:])
        raise SystemExit(f"{name}: datagen failed ({proc.returncode})")
    cpu = sum(p["cpu"] for p in monitor.procs.values())  # last poll: misses < 0.2 s per process
    prob = os.path.join(data_dir, "bert_pretrain")
    manifest = json.load(open(os.path.join(prob, "bert_pretrain-train.manifest.json")))
    hashes = {}
    for s in manifest["shards"]:
        with open(os.path.join(prob, s["file"]), "rb") as f:
            hashes[s["file"]] = hashlib.sha256(f.read()).hexdigest()
    return dict(name=name, wall=wall, cpu=cpu, examples=manifest["num_examples"], hashes=hashes,
                launcher_kb=monitor.procs.get(proc.pid, {}).get("kb", 0),
                worker_kb=monitor.workers(local_single=name == "local-1"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=50.0, help="corpus size in MB (uncompressed)")
    parser.add_argument("--num_shards", type=int, default=16)
    parser.add_argument("--dupe_factor", type=int, default=1)
    parser.add_argument("--vocab_size", type=int, default=30522)
    parser.add_argument("--configs", default="local-1,local-2,beam-1,beam-2")
    parser.add_argument("--work_dir", default="", help="scratch folder (default: a temp dir, removed)")
    parser.add_argument("--corpora", default=CORPORA, help="folder of *.txt.gz text (default ../shared/corpora/en)")
    args = parser.parse_args()
    if not os.path.isdir(args.corpora):
        print(f"{args.corpora} not found: nothing to measure")
        return
    try:
        import apache_beam  # noqa: F401
    except ImportError:
        raise SystemExit("apache-beam is not importable from this Python: pip install -e '.[beam]'")
    work = args.work_dir or tempfile.mkdtemp(prefix="bench_beam_")
    os.makedirs(work, exist_ok=True)
    try:
        corpus = os.path.join(work, "corpus.txt")
        size = make_corpus(corpus, args.mb, args.corpora)
        print(f"corpus: {size / 1e6:.1f} MB from {args.corpora}; dupe_factor={args.dupe_factor}, "
              f"num_shards={args.num_shards}, {os.cpu_count()} CPUs (loadavg {os.getloadavg()[0]:.1f})")
        common = ["--problem=bert_pretrain", f"--input_file={corpus}", f"--num_shards={args.num_shards}",
                  f"--dupe_factor={args.dupe_factor}", "--seed=1"]
        vocab_dir = os.path.join(work, "vocab")
        start = time.time()
        subprocess.run([sys.executable, "-m", "textrain.framework.datagen", f"--data_dir={vocab_dir}", *common,
                        f"--vocab_size={args.vocab_size}", "--vocab_only"], cwd=ROOT, check=True,
                       capture_output=True)
        print(f"vocabulary (once, launcher): {time.time() - start:.1f}s")
        common.append(f"--vocab_file={os.path.join(vocab_dir, 'bert_pretrain', 'vocab.txt')}")
        direct = "--runner=DirectRunner --direct_running_mode=multi_processing --direct_num_workers="
        configs = {"local-1": ["--num_workers=1"], "local-2": ["--num_workers=2"],
                   "beam-1": ["--runner=beam", f"--beam_pipeline_options={direct}1"],
                   "beam-2": ["--runner=beam", f"--beam_pipeline_options={direct}2"]}
        results = []
        for name in args.configs.split(","):
            r = run_config(name, common + configs[name], os.path.join(work, name))
            results.append(r)
            workers = ", ".join(f"{kb / 1024:.0f}" for kb in r["worker_kb"])
            print(f"{name:8s} wall {r['wall']:7.1f}s  cpu {r['cpu']:7.1f}s  {size / 1e6 / r['wall']:6.2f} MB/s  "
                  f"{r['examples'] / r['wall']:8.0f} examples/s  peak RSS launcher {r['launcher_kb'] / 1024:.0f} "
                  f"MiB, per worker [{workers}] MiB", flush=True)
        reference = results[0]["hashes"]
        same = all(r["hashes"] == reference for r in results)
        digest = hashlib.sha256(json.dumps(reference, sort_keys=True).encode()).hexdigest()[:16]
        print(f"shards: {len(reference)} per run, {results[0]['examples']} examples; sha256 of the shard "
              f"hashes {digest}; identical across {', '.join(r['name'] for r in results)}: {same}")
        if not same:
            for r in results:
                print(r["name"], r["hashes"])
            raise SystemExit(1)
    finally:
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
