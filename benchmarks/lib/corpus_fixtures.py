"""The same documents written in every corpus format, by the real libraries (tests/test_corpus_formats.py).

Each writer takes documents (lists of sentences) and a path, and stores each document as one record
whose `text` (JSON Lines: `meta.body`, to exercise dotted fields) holds its sentences one per line."""
from __future__ import annotations

import bz2
import csv
import gzip
import json
import os
from typing import Callable
from xml.sax.saxutils import escape

Docs = list[list[str]]


def read_plain(path: str, limit_bytes: int) -> Docs:
    """Documents of a sentence-per-line corpus (blank line between documents), about limit_bytes of them."""
    docs, doc, size = [], [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                doc.append(line)
                size += len(line) + 1
            elif doc:
                docs.append(doc)
                doc = []
            if size >= limit_bytes and not line:
                break
    if doc:
        docs.append(doc)
    return docs


def split_documents(docs: Docs, sentences_per_doc: int) -> Docs:
    """Shorter documents (the bundled corpora have few, long ones: shards need several)."""
    return [doc[i:i + sentences_per_doc] for doc in docs for i in range(0, len(doc), sentences_per_doc)]


def write_text(docs: Docs, path: str) -> str:
    data = "\n\n".join("\n".join(d) for d in docs) + "\n"
    _write_bytes(path, data.encode("utf-8"))
    return path


def _write_bytes(path: str, data: bytes) -> None:
    if path.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    elif path.endswith(".bz2"):
        data = bz2.compress(data)
    elif path.endswith(".zst"):
        import zstandard
        data = zstandard.ZstdCompressor().compress(data)
    with open(path, "wb") as f:
        f.write(data)


def write_jsonl(docs: Docs, path: str, nested: bool = False) -> str:
    rows = [({"id": i, "meta": {"body": "\n".join(d)}} if nested else {"id": i, "text": "\n".join(d)})
            for i, d in enumerate(docs)]
    _write_bytes(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8"))
    return path


def _table(docs: Docs):
    import pyarrow as pa
    return pa.table({"id": list(range(len(docs))), "text": ["\n".join(d) for d in docs]})


def write_parquet(docs: Docs, path: str, row_group_size: int = 7) -> str:
    import pyarrow.parquet as pq
    pq.write_table(_table(docs), path, row_group_size=row_group_size)
    return path


def write_arrow(docs: Docs, path: str, stream: bool = False) -> str:
    import pyarrow as pa
    table = _table(docs)
    sink = pa.OSFile(path, "wb")
    writer = (pa.ipc.new_stream if stream else pa.ipc.new_file)(sink, table.schema)
    for batch in table.to_batches(max_chunksize=5):
        writer.write_batch(batch)
    writer.close()
    sink.close()
    return path


def write_dataset_dir(docs: Docs, path: str) -> str:
    import datasets
    datasets.Dataset.from_dict({"text": ["\n".join(d) for d in docs]}).save_to_disk(path)
    return path


def write_csv(docs: Docs, path: str, delimiter: str = ",") -> str:
    """CSV (quoted cells hold the line breaks); a TSV has no quoting, so its cells hold a document's
    sentences as one paragraph, cut again by the sentence splitter."""
    with open(path, "w", encoding="utf-8", newline="") as f:
        if delimiter == "\t":
            f.write("id\ttext\n" + "".join(f"{i}\t{' '.join(d)}\n" for i, d in enumerate(docs)))
            return path
        w = csv.writer(f)
        w.writerow(["id", "text"])
        for i, d in enumerate(docs):
            w.writerow([i, "\n".join(d)])
    return path


def write_mediawiki(docs: Docs, path: str) -> str:
    """A MediaWiki export: a page per document whose wikitext holds its sentences with markup around
    (links, bold, a template, a reference, a heading) that the reader must remove; plus a redirect and a
    talk page that it must leave out."""
    pages = []
    for i, doc in enumerate(docs):
        lines = []
        for j, sentence in enumerate(doc):
            words = sentence.split(" ")
            if len(words) > 3 and j % 2 == 0:  # a link and bold text around words of the sentence
                words[1] = f"[[{words[1]}]]"
                words[2] = f"'''{words[2]}'''"
            lines.append(" ".join(words) + ("<ref>a citation</ref>" if j == 0 else ""))
        body = "{{Infobox thing|name=x}}\n" + "\n\n".join(lines) + "\n\n== See also ==\n"
        pages.append(_page(f"Doc {i}", 0, body))
    pages.insert(1, _page("Old name", 0, "#REDIRECT [[Doc 0]]", redirect="Doc 0"))
    pages.insert(2, _page("Talk:Doc 0", 1, "A talk page sentence."))
    xml = ('<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10" xml:lang="en">\n'
           "  <siteinfo><sitename>Test</sitename></siteinfo>\n" + "".join(pages) + "</mediawiki>\n")
    _write_bytes(path, xml.encode("utf-8"))
    return path


def _page(title: str, ns: int, text: str, redirect: str | None = None) -> str:
    red = f'    <redirect title="{escape(redirect)}" />\n' if redirect else ""
    return (f"  <page>\n    <title>{escape(title)}</title>\n    <ns>{ns}</ns>\n    <id>1</id>\n{red}"
            f"    <revision>\n      <id>1</id>\n      <text bytes=\"{len(text)}\" xml:space=\"preserve\">"
            f"{escape(text)}</text>\n    </revision>\n  </page>\n")


# name -> (writer, file name, extra datagen flags)
WRITERS: dict[str, tuple[Callable[[Docs, str], str], str, list[str]]] = {
    "text": (write_text, "corpus.txt", []),
    "text.zst": (write_text, "corpus.txt.zst", []),
    "jsonl": (write_jsonl, "corpus.jsonl", []),
    "jsonl.gz nested": (lambda d, p: write_jsonl(d, p, nested=True), "corpus.jsonl.gz", ["--text_field=meta.body"]),
    "jsonl.zst": (write_jsonl, "corpus.jsonl.zst", []),
    "jsonl.bz2 named .data": (write_jsonl, "corpus.data.bz2", []),
    "parquet": (write_parquet, "corpus.parquet", []),
    "arrow file": (write_arrow, "corpus.arrow", []),
    "arrow stream": (lambda d, p: write_arrow(d, p, stream=True), "stream.arrow", []),
    "datasets dir": (write_dataset_dir, "saved", []),
    "csv": (write_csv, "corpus.csv", []),
    "tsv": (lambda d, p: write_csv(d, p, delimiter="\t"), "corpus.tsv", []),
    "mediawiki .xml.bz2": (write_mediawiki, "pages-articles.xml.bz2", []),
}


def write(name: str, docs: Docs, directory: str) -> tuple[str, list[str]]:
    writer, filename, flags = WRITERS[name]
    return writer(docs, os.path.join(directory, filename)), flags
