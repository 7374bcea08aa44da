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

--scale (issue 25; docs/beam_scale.md has the figures and the 100 GB projection made from them):

    flock /work/bench.lock .venv-beam/bin/python benchmarks/bench_beam_datagen.py --scale --mb 1024 \
        --num_shards 64 --work_dir DIR --configs local-1        # then beam-1, ... ; then --configs "" --simulate 2

The corpus is all of en/ repeated to --mb MB (whole documents, a blank line between copies), written once
in --work_dir with the CPU cost of one scan of it (what every shard job pays: each streams the whole
corpus to find its documents); the vocab is learned once from --vocab_mb MB. Each configuration's figures
and shard hashes are saved in DIR/results, so configurations too long for one locked command run in
several, and every invocation lists all saved runs of the same corpus/shards (and exits 1 when their
shards differ): wall, shards/min, CPU-s per MB and MB per CPU-s (all processes, children included: the
larger of the polled sum and the reaped children's rusage), MB/s per worker, peak RSS per worker, CPU of
the launcher and of each worker's busiest thread vs its other threads, and the per-core ratio Beam/local.
--simulate N runs the Beam pipeline (DirectRunner, 1 worker) over the shard jobs one of N workers gets
(shard i % N == 0) and over no job (the fixed cost), checks those shards against a full run's, and prints
the projection's inputs and a projection to --project_gb on --project_workers x --project_cores.
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


def thread_cpu(pid: int) -> dict[int, float]:
    """tid -> CPU seconds so far of each thread of a live process."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[int(tid)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            pass
    return out


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
                    threads = p.setdefault("threads", {})
                    for tid, cpu in thread_cpu(pid).items():
                        threads[tid] = max(threads.get(tid, 0.0), cpu)
            self.stop.wait(0.2)

    def worker_pids(self, local_single: bool) -> list[int]:
        """The processes that made shards."""
        if local_single:
            return [self.root]
        out = []
        for pid, p in self.procs.items():
            parent_cmd = self.procs.get(p["ppid"], {}).get("cmd", "")
            argv0 = p["cmd"].split(" ", 1)[0]
            if "python" in argv0 and "sdk_worker_main" in p["cmd"]:
                out.append(pid)                      # a Beam SDK harness
            elif "forkserver" in parent_cmd and p["ppid"] != self.root:
                out.append(pid)                      # a local pool worker (a child of the fork server)
        return out

    def workers(self, local_single: bool) -> list[int]:
        """Peak RSS (KiB) of each process that made shards."""
        return sorted((self.procs.get(pid, {}).get("kb", 0) for pid in self.worker_pids(local_single)), reverse=True)

    def worker_threads(self, local_single: bool) -> list[list[float]]:
        """Per worker: CPU seconds of its busiest thread (the one running shard jobs) and of all its
        other threads together (a Beam harness's gRPC, progress and logging threads; the runtime's)."""
        out = []
        for pid in self.worker_pids(local_single):
            cpus = sorted(self.procs.get(pid, {}).get("threads", {}).values(), reverse=True)
            out.append([cpus[0] if cpus else 0.0, sum(cpus[1:])])
        return out

    def worker_cpu(self, local_single: bool) -> float:
        """CPU seconds of the processes that made shards (the rest: launcher, job service, fork server)."""
        return sum(self.procs.get(pid, {}).get("cpu", 0.0) for pid in self.worker_pids(local_single))


def children_cpu() -> float:
    """CPU seconds of this process's reaped descendants (those their parents waited for)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def monitored(name: str, cmd: list[str]) -> tuple[float, float, TreeMonitor, subprocess.Popen]:
    """Run `cmd` under a TreeMonitor: (wall s, CPU s of the whole tree, monitor, finished process).
    CPU: the larger of the polled sum (misses < 0.2 s per process) and the reaped children's rusage
    (misses a process nobody waited for): both count every process, children included."""
    cpu_before = children_cpu()
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
        raise SystemExit(f"{name}: {' '.join(cmd[:4])} failed ({proc.returncode})")
    proc.output = out  # type: ignore[attr-defined]
    polled = sum(p["cpu"] for p in monitor.procs.values())
    return wall, max(polled, children_cpu() - cpu_before), monitor, proc


def run_config(name: str, args: list[str], data_dir: str) -> dict:
    cmd = [sys.executable, "-m", "textrain.framework.datagen", f"--data_dir={data_dir}", *args]
    wall, cpu, monitor, proc = monitored(name, cmd)
    prob = os.path.join(data_dir, "bert_pretrain")
    manifest = json.load(open(os.path.join(prob, "bert_pretrain-train.manifest.json")))
    hashes = {}
    for s in manifest["shards"]:
        with open(os.path.join(prob, s["file"]), "rb") as f:
            hashes[s["file"]] = hashlib.sha256(f.read()).hexdigest()
    return dict(name=name, wall=wall, cpu=cpu, examples=manifest["num_examples"], hashes=hashes,
                launcher_kb=monitor.procs.get(proc.pid, {}).get("kb", 0),
                worker_kb=monitor.workers(local_single=name == "local-1"),
                worker_cpu=monitor.worker_cpu(local_single=name == "local-1"),
                worker_threads=monitor.worker_threads(local_single=name == "local-1"),
                launcher_cpu=monitor.procs.get(proc.pid, {}).get("cpu", 0.0))


# ============================================================================================= #
# --scale: a big corpus (issue 25), and --simulate N: one of N workers' share, measured here
# ============================================================================================= #
DIRECT = "--runner=DirectRunner --direct_running_mode=multi_processing --direct_num_workers="
CONFIGS = {"local-1": ["--num_workers=1"], "local-2": ["--num_workers=2"],
           "beam-1": ["--runner=beam", f"--beam_pipeline_options={DIRECT}1"],
           "beam-2": ["--runner=beam", f"--beam_pipeline_options={DIRECT}2"]}


def make_scale_corpus(path: str, megabytes: float, corpora: str) -> dict:
    """`megabytes` MB of whole documents: all of `corpora` (make_corpus) repeated, the last copy cut at a
    document end, a blank line between copies. Written once (as .incomplete, renamed when whole) and
    reused while its recorded size matches. Returns its record: bytes, one copy's bytes, documents, and
    the CPU seconds of one scan of it (what every shard job pays: it streams the whole corpus)."""
    meta_path = path + ".json"
    if os.path.exists(path) and os.path.exists(meta_path):
        with open(meta_path) as f:
            meta = json.load(f)
        if meta.get("mb") == megabytes and meta.get("bytes") == os.path.getsize(path):
            return meta
    one = path + ".copy"
    make_corpus(one, 1e9, corpora)
    with open(one, "rb") as f:
        copy = f.read().rstrip(b"\n") + b"\n\n"
    os.remove(one)
    budget, written = int(megabytes * 1e6), 0
    tmp = path + ".incomplete"
    with open(tmp, "wb") as out:
        while written + len(copy) <= budget:
            out.write(copy)
            written += len(copy)
        if written < budget:
            cut = copy.find(b"\n\n", budget - written)
            part = copy if cut < 0 else copy[:cut + 2]
            out.write(part)
            written += len(part)
    os.replace(tmp, path)
    meta = dict(mb=megabytes, bytes=written, copy_bytes=len(copy), **scan_cost(path))
    with open(meta_path, "w") as f:
        json.dump(meta, f)
    return meta


def scan_cost(path: str) -> dict:
    """One shard job's corpus pass without its own documents: iter_document_texts keeping none (the
    counting scan every job makes over the whole input before it tokenizes its share)."""
    from textrain.framework import corpus
    documents = 0

    def keep(index: int) -> bool:
        nonlocal documents
        documents += 1
        return False

    start, cpu = time.time(), time.process_time()
    for _ in corpus.iter_document_texts([path], "error", keep=keep):
        pass
    return dict(documents=documents, scan_wall=time.time() - start, scan_cpu=time.process_time() - cpu)


def ensure_vocab(work: str, megabytes: float, vocab_size: int, corpora: str) -> tuple[str, dict]:
    """The WordPiece vocab learned from the first `megabytes` MB of en/ (built once per size and reused;
    its cost, measured then, is a fixed serial cost of the launcher)."""
    folder = os.path.join(work, f"vocab-{megabytes:g}MB-{vocab_size}")
    vocab, meta_path = os.path.join(folder, "bert_pretrain", "vocab.txt"), os.path.join(folder, "cost.json")
    if os.path.exists(vocab) and os.path.exists(meta_path):
        with open(meta_path) as f:
            return vocab, json.load(f)
    shutil.rmtree(folder, ignore_errors=True)
    source = os.path.join(work, f"vocab-source-{megabytes:g}MB.txt")
    size = make_corpus(source, megabytes, corpora)
    cmd = [sys.executable, "-m", "textrain.framework.datagen", f"--data_dir={folder}", "--problem=bert_pretrain",
           f"--input_file={source}", f"--vocab_size={vocab_size}", "--vocab_only"]
    wall, cpu, monitor, _ = monitored("vocab", cmd)
    meta = dict(mb=size / 1e6, wall=wall, cpu=cpu, rss_kb=max(p["kb"] for p in monitor.procs.values()))
    with open(meta_path, "w") as f:
        json.dump(meta, f)
    return vocab, meta


def scale_key(args: argparse.Namespace) -> str:
    return f"{args.mb:g}MB-{args.num_shards}shards-dupe{args.dupe_factor}-vocab{args.vocab_mb:g}MB"


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


def workers_of(name: str) -> int:
    return int(name.rsplit("-", 1)[1])


def save_result(work: str, key: str, name: str, result: dict) -> None:
    folder = os.path.join(work, "results")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{key}--{name}.json"), "w") as f:
        json.dump(result, f, indent=1)


def load_results(work: str, key: str) -> dict[str, dict]:
    out = {}
    for path in sorted(glob.glob(os.path.join(work, "results", f"{key}--*.json"))):
        with open(path) as f:
            out[os.path.basename(path)[len(key) + 2:-5]] = json.load(f)
    return out


def common_flags(corpus_path: str, vocab: str, args: argparse.Namespace) -> list[str]:
    return ["--problem=bert_pretrain", f"--input_file={corpus_path}", f"--num_shards={args.num_shards}",
            f"--dupe_factor={args.dupe_factor}", "--seed=1", f"--vocab_file={vocab}"]


def run_scale_config(name: str, work: str, corpus_path: str, vocab: str, megabytes: float,
                     args: argparse.Namespace) -> dict:
    """One configuration on the big corpus, in a fresh data_dir (removed afterwards: the shards of 1 GB
    are several GB); its figures and shard hashes are kept in work/results/ for later invocations."""
    data_dir = os.path.join(work, "runs", name)
    shutil.rmtree(data_dir, ignore_errors=True)
    load_before = open("/proc/loadavg").read().split()[:3]
    r = run_config(name, common_flags(corpus_path, vocab, args) + CONFIGS[name], data_dir)
    r["load_before"], r["load_after"] = load_before, open("/proc/loadavg").read().split()[:3]
    r["when"], r["mb"], r["num_shards"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), megabytes, args.num_shards
    r["hashes"] = shard_hashes(data_dir)  # the whole files (run_config hashed them too, in memory)
    if "manifest_s" not in r:
        r["manifest_s"] = time_manifest_step(data_dir, corpus_path, vocab, args)
    shutil.rmtree(data_dir, ignore_errors=True)
    return r


def scale_problem(corpus_path: str, vocab: str, args: argparse.Namespace):
    """The bert_pretrain problem the CLI builds from common_flags (defaults for everything else)."""
    from textrain.problems.bert_pretrain import BertPretrain, BertPretrainHParams
    return BertPretrain(BertPretrainHParams(input_file=corpus_path, vocab_file=vocab, dupe_factor=args.dupe_factor))


def time_manifest_step(data_dir: str, corpus_path: str, vocab: str, args: argparse.Namespace) -> float:
    """Seconds of the pipeline's last stage (write_manifests: every shard's stats sidecar re-read, the
    manifest written) on a complete run's files, run again here."""
    from textrain.framework.generator import plan_generation, write_manifests
    problem = scale_problem(corpus_path, vocab, args)
    plan = plan_generation(problem, data_dir, "", seed=1, num_shards={"train": args.num_shards})
    plan.pending = [split for split, _ in plan.splits]
    start = time.time()
    write_manifests(problem, data_dir, plan)
    return time.time() - start


def print_scale_table(results: dict[str, dict], megabytes: float) -> bool:
    """The figures of every configuration measured for this key; True when all wrote the same shards."""
    print(f"\n{'run':8s} {'wall s':>8s} {'shards/min':>10s} {'CPU s':>8s} {'CPU-s/MB':>8s} {'MB/CPU-s':>8s} "
          f"{'MB/s/worker':>11s} {'worker CPU s':>12s}  peak RSS MiB launcher | workers   load before/after  when")
    for name, r in results.items():
        per_worker = ", ".join(f"{kb / 1024:.0f}" for kb in r["worker_kb"])
        print(f"{name:8s} {r['wall']:8.1f} {r['num_shards'] / r['wall'] * 60:10.1f} {r['cpu']:8.1f} "
              f"{r['cpu'] / megabytes:8.3f} {megabytes / r['cpu']:8.2f} "
              f"{megabytes / r['wall'] / workers_of(name):11.2f} {r.get('worker_cpu', 0):12.1f}  {r['launcher_kb'] / 1024:.0f} | [{per_worker}]   "
              f"{'/'.join(r['load_before'])} -> {'/'.join(r['load_after'])}  {r['when']}")
    for name, r in results.items():
        if "worker_threads" in r:
            split = "; ".join(f"{a:.1f} + {b:.1f}" for a, b in r["worker_threads"])
            print(f"{name}: worker CPU s, busiest thread + the others: {split}; launcher process "
                  f"{r['launcher_cpu']:.1f} CPU-s; the rest of the tree {r['cpu'] - r['worker_cpu'] - (0 if name == 'local-1' else r['launcher_cpu']):.1f}")
    for name, r in results.items():
        if name.startswith("beam"):
            for ref in dict.fromkeys((f"local-{workers_of(name)}", "local-1")):
                if ref in results:
                    cpu_ratio = results[ref]["cpu"] / r["cpu"]
                    wall_ratio = results[ref]["wall"] * workers_of(ref) / (r["wall"] * workers_of(name))
                    print(f"per-core throughput {name}/{ref}: {cpu_ratio:.3f} (MB per CPU-s), "
                          f"{wall_ratio:.3f} (MB/s per worker, wall)")
    hashes = [r["hashes"] for r in results.values()]
    same = all(h == hashes[0] for h in hashes)
    digest = hashlib.sha256(json.dumps(hashes[0], sort_keys=True).encode()).hexdigest()[:16] if hashes else "-"
    print(f"shards: {len(hashes[0]) if hashes else 0} per run; sha256 of the shard hashes {digest}; identical "
          f"across {', '.join(results)}: {same}")
    return same


def scale_main(args: argparse.Namespace) -> None:
    work = args.work_dir or os.path.join(tempfile.gettempdir(), "bench_beam_scale")
    os.makedirs(work, exist_ok=True)
    corpus_path = os.path.join(work, f"corpus-{args.mb:g}MB.txt")
    meta = make_scale_corpus(corpus_path, args.mb, args.corpora)
    megabytes = meta["bytes"] / 1e6
    vocab, vocab_cost = ensure_vocab(work, args.vocab_mb, args.vocab_size, args.corpora)
    print(f"corpus: {megabytes:.1f} MB ({meta['bytes'] / meta['copy_bytes']:.2f} copies of en/), "
          f"{meta['documents']} documents; one scan {meta['scan_cpu']:.2f} CPU-s; vocab from {vocab_cost['mb']:.1f} MB "
          f"in {vocab_cost['wall']:.1f}s ({vocab_cost['cpu']:.1f} CPU-s); num_shards={args.num_shards}, "
          f"dupe_factor={args.dupe_factor}; {os.cpu_count()} CPUs; work dir {work}", flush=True)
    key = scale_key(args)
    for name in filter(None, args.configs.split(",")):
        r = run_scale_config(name, work, corpus_path, vocab, megabytes, args)
        save_result(work, key, name, r)
        print(f"{name}: wall {r['wall']:.1f}s, CPU {r['cpu']:.1f}s (load {'/'.join(r['load_after'])})", flush=True)
    results = load_results(work, key)
    same = print_scale_table(results, megabytes) if results else True
    if args.simulate:
        simulate(args, work, corpus_path, vocab, meta, vocab_cost, results)
    if not same:
        raise SystemExit(1)


def share_cmd(corpus_path: str, vocab: str, data_dir: str, share_of: int, args: argparse.Namespace) -> list[str]:
    return [sys.executable, "-m", "textrain.benchmarks.bench_beam_datagen", "--share_run", data_dir,
            f"--share_of={share_of}", f"--share_corpus={corpus_path}", f"--share_vocab={vocab}",
            f"--num_shards={args.num_shards}", f"--dupe_factor={args.dupe_factor}"]


def share_main(args: argparse.Namespace) -> None:
    """(Run as a subprocess by `simulate`.) The Beam pipeline of framework/beam_datagen.py, DirectRunner
    with 1 worker, over the shard jobs one of `--share_of` N workers would get (shard i % N == 0);
    N = 0: over no job (the pipeline's fixed cost: harness start-up, Create/Reshuffle/ToList, teardown)."""
    import dataclasses

    import apache_beam as beam

    from textrain.framework import beam_datagen
    from textrain.framework.generator import plan_generation
    problem = scale_problem(args.share_corpus, args.share_vocab, args)
    plan = plan_generation(problem, args.share_run, "", seed=1, num_shards={"train": args.num_shards})
    jobs = [j for j in plan.jobs if args.share_of and j.shard_id % args.share_of == 0]
    options = beam_datagen.pipeline_options(f"{DIRECT}1")
    start = time.time()
    with beam.Pipeline(options=options) as pipeline:
        beam_datagen.build_pipeline(pipeline, problem, args.share_run, "", dataclasses.replace(plan, jobs=jobs))
    print(f"share: {len(jobs)} shard jobs in {time.time() - start:.1f}s")


def simulate(args: argparse.Namespace, work: str, corpus_path: str, vocab: str, meta: dict, vocab_cost: dict,
             results: dict[str, dict]) -> None:
    """One of N workers' share on Beam (1 worker), its fixed costs apart, and the projection's inputs."""
    n, megabytes = args.simulate, meta["bytes"] / 1e6
    measured = {}
    for label, share_of in (("fixed (no job)", 0), (f"1/{n} share", n)):
        data_dir = os.path.join(work, "runs", f"share-{share_of}")
        shutil.rmtree(data_dir, ignore_errors=True)
        wall, cpu, monitor, proc = monitored(label, share_cmd(corpus_path, vocab, data_dir, share_of, args))
        hashes = shard_hashes(data_dir)
        full = next(iter(results.values()), {}).get("hashes", {})
        agree = all(full.get(k) == v for k, v in hashes.items()) if full else "no full run to compare"
        rss = [kb for kb in TreeMonitor.workers(monitor, local_single=False)]
        measured[share_of] = dict(wall=wall, cpu=cpu, jobs=len(hashes), rss=rss)
        print(f"simulate {label}: {len(hashes)} shards, wall {wall:.1f}s, CPU {cpu:.1f}s, peak RSS per worker "
              f"{[round(kb / 1024) for kb in rss]} MiB, shards equal to the full run's: {agree}", flush=True)
        shutil.rmtree(data_dir, ignore_errors=True)
    fixed, share = measured[0], measured[n]
    # A shard job's own work per MB: from the full Beam 1-worker run when there is one (all the shards),
    # else from the share; both less the fixed cost and the scans.
    scan_per_mb = meta["scan_cpu"] / megabytes
    full = results.get("beam-1")
    base = (full["cpu"], args.num_shards) if full else (share["cpu"], share["jobs"])
    per_shard_cpu = (base[0] - fixed["cpu"]) / max(base[1], 1)
    work_per_mb = (per_shard_cpu - meta["scan_cpu"]) * args.num_shards / megabytes
    if f"beam-{n}" in results:
        print(f"check: the 1/{n} share's wall {share['wall']:.1f}s vs beam-{n}'s measured "
              f"{results[f'beam-{n}']['wall']:.1f}s")
    manifest_s = next(iter(results.values()), {}).get("manifest_s", float("nan"))
    print(f"\nprojection inputs (from {megabytes:.0f} MB, {args.num_shards} shards, this machine):\n"
          f"  one worker of {n}: wall {share['wall']:.1f}s for {share['jobs']} shards (estimate of the "
          f"{n}-worker pipeline's wall, vocab apart)\n"
          f"  fixed per pipeline (empty pipeline): wall {fixed['wall']:.1f}s, CPU {fixed['cpu']:.1f}s\n"
          f"  per shard job ({'beam-1 run' if full else 'share'}): {per_shard_cpu:.2f} CPU-s = scan of the whole corpus {meta['scan_cpu']:.2f} "
          f"({scan_per_mb * 1e3:.2f} CPU-ms/MB) + its own 1/{args.num_shards} ({work_per_mb:.3f} CPU-s/MB)\n"
          f"  vocab: {vocab_cost['cpu']:.1f} CPU-s for {vocab_cost['mb']:.1f} MB "
          f"({vocab_cost['cpu'] / vocab_cost['mb']:.2f} CPU-s/MB, serial, in the launcher)\n"
          f"  manifest step: {manifest_s:.2f}s for {args.num_shards} shards\n"
          f"  peak RSS per worker: {max(share['rss'], default=0) / 1024:.0f} MiB with "
          f"{megabytes / args.num_shards:.1f} MB of corpus per shard")
    proj_mb = args.project_gb * 1e3
    slots = args.project_workers * args.project_cores
    for shards in (slots, 4 * slots, 16 * slots):
        shard_cpu = proj_mb * scan_per_mb + proj_mb / shards * work_per_mb
        waves = -(-shards // slots)
        wall = fixed["wall"] + waves * shard_cpu * (1 + args.project_straggler) + manifest_s * shards / args.num_shards
        core_h = (shards * shard_cpu + args.project_workers * fixed["cpu"]) / 3600
        print(f"  {args.project_gb:g} GB on {args.project_workers} x {args.project_cores} cores, {shards} shards: "
              f"shard job {shard_cpu:.0f} CPU-s ({proj_mb * scan_per_mb / shard_cpu:.0%} scan), {waves} waves, "
              f"wall {wall / 3600:.2f} h + vocab; {core_h:.0f} core-hours "
              f"(vocab on the whole corpus: {proj_mb * vocab_cost['cpu'] / vocab_cost['mb'] / 3600:.1f} h serial)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=50.0, help="corpus size in MB (uncompressed)")
    parser.add_argument("--num_shards", type=int, default=16)
    parser.add_argument("--dupe_factor", type=int, default=1)
    parser.add_argument("--vocab_size", type=int, default=30522)
    parser.add_argument("--configs", default="local-1,local-2,beam-1,beam-2")
    parser.add_argument("--work_dir", default="", help="scratch folder (default: a temp dir, removed)")
    parser.add_argument("--corpora", default=CORPORA, help="folder of *.txt.gz text (default ../shared/corpora/en)")
    scale = parser.add_argument_group("scale mode (issue 25): a repeated corpus of --mb MB, results kept in --work_dir")
    scale.add_argument("--scale", action="store_true",
                       help="corpus = en/ repeated to --mb MB (written once in --work_dir and reused); each "
                            "--configs run's figures and shard hashes are saved there and the table lists all")
    scale.add_argument("--vocab_mb", type=float, default=20.0,
                       help="scale mode: the vocab is learned from the first VOCAB_MB MB of en/ (once)")
    scale.add_argument("--simulate", type=int, default=0, metavar="N",
                       help="scale mode: one of N workers' share (shards i %% N == 0) on Beam with 1 worker, "
                            "an empty pipeline (fixed cost), and the projection's inputs")
    scale.add_argument("--project_gb", type=float, default=100.0)
    scale.add_argument("--project_workers", type=int, default=64)
    scale.add_argument("--project_cores", type=int, default=4, help="cores (harness threads) per worker")
    scale.add_argument("--project_straggler", type=float, default=0.2, help="margin on each wave's time")
    for name in ("share_run", "share_corpus", "share_vocab"):  # internal: simulate's subprocess
        parser.add_argument(f"--{name}", default="", help=argparse.SUPPRESS)
    parser.add_argument("--share_of", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.share_run:
        return share_main(args)
    if args.simulate and not args.scale:
        parser.error("--simulate needs --scale")
    if not os.path.isdir(args.corpora):
        print(f"{args.corpora} not found: nothing to measure")
        return
    try:
        import apache_beam  # noqa: F401
    except ImportError:
        raise SystemExit("apache-beam is not importable from this Python: pip install -e '.[beam]'")
    if args.scale:
        return scale_main(args)
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
        results = []
        for name in args.configs.split(","):
            r = run_config(name, common + CONFIGS[name], os.path.join(work, name))
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
