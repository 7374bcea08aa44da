"""xlnet_pretrain datagen at scale: CPU seconds and bytes read at 8 and 64 shards, one command.

    nice python benchmarks/bench_xlnet_scale.py --work_dir /tmp/xlnetscale [--mb 200] [--shards 8,64]

The corpus is bench_beam_datagen.py's (../shared/corpora/en/ cut into short documents, each copy grouped
differently), at least --mb MB, with no minimum document count; the SentencePiece model is the shipped
tests/data/xlnet_spiece_1200.model (no training in the runs). Every run is `python -m
textrain.framework.datagen --problem=xlnet_pretrain` in a fresh data_dir, local runner, 1 worker, measured
over its whole process tree as bench_beam_datagen.py measures (CPU = utime + stime; read = rchar).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.bench_beam_datagen import CORPORA, ROOT, loadavg, make_corpus, run_datagen  # noqa: E402

SP_MODEL = os.path.join(ROOT, "tests", "data", "xlnet_spiece_1200.model")
SETTINGS = ["--seq_len=128", "--reuse_len=64", "--num_predict=21", "--bsz_per_host=8", "--num_core_per_host=2",
            "--bi_data", "--seed=1"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work_dir", required=True)
    parser.add_argument("--mb", type=float, default=200)
    parser.add_argument("--shards", default="8,64")
    args = parser.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    corpus = os.path.join(args.work_dir, f"xlnet-{args.mb:g}MB.txt")
    meta = make_corpus(corpus, args.mb, CORPORA, min_documents=0)
    print(f"corpus {corpus}: {meta['bytes'] / 1e6:.1f} MB, {meta['documents']} documents", flush=True)
    results = {}
    for shards in (int(s) for s in args.shards.split(",")):
        data_dir = os.path.join(args.work_dir, "runs", f"s{shards}")
        shutil.rmtree(data_dir, ignore_errors=True)
        before = loadavg()
        r = run_datagen(["--problem=xlnet_pretrain", f"--input_file={corpus}", f"--sp_model={SP_MODEL}",
                         f"--data_dir={data_dir}", f"--num_shards={shards}", *SETTINGS])
        r.update(load=f"{before} -> {loadavg()}", corpus_mb=meta["bytes"] / 1e6,
                 cpu_per_mb=r["cpu"] / (meta["bytes"] / 1e6), read_x=r["rchar"] / meta["bytes"])
        results[shards] = r
        print(f"{shards} shards: {r['cpu']:.1f} CPU-s ({r['cpu_per_mb']:.3f} CPU-s/MB), rchar "
              f"{r['rchar'] / 1e6:.0f} MB ({r['read_x']:.2f}x the corpus), read_bytes {r['read_bytes'] / 1e6:.0f} MB, "
              f"wall {r['wall']:.0f}s, peak RSS {r['peak_kb'] / 1024:.0f} MiB, load {r['load']}", flush=True)
        shutil.rmtree(data_dir, ignore_errors=True)
    with open(os.path.join(args.work_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
