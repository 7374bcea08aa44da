"""bert_pretrain datagen at scale, one command: does the cost stay O(corpus) at any shard, task or worker count?

    nice .venv-beam/bin/python benchmarks/bench_beam_datagen.py --work_dir /tmp/beamscale [--mb 520]

Run it with a Python that has apache-beam (`pip install -e ".[beam]"`, e.g. a `.venv-beam`); without it the
Beam step is reported as skipped. The corpus is ../shared/corpora/en/ cut into SHORT documents (a few lines
each; every copy of en/ is grouped differently, so no two copies repeat a document) and repeated until it
holds at least --mb MB and more than 2^20 documents; it and the WordPiece vocab (learned once from
--vocab_mb MB of en/, then given to every run with --vocab_file) are cached in --work_dir. Every run is
`python -m textrain.framework.datagen` in a fresh data_dir, --dupe_factor=1, --seed=1, measured from /proc
over its whole process tree (polled every 0.2 s until it exits):

  CPU       utime+stime summed over the tree (or the reaped children's rusage, whichever is larger)
  read      rchar of /proc/<pid>/io summed over the tree: every byte the processes read through read(2)
            (page cache or disk alike; the figure reported, as a multiple of the corpus size), and
            read_bytes (what came from the block device; small when the corpus sits in the page cache)
  peak RSS  the largest VmHWM of any process of the tree (and the launcher's)

Steps (--steps, in this order; each run's figures are saved in WORK_DIR/results keyed by the last commit of framework/ and problems/, so a
re-run of the same commit reuses them unless --fresh):

  shards    local runner, 1 worker, at --shards (default 8, 64, 256): CPU-s per MB and bytes read per shard count
  tasks     --num_tasks=4, task_id 0..3 one after another in one data_dir, --num_shards (64), against one task
  beam      --runner=beam, DirectRunner with 2 workers (multi_processing), --num_shards: shard hashes vs local
  memory    --num_shards on the first half of the corpus against the whole: peak RSS as the corpus doubles

then a projection to 100 GB and 1 TB on N workers from the measured per-MB costs. The machine may be shared:
CPU seconds are the comparable figures; the load average is printed at the start and the end.
"""
from __future__ import annotations

import argparse
import glob
import gzip
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPORA = os.path.join(ROOT, "..", "shared", "corpora", "en")
MIN_DOCUMENTS = (1 << 20) + 1  # past 2^20: where no per-process document index can stand in
# The line of a Beam run whose shard stage was given fewer documents than the partitions sent (the DirectRunner
# with 2 worker processes, docs/beam_scale.md "Known problem"): the bench runs the command again, as the line says.
LOST_DELIVERY = "the runner's shuffle delivered"
DIRECT_2 = "--runner=DirectRunner --direct_running_mode=multi_processing --direct_num_workers=2"


# --------------------------------------------------------------------------------------------- corpus, vocab
def en_lines(corpora: str) -> list[bytes]:
    """The non-empty lines (sentences) of every en/*.txt.gz, in file order."""
    out = []
    for source in sorted(glob.glob(os.path.join(corpora, "*.txt.gz"))):
        with gzip.open(source, "rb") as f:
            out.extend(line for line in f if line.strip())
    return out


def make_corpus(path: str, megabytes: float, corpora: str, min_documents: int = MIN_DOCUMENTS) -> dict:
    """Short documents from en/'s sentences until >= `megabytes` MB and >= `min_documents` documents. Copy c groups the
    sentences in documents of 3 + c % 4 lines, starting c // 4 lines later, so copies do not repeat documents
    (a document's shard is a hash of its text). Cached: written as .incomplete, renamed when whole."""
    meta_path = path + ".json"
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            meta = json.load(f)
        if os.path.exists(path) and meta["bytes"] == os.path.getsize(path):
            return meta
    lines = en_lines(corpora)
    budget, written, documents, copy = int(megabytes * 1e6), 0, 0, 0
    with open(path + ".incomplete", "wb") as out:
        while written < budget or documents < min_documents:
            size, start = 3 + copy % 4, copy // 4
            for i in range(start, len(lines) - size, size):
                doc = b"".join(lines[i:i + size]) + b"\n"
                out.write(doc)
                written, documents = written + len(doc), documents + 1
                if written >= budget and documents >= min_documents:
                    break
            copy += 1
    os.replace(path + ".incomplete", path)
    meta = dict(bytes=written, documents=documents, copies=copy)
    with open(meta_path, "w") as f:
        json.dump(meta, f)
    return meta


def half_corpus(path: str, meta: dict) -> tuple[str, dict]:
    """The first half (in bytes, cut at a document end) of the corpus, cached beside it."""
    half = path.replace(".txt", "-half.txt")
    meta_path = half + ".json"
    if os.path.exists(meta_path) and os.path.exists(half):
        with open(meta_path) as f:
            return half, json.load(f)
    with open(path, "rb") as f, open(half + ".incomplete", "wb") as out:
        data = f.read(meta["bytes"] // 2)
        cut = data.rfind(b"\n\n") + 2
        out.write(data[:cut])
    os.replace(half + ".incomplete", half)
    half_meta = dict(bytes=cut, documents=data[:cut].count(b"\n\n"))
    with open(meta_path, "w") as f:
        json.dump(half_meta, f)
    return half, half_meta


def ensure_vocab(work: str, megabytes: float, corpora: str) -> str:
    """A WordPiece vocab learned once from the first `megabytes` MB of en/ and reused."""
    folder = os.path.join(work, f"vocab-{megabytes:g}MB")
    vocab = os.path.join(folder, "bert_pretrain", "vocab.txt")
    if os.path.exists(vocab):
        return vocab
    source = os.path.join(work, f"vocab-source-{megabytes:g}MB.txt")
    with open(source, "wb") as out:
        written = 0
        for line in en_lines(corpora):
            out.write(line + (b"\n" if written % 7 == 6 else b""))
            written += len(line)
            if written > megabytes * 1e6:
                break
    subprocess.run([sys.executable, "-m", "textrain.framework.datagen", f"--data_dir={folder}",
                    "--problem=bert_pretrain", f"--input_file={source}", "--vocab_only"],
                   cwd=ROOT, check=True, capture_output=True)
    return vocab


# --------------------------------------------------------------------------------------------- measuring
def proc_figures(pid: int) -> dict | None:
    """CPU seconds, rchar, read_bytes, peak RSS (KiB) of a live process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/io") as f:
            io = dict(line.split(": ") for line in f.read().splitlines())
        with open(f"/proc/{pid}/status") as f:
            hwm = next((int(line.split()[1]) for line in f if line.startswith("VmHWM:")), 0)
    except (OSError, IndexError, ValueError, KeyError):
        return None
    return dict(cpu=(int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), rchar=int(io["rchar"]),
                read_bytes=int(io["read_bytes"]), kb=hwm)


def tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(name))
            except (OSError, IndexError, ValueError):
                pass
    out, stack = [], [root]
    while stack:
        out.append(stack.pop())
        stack.extend(children.get(out[-1], []))
    return out


class TreeMonitor(threading.Thread):
    """Polls every process under `root` every 0.2 s; keeps each one's largest figures (they only grow)."""

    def __init__(self, root: int):
        super().__init__(daemon=True)
        self.root, self.procs, self.stop = root, {}, threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for pid in tree(self.root):
                got = proc_figures(pid)
                if got:  # the largest seen: an exiting process (a zombie) reads as no memory
                    last = self.procs.get(pid, got)
                    self.procs[pid] = {k: max(v, last[k]) for k, v in got.items()}
            self.stop.wait(0.2)


def loadavg() -> str:
    return "/".join(open("/proc/loadavg").read().split()[:3])


def run_datagen(flags: list[str]) -> dict:
    """One datagen CLI run under a TreeMonitor: wall, CPU, rchar, read_bytes, peak RSS of the tree."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    reaped_before = usage.ru_utime + usage.ru_stime
    start = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "textrain.framework.datagen", *flags], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    monitor = TreeMonitor(proc.pid)
    monitor.start()
    out = proc.communicate()[0]
    wall = time.time() - start
    monitor.stop.set()
    monitor.join()
    lost = next((line for line in out.splitlines() if LOST_DELIVERY in line), None)
    if proc.returncode and lost is None:
        print(out[-4000:])
        raise SystemExit(f"datagen {' '.join(flags)} failed ({proc.returncode})")
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    procs = monitor.procs.values()
    return dict(lost=lost if proc.returncode else None, wall=wall,
                cpu=max(sum(p["cpu"] for p in procs), usage.ru_utime + usage.ru_stime - reaped_before),
                rchar=sum(p["rchar"] for p in procs), read_bytes=sum(p["read_bytes"] for p in procs),
                peak_kb=max((p["kb"] for p in procs), default=0),
                launcher_kb=monitor.procs.get(proc.pid, {}).get("kb", 0), processes=len(monitor.procs))


def startup_rchar(work: str, vocab: str) -> int:
    """Bytes a datagen run reads that are not the corpus: a run over a corpus of three short documents
    (its imports, TensorFlow's Python files the most; the vocab; the spill and stats files)."""
    tiny = os.path.join(work, "tiny.txt")
    with open(tiny, "w") as f:
        f.write("a short document .\nof two lines .\n\nanother one .\nhere .\n\nand a third .\nlast .\n")
    data_dir = os.path.join(work, "runs", "tiny")
    shutil.rmtree(data_dir, ignore_errors=True)
    r = run_datagen(["--problem=bert_pretrain", f"--input_file={tiny}", f"--vocab_file={vocab}",
                     f"--data_dir={data_dir}", "--num_shards=1", "--dupe_factor=1", "--seed=1"])
    shutil.rmtree(data_dir, ignore_errors=True)
    return r["rchar"]


def shard_hashes(data_dir: str) -> dict[str, str]:
    prob = os.path.join(data_dir, "bert_pretrain")
    out = {}
    for name in sorted(os.listdir(prob)):
        if name.endswith(".tfrecord"):
            digest = hashlib.sha256()
            with open(os.path.join(prob, name), "rb") as f:
                for block in iter(lambda: f.read(1 << 24), b""):
                    digest.update(block)
            out[name] = digest.hexdigest()
    return out


def digest(hashes: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(hashes, sort_keys=True).encode()).hexdigest()[:16]


def commit() -> str:
    """The last commit that changed the datagen code (a docs or benchmark commit keeps the saved figures)."""
    got = subprocess.run(["git", "log", "-1", "--format=%h", "--", "framework", "problems"], cwd=ROOT,
                         capture_output=True, text=True)
    return got.stdout.strip() or "unknown"


class Runs:
    """Each measured run's figures, saved as WORK_DIR/results/<commit>-<name>.json and reused."""

    def __init__(self, work: str, fresh: bool):
        self.folder, self.fresh, self.commit = os.path.join(work, "results"), fresh, commit()
        os.makedirs(self.folder, exist_ok=True)

    def get(self, name: str, measure) -> dict:
        path = os.path.join(self.folder, f"{self.commit}-{name}.json")
        if os.path.exists(path) and not self.fresh:
            with open(path) as f:
                r = json.load(f)
            print(f"  {name}: saved figures of {r['when']}", flush=True)
            return r
        load_before = loadavg()
        r = measure()
        r.update(load=f"{load_before} -> {loadavg()}", when=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
        with open(path, "w") as f:
            json.dump(r, f, indent=1)
        return r


def datagen_run(runs: Runs, name: str, work: str, corpus: str, vocab: str, num_shards: int,
                extra: list[list[str]] | None = None) -> dict:
    """One configuration: the datagen CLI once per entry of `extra` (one after another, same data_dir)."""
    def measure() -> dict:
        data_dir = os.path.join(work, "runs", f"{name}-{os.getpid()}")  # invocations side by side never share one
        shutil.rmtree(data_dir, ignore_errors=True)
        flags = ["--problem=bert_pretrain", f"--input_file={corpus}", f"--vocab_file={vocab}",
                 f"--data_dir={data_dir}", f"--num_shards={num_shards}", "--dupe_factor=1", "--seed=1"]
        parts, reruns = [], []
        for e in extra or [[]]:
            parts.append(run_datagen(flags + e))
            while parts[-1]["lost"] and len(reruns) < 3:  # as the error line says: run again, finished shards kept
                reruns.append(parts[-1]["lost"])
                print(f"  {name}: {parts[-1]['lost']}: running it again", flush=True)
                parts.append(run_datagen(flags + e))
            if parts[-1]["lost"]:
                raise SystemExit(f"{name}: {parts[-1]['lost']} ({len(reruns)} re-runs)")
        r = {k: sum(p[k] for p in parts) for k in ("wall", "cpu", "rchar", "read_bytes")}
        r.update(peak_kb=max(p["peak_kb"] for p in parts), launcher_kb=max(p["launcher_kb"] for p in parts),
                 parts=[round(p["cpu"], 1) for p in parts], hashes=shard_hashes(data_dir), reruns=reruns)
        shutil.rmtree(data_dir, ignore_errors=True)
        return r
    r = runs.get(name, measure)
    print(f"  {name}: wall {r['wall']:.0f}s, CPU {r['cpu']:.1f}s, rchar {r['rchar'] / 1e6:.0f} MB, read_bytes "
          f"{r['read_bytes'] / 1e6:.0f} MB, peak RSS {r['peak_kb'] / 1024:.0f} MiB, shards {digest(r['hashes'])} "
          f"(load {r['load']})" + (f"; {len(r['reruns'])} re-run(s) after a lost delivery" if r.get("reruns")
                                   else ""), flush=True)
    return r


# --------------------------------------------------------------------------------------------- report
def project(local: dict, beam: dict | None, megabytes: float) -> None:
    """100 GB and 1 TB on N workers of 4 cores, from the --num_shards local run's per-MB CPU and the Beam run's
    extra CPU per MB (its engine shuffle: every document travels once through CoGroupByKey)."""
    per_mb = local["cpu"] / megabytes
    shuffle_per_mb = max(0.0, (beam["cpu"] - local["cpu"]) / megabytes) if beam else None
    print(f"\nprojection (this machine's cores; a cloud vCPU may do less): local {per_mb:.3f} CPU-s/MB at any "
          f"shard count; Beam's engine shuffle "
          + (f"adds {shuffle_per_mb:.3f} CPU-s/MB (DirectRunner, measured)" if beam else "not measured")
          + "; every byte is read once and shuffled once (~1x the corpus through the engine)")
    extra = shuffle_per_mb or 0.0
    for gb in (100, 1000):
        mb = gb * 1e3
        core_h = mb * (per_mb + extra) / 3600
        walls = ", ".join(f"{n} x 4 cores {1.2 * core_h / (4 * n) * 60:.0f} min" for n in (16, 64, 256))
        print(f"  {gb:g} GB: {core_h:.0f} core-hours ({mb * per_mb / 3600:.0f} datagen + {mb * extra / 3600:.0f} "
              f"shuffle); wall with a 1.2x straggler margin, CPU-bound: {walls}; read {gb:g} GB once, "
              f"{gb:g} GB through the shuffle")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work_dir", default="/tmp/bench_beam_scale", help="corpus, vocab and results (kept)")
    parser.add_argument("--mb", type=float, default=520.0, help="corpus size in MB (at least 2^20 documents)")
    parser.add_argument("--shards", default="8,64,256", help="the shard counts of the shards step")
    parser.add_argument("--num_shards", type=int, default=64, help="the shard count of the other steps")
    parser.add_argument("--min_documents", type=int, default=MIN_DOCUMENTS)
    parser.add_argument("--steps", default="shards,tasks,beam,memory")
    parser.add_argument("--vocab_mb", type=float, default=10.0)
    parser.add_argument("--corpora", default=CORPORA, help="folder of *.txt.gz text (default ../shared/corpora/en)")
    parser.add_argument("--fresh", action="store_true", help="measure again even where this commit has figures")
    args = parser.parse_args()
    steps = set(filter(None, args.steps.split(",")))
    os.makedirs(args.work_dir, exist_ok=True)
    corpus = os.path.join(args.work_dir, f"corpus-{args.mb:g}MB.txt")
    meta = make_corpus(corpus, args.mb, args.corpora, args.min_documents)
    vocab = ensure_vocab(args.work_dir, args.vocab_mb, args.corpora)
    mb = meta["bytes"] / 1e6
    runs = Runs(args.work_dir, args.fresh)
    print(f"commit {runs.commit}; corpus {mb:.1f} MB, {meta['documents']} documents ({meta['copies']} groupings "
          f"of en/); vocab from {args.vocab_mb:g} MB of en/; {os.cpu_count()} CPUs; load at start {loadavg()}",
          flush=True)
    results: dict[str, dict] = {}
    if "shards" in steps:
        print("shard count (local, 1 worker):")
        for s in (int(x) for x in args.shards.split(",")):
            results[f"local-{s}"] = datagen_run(runs, f"local-{s}shards-{args.mb:g}MB", args.work_dir, corpus, vocab, s)
        base = results.get("local-8") or next(iter(results.values()))
        for name, r in results.items():
            print(f"  {name}: {r['cpu'] / mb:.3f} CPU-s/MB ({r['cpu'] / base['cpu']:.2f}x the first), read "
                  f"{r['rchar'] / meta['bytes']:.2f}x the corpus (rchar), {r['read_bytes'] / meta['bytes']:.2f}x "
                  f"(read_bytes)")
    n = args.num_shards
    if "tasks" in steps:
        print(f"tasks (--num_tasks=4, task_id 0..3 one after another, {n} shards):")
        results["tasks-4"] = datagen_run(runs, f"tasks4-{n}shards-{args.mb:g}MB", args.work_dir, corpus, vocab, n,
                                         [["--num_tasks=4", f"--task_id={t}"] for t in range(4)])
    if "beam" in steps:
        try:
            import apache_beam  # noqa: F401
        except ImportError:
            print("Beam: skipped (apache_beam is not importable from this Python)")
        else:
            print(f"Beam (DirectRunner, 2 workers, {n} shards):")
            results["beam-2"] = datagen_run(runs, f"beam2-{n}shards-{args.mb:g}MB", args.work_dir, corpus, vocab, n,
                                            [["--runner=beam", f"--beam_pipeline_options={DIRECT_2}"]])
    if "memory" in steps:
        half, half_meta = half_corpus(corpus, meta)
        print(f"memory ({n} shards, {half_meta['bytes'] / 1e6:.1f} MB against {mb:.1f} MB):")
        results["half"] = datagen_run(runs, f"local-{n}shards-{args.mb:g}MB-half", args.work_dir, half, vocab, n)
    # The reference, measured last when the shards step did not (a second invocation running other steps
    # beside it finds it saved by then).
    print(f"reference: local, 1 worker, {n} shards:")
    one = results.get(f"local-{n}") or datagen_run(runs, f"local-{n}shards-{args.mb:g}MB", args.work_dir, corpus,
                                                    vocab, n)
    same = True
    if "tasks-4" in results:
        r = results["tasks-4"]
        same &= r["hashes"] == one["hashes"]
        print(f"tasks: 4 tasks / 1 task CPU {r['cpu'] / one['cpu']:.3f} (the tasks {r['parts']} CPU-s); read "
              f"{r['rchar'] / meta['bytes']:.2f}x the corpus; shards equal to one task's: {r['hashes'] == one['hashes']}")
    if "beam-2" in results:
        r = results["beam-2"]
        same &= r["hashes"] == one["hashes"]
        print(f"Beam: Beam / local CPU {r['cpu'] / one['cpu']:.3f}; read {r['rchar'] / meta['bytes']:.2f}x the "
              f"corpus; shards equal to local's: {r['hashes'] == one['hashes']}")
    if "half" in results:
        r = results["half"]
        print(f"memory: peak RSS {r['peak_kb'] / 1024:.0f} MiB at {half_meta['bytes'] / 1e6:.0f} MB, "
              f"{one['peak_kb'] / 1024:.0f} MiB at {mb:.0f} MB ({one['peak_kb'] / max(r['peak_kb'], 1):.2f}x)")
    project(one, results.get("beam-2"), mb)
    print(f"a datagen run over 3 documents (start-up, imports) reads {startup_rchar(args.work_dir, vocab) / 1e6:.0f} MB: counted in every rchar "
          f"above, once per process")
    print(f"load at end {loadavg()}")
    if not same:
        raise SystemExit("shards differ between runners or task counts")

if __name__ == "__main__":
    main()
