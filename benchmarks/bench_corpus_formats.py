"""Reading a corpus in each format (issue 23): MB/s per core against plain text, and peak RSS as the
corpus grows 4x.

The same documents (English prose from ../shared/corpora/en, or tests/data when absent) are written in
every format by the real libraries (tests/corpus_fixtures.py), at two sizes (S and 4 S MB of text).
Each read is a fresh process (its format's library imported before the clock starts) that reads every
document the way datagen does
(`corpus.iter_document_texts` + `document_lines` on `expand_paths(..., options)`) and reports its CPU
seconds and peak RSS (VmHWM); MB/s per core = MB of plain text / CPU-s of the read (one process: one core).
The splitter is off (`--sentence_splitter=none`) except in the row that names it.

    nice -n 10 python3 benchmarks/bench_corpus_formats.py [--mb 4]
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
sys.path.insert(0, os.path.join(REPO, "tests"))
CORPORA = os.environ.get("TEXTRAIN_CORPORA", os.path.join(os.path.dirname(REPO), "shared", "corpora"))
SOURCES = ["jane_austen_novels", "wikipedia_sample", "moby_dick", "python311_docs", "postgresql_docs"]

_READ = """
import json, sys, time
from textrain.framework import corpus, corpus_formats
path, fmt, splitter = sys.argv[1:4]
for module in ("pyarrow.parquet", "zstandard", "mwparserfromhell", "blingfire"):  # imports are not reading
    __import__(module)
start = time.process_time()
options = corpus_formats.ReadOptions(input_format=fmt, sentence_splitter=splitter)
paths = corpus.expand_paths(path, options) if fmt != "plain" else corpus.expand_paths(path)
lines = sum(len(corpus.document_lines(t)) for t in corpus.iter_document_texts(paths))
cpu = time.process_time() - start
peak_kb = int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1])
print(json.dumps({"cpu": cpu, "lines": lines, "rss_mb": peak_kb / 1024}))
"""


def documents(mb: float) -> list[list[str]]:
    """Documents (sentence lists) of about `mb` MB, the sources cycled; short documents (~6 sentences)."""
    import corpus_fixtures as cf
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


def read(path: str, fmt: str, splitter: str = "none") -> dict:
    out = subprocess.run([sys.executable, "-c", _READ, path, fmt, splitter], check=True, capture_output=True,
                         text=True, cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=4.0, help="the smaller size; the larger is 4x")
    args = parser.parse_args()
    import corpus_fixtures as cf
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
                r = read(path, fmt, splitter)
                r["mb_s"] = text_mb / max(r["cpu"], 1e-9)
                results[(name, mb)] = r
                print(f"  {mb:g} MB {name}: {r}", flush=True)
    small, large = args.mb, 4 * args.mb
    print(f"\n| format | MB/s per core ({small:g} MB) | vs plain text | MB/s per core ({large:g} MB) | "
          f"vs plain text | peak RSS MB {small:g} -> {large:g} |")
    print("|---|---|---|---|---|---|")
    for name, *_ in formats:
        a, b = results[(name, small)], results[(name, large)]
        pa, pb = results[("plain text", small)], results[("plain text", large)]
        print(f"| {name} | {a['mb_s']:.1f} | {pa['mb_s'] / a['mb_s']:.2f}x slower | {b['mb_s']:.1f} | "
              f"{pb['mb_s'] / b['mb_s']:.2f}x slower | {a['rss_mb']:.0f} -> {b['rss_mb']:.0f} |")
    print(f"load: {os.getloadavg()[0]:.2f} (1-min average) at the end")


if __name__ == "__main__":
    main()
