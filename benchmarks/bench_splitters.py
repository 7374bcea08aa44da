"""Sentence splitters for corpora whose records hold documents: accuracy, speed, datagen cost.

Accuracy: boundary F1 on text whose sentences are known. The bundled corpora (../shared/corpora/en, zh
and tests/data) are one sentence per line; runs of consecutive lines that end a sentence (. ! ? 。 ！ ？,
closing quotes allowed) are re-joined into paragraphs of up to PARAGRAPH sentences (English with a space,
Chinese with nothing), each splitter cuts them back, and a boundary is a position between two
non-space characters. Speed: MB of paragraphs split per CPU-second (one process: per core). Every
candidate runs on the same paragraphs in the same run, each wrapped as datagen uses it
(framework/sentence_splitters.py: the same CJK end-punctuation pass after each). NLTK punkt is trained on
the paragraphs themselves (unsupervised). spaCy is not measured (not installed here).

Datagen cost of the default: `textrain-datagen --problem=bert_pretrain` (default settings) on the English
paragraphs as JSON Lines cut by the default splitter vs on the same sentences as plain text (the same
shards, checked): CPU seconds of each run.

    nice -n 10 python3 benchmarks/bench_splitters.py [--kb_per_source 300]
"""
from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CORPORA = os.environ.get("TEXTRAIN_CORPORA", os.path.join(os.path.dirname(REPO), "shared", "corpora"))
SOURCES = {
    "en": ["en/wikipedia_sample.txt.gz", "en/jane_austen_novels.txt.gz", "en/lee_news.txt.gz",
           "en/python311_docs.txt.gz", "en/moby_dick.txt.gz", "tests:austen_emma.txt"],
    "zh": ["zh/peoples_daily_199801.txt.gz", "zh/linux_kernel_docs_zh_CN.txt.gz", "zh/debian_handbook_zh_CN.txt.gz"],
}
PARAGRAPH = 6
_ENDS = re.compile(r"[.!?。！？][\"'”’」』）)]*$")


def _path(source: str) -> str:
    if source.startswith("tests:"):
        return os.path.join(REPO, "tests", "data", source[len("tests:"):])
    return os.path.join(CORPORA, source)


def paragraphs(source: str, lang: str, limit: int) -> list[list[str]]:
    """Paragraphs (lists of gold sentences) of about `limit` characters from one sentence-per-line file."""
    opener = gzip.open if source.endswith(".gz") else open
    out, run, size = [], [], 0
    with opener(_path(source), "rt", encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and _ENDS.search(line) and len(line) > 1:
                run.append(line)
                if len(run) == PARAGRAPH:
                    out.append(run)
                    size += sum(map(len, run))
                    run = []
            else:
                if len(run) > 1:
                    out.append(run)
                    size += sum(map(len, run))
                run = []
            if size >= limit:
                break
    return out


def joined(paragraph: list[str], lang: str) -> str:
    return ("" if lang == "zh" else " ").join(paragraph)


def boundaries(sentences: list[str]) -> set[int]:
    """Positions (counted in non-space characters) where a sentence ends, the last one excluded."""
    out, n = set(), 0
    for s in sentences[:-1]:
        n += len("".join(s.split()))
        out.add(n)
    return out


def candidates(train_text: str) -> dict:
    from textrain.framework import sentence_splitters as ss
    found = {name: ss.load(name) for name in ss.NAMES}
    try:
        from nltk.tokenize.punkt import PunktSentenceTokenizer, PunktTrainer
        trainer = PunktTrainer()
        trainer.INCLUDE_ALL_COLLOCS = True
        trainer.train(train_text, finalize=True)
        punkt = PunktSentenceTokenizer(trainer.get_params())
        found["punkt (trained here)"] = lambda line: ss._finish(line, punkt.tokenize(line))
    except ImportError:
        print("nltk not installed: punkt not measured")
    return found


def evaluate(split, paras: list[list[str]], lang: str) -> tuple[float, float, float, float]:
    """(precision, recall, F1, MB per CPU-s)."""
    texts = [joined(p, lang) for p in paras]
    start = time.process_time()
    predicted = [split(t) for t in texts]
    seconds = time.process_time() - start
    tp = fp = fn = 0
    for gold, pred in zip(paras, predicted):
        g, p = boundaries(gold), boundaries(pred)
        tp, fp, fn = tp + len(g & p), fp + len(p - g), fn + len(g - p)
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    return precision, recall, f1, mb / max(seconds, 1e-9)


def datagen_cost(paras: list[list[str]], work: str) -> tuple[float, float, bool]:
    """CPU seconds of bert_pretrain datagen (default settings, 2 shards) on (a) the paragraphs as JSON Lines
    (a record = 4 paragraphs), cut by the default splitter, and (b) the same sentences already cut, as
    plain text; the difference is what splitting (and JSON) costs, as the two make the same shards."""
    from textrain.framework import encoders
    from textrain.framework import sentence_splitters as ss
    split = ss.load(ss.DEFAULT)
    records = ["\n".join(joined(p, "en") for p in paras[i:i + 4]) for i in range(0, len(paras), 4)]
    jsonl, plain = os.path.join(work, "paragraphs.jsonl"), os.path.join(work, "sentences.txt")
    with open(jsonl, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": r}) + "\n" for r in records)
    with open(plain, "w", encoding="utf-8") as f:
        f.write("\n\n".join("\n".join(s for line in r.split("\n") for s in split(line)) for r in records) + "\n")
    vocab = encoders.build_wordpiece_vocab(iter([joined(p, "en") for p in paras]), vocab_size=8000,
                                                out_file=os.path.join(work, "vocab.txt"))
    seconds, shards = [], []
    for name, corpus in (("jsonl", jsonl), ("plain", plain)):
        out = os.path.join(work, name)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-m", "textrain.framework.datagen", "--problem=bert_pretrain",
                        f"--input_file={corpus}", f"--vocab_file={vocab}", f"--data_dir={out}", "--num_shards=2"],
                       check=True, cwd=REPO, capture_output=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        seconds.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
        files = sorted(glob.glob(os.path.join(out, "*", "*.tfrecord")))
        shards.append([open(f, "rb").read() for f in files])
    return seconds[0], seconds[1], shards[0] == shards[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kb_per_source", type=int, default=300)
    args = parser.parse_args()
    if not os.path.isdir(CORPORA):
        print(f"{CORPORA} is absent: nothing to measure")
        return
    from textrain.framework import sentence_splitters as ss
    print(f"load: {os.getloadavg()[0]:.2f} (1-min average) on {os.cpu_count()} cores")
    data = {lang: [p for s in sources for p in paragraphs(s, lang, args.kb_per_source * 1000)]
            for lang, sources in SOURCES.items()}
    for lang, paras in data.items():
        print(f"{lang}: {len(paras)} paragraphs, {sum(map(len, paras))} sentences, "
              f"{sum(len(joined(p, lang).encode()) for p in paras) / 1e6:.2f} MB")
    found = candidates("\n".join(joined(p, "en") for p in data["en"]))
    print("| splitter | en P | en R | en F1 | en MB/s/core | zh P | zh R | zh F1 | zh MB/s/core |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, split in found.items():
        row = [name + (" (default)" if name == ss.DEFAULT else "")]
        for lang in ("en", "zh"):
            p, r, f1, speed = evaluate(split, data[lang], lang)
            row += [f"{p:.3f}", f"{r:.3f}", f"{f1:.3f}", f"{speed:.2f}"]
        print("| " + " | ".join(row) + " |", flush=True)
    with tempfile.TemporaryDirectory() as work:
        with_split, already_split, same = datagen_cost(data["en"], work)
        print(f"bert_pretrain datagen (default settings, 2 shards), English: {with_split:.2f} CPU-s on the "
              f"paragraphs as JSON Lines cut by {ss.DEFAULT}, {already_split:.2f} on the same sentences as plain "
              f"text (shards identical: {same}): splitting and JSON cost "
              f"+{100 * (with_split - already_split) / already_split:.0f} %")
    print(f"load: {os.getloadavg()[0]:.2f} (1-min average) at the end")


if __name__ == "__main__":
    main()
