"""Reading a corpus in each format: MB/s per core against plain text, and peak RSS as the
corpus grows 4x.

The same documents (English prose from ../shared/corpora/en, or tests/data when absent) are written in
every format by the real libraries (benchmarks/lib/corpus_fixtures.py), at two sizes (S and 4 S MB of text).
Each measure is a fresh process (its format's library imported before the clock starts):
- read: every document read as a problem reads them (`corpus.iter_document_texts` + `document_lines` on
  `expand_paths(..., options)`), the records parsed and turned into text as they stream;
- shuffle: what datagen does with a document corpus (framework/shuffle.py), one process (a datagen spreads
  the jobs over its workers): the partitions planned, each read once and spilled grouped by shard, then
  every shard job's documents read back from the spills and cut into lines (`--shards`, default 8).
The measure is repeated in the process (at least 5 times and 0.5 CPU-s) and the fastest taken: a read of a
few MB lasts milliseconds, and one run of it is mostly noise on a loaded machine. MB/s per core = MB of
plain text / CPU-s (one process, pyarrow's threads off: one core). Peak RSS (VmHWM) is the process's, over
all repetitions. The splitter is off (`--sentence_splitter=none`) except in the row that names it.

    nice -n 10 python3 benchmarks/bench_corpus_formats.py [--mb 4] [--shards 8]
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)  # benchmarks.lib
CORPORA = os.environ.get("TEXTRAIN_CORPORA", os.path.join(os.path.dirname(REPO), "shared", "corpora"))
SOURCES = ["jane_austen_novels", "wikipedia_sample", "moby_dick", "python311_docs", "postgresql_docs"]

_READ = """
import json, shutil, sys, tempfile, time
from textrain.framework import corpus, corpus_formats, shuffle
path, fmt, splitter, mode, shards = sys.argv[1:6]
for module in ("pyarrow.parquet", "pyarrow.csv", "zstandard", "mwparserfromhell", "blingfire"):  # not reading
    __import__(module)


def read():
    options = corpus_formats.ReadOptions(input_format=fmt, sentence_splitter=splitter)
    paths = corpus.expand_paths(path, options) if fmt != "plain" else corpus.expand_paths(path)
    return sum(len(corpus.document_lines(t)) for t in corpus.iter_document_texts(paths))


def shuffled():
    options = corpus_formats.ReadOptions(input_format=fmt, sentence_splitter=splitter)
    paths = corpus.expand_paths(path, options) if fmt != "plain" else corpus.expand_paths(path)
    spec = shuffle.DocumentCorpus(paths=tuple(paths))
    out = tempfile.mkdtemp()
    try:
        parts = shuffle.plan_partitions(spec, shuffle.DEFAULT_PARTITION_MB << 20)
        for part in parts:
            shuffle.write_spill(spec, part, {"train": int(shards)}, out)
        lines = 0
        with shuffle.reading_spills(shuffle.Spills(out, len(parts))):
            for shard in range(int(shards)):
                lines += sum(len(corpus.document_lines(t)) for t in shuffle.shard_texts(spec, "train", shard, int(shards)))
        return len(parts), lines
    finally:
        shutil.rmtree(out)


best, total, reps = float("inf"), 0.0, 0
while reps < 5 or (total < 0.5 and reps < 50):
    start = time.process_time()
    count = read() if mode == "read" else shuffled()
    cpu = time.process_time() - start
    best, total, reps = min(best, cpu), total + cpu, reps + 1
peak_kb = int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1])
print(json.dumps({"cpu": best, "count": count, "reps": reps, "rss_mb": peak_kb / 1024}))
"""


def documents(mb: float) -> list[list[str]]:
    """Documents (sentence lists) of about `mb` MB, the sources cycled; short documents (~6 sentences)."""
    from benchmarks.lib import corpus_fixtures as cf
    paths = [os.path.join(CORPORA, "en", f"{s}.txt.gz") for s in SOURCES]
    paths = [p for p in paths if os.path.exists(p)] or [os.path.join(REPO, "tests", "data", "austen_emma.txt")]
    docs, size = [], 0
    while size < mb * 1e6:
        for p in paths:
            opener = gzip.open if p.endswith(".gz") else open
            with opener(p, "rt", encoding="utf-8") as f:
                text = f.read()
            for doc in cf.split_documents([d.split("\n") for d in text.split("\n\n") if d.strip()], 6):
                doc = [s.strip() for s in doc if s.strip()]
                if doc:
                    docs.append(doc)
                    size += sum(len(s.encode()) + 1 for s in doc)
                if size >= mb * 1e6:
                    return docs
    return docs


def measure(path: str, fmt: str, splitter: str = "none", mode: str = "read", shards: int = 8) -> dict:
    out = subprocess.run([sys.executable, "-c", _READ, path, fmt, splitter, mode, str(shards)], check=True,
                         capture_output=True, text=True, cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=4.0, help="the smaller size; the larger is 4x")
    parser.add_argument("--shards", type=int, default=8, help="shard jobs of the shuffle measure")
    args = parser.parse_args()
    from benchmarks.lib import corpus_fixtures as cf
    print(f"load: {os.getloadavg()[0]:.2f} (1-min average) on {os.cpu_count()} cores")
    formats = [("plain text", "corpus.txt", cf.write_text, "plain", "none"),
               ("text .zst", "corpus.txt.zst", cf.write_text, "plain", "none"),
               ("JSON Lines", "corpus.jsonl", cf.write_jsonl, "jsonl", "none"),
               ("JSON Lines .zst", "corpus.jsonl.zst", cf.write_jsonl, "jsonl", "none"),
               ("Parquet", "corpus.parquet", lambda d, p: cf.write_parquet(d, p, row_group_size=2000), "parquet",
                "none"),
               ("Arrow (datasets dir)", "saved", cf.write_dataset_dir, "arrow", "none"),
               ("CSV", "corpus.csv", cf.write_csv, "csv", "none"),
               ("MediaWiki XML", "pages.xml", cf.write_mediawiki, "mediawiki", "none"),
               ("JSON Lines + blingfire", "corpus.jsonl", cf.write_jsonl, "jsonl", "blingfire")]
    results: dict[tuple[str, float], dict] = {}
    with tempfile.TemporaryDirectory() as work:
        for mb in (args.mb, 4 * args.mb):
            docs = documents(mb)
            text_mb = sum(len(s.encode()) + 1 for d in docs for s in d) / 1e6
            folder = os.path.join(work, str(mb))
            os.makedirs(folder)
            for name, filename, writer, fmt, splitter in formats:
                path = os.path.join(folder, filename)
                if not os.path.exists(path):
                    writer(docs, path)
                r = measure(path, fmt, splitter)
                r["mb_s"] = text_mb / max(r["cpu"], 1e-9)
                if mb == 4 * args.mb:  # datagen's read of a document corpus
                    shuffled = measure(path, fmt, splitter, "shuffle", args.shards)
                    r["shuffle_mb_s"] = text_mb / max(shuffled["cpu"], 1e-9)
                    r["partitions"] = shuffled["count"][0]
                results[(name, mb)] = r
                print(f"  {mb:g} MB {name}: {r}", flush=True)
    small, large = args.mb, 4 * args.mb
    print(f"\n| format | read MB/s per core ({small:g} MB) | time vs plain text | read MB/s per core ({large:g} MB) | "
          f"time vs plain text | shuffle MB/s per core ({large:g} MB, {args.shards} shards; partitions) | "
          f"peak RSS MB {small:g} -> {large:g} |")
    print("|---|---|---|---|---|---|---|")
    for name, *_ in formats:
        a, b = results[(name, small)], results[(name, large)]
        pa, pb = results[("plain text", small)], results[("plain text", large)]
        shuffled = f"{b['shuffle_mb_s']:.1f} ({b['partitions']})"
        print(f"| {name} | {a['mb_s']:.1f} | {pa['mb_s'] / a['mb_s']:.2f}x | {b['mb_s']:.1f} | "
              f"{pb['mb_s'] / b['mb_s']:.2f}x | {shuffled} | {a['rss_mb']:.0f} -> {b['rss_mb']:.0f} |")
    print(f"load: {os.getloadavg()[0]:.2f} (1-min average) at the end")


if __name__ == "__main__":
    main()
