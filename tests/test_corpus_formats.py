"""Corpora in every format (framework/corpus_formats/): files written by the real libraries
(pyarrow, datasets, zstandard, a MediaWiki export made here) give the shards of the same text as plain
text, byte for byte, through the real `textrain-datagen`; bad input is one line naming the file and place."""
from __future__ import annotations

import glob
import json
import os
import pickle
import subprocess
import sys

import pytest

from benchmarks.lib import corpus_fixtures as cf  # the same files of every format as the benchmark's

HERE = os.path.dirname(os.path.abspath(__file__))

pytest.importorskip("pyarrow")
pytest.importorskip("zstandard")

from textrain.framework import corpus, corpus_formats, encoders, sentence_splitters  # noqa: E402

REPO = os.path.dirname(HERE)
EMMA = os.path.join(HERE, "data", "austen_emma.txt")
SPM = os.path.join(HERE, "data", "xlnet_spiece_1200.model")
BERT = ["--problem=bert_pretrain", "--num_shards=2", "--dupe_factor=1", "--max_seq_length=64",
        "--max_predictions_per_seq=10"]


def datagen(data_dir: str, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-m", "textrain.framework.datagen", f"--data_dir={data_dir}", *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    if ok:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def shard_bytes(data_dir: str) -> dict[str, bytes]:
    """Every shard's bytes by file name (manifests aside: they record the settings given)."""
    files = sorted(glob.glob(os.path.join(data_dir, "*", "*.tfrecord")))
    assert files, f"no shards in {data_dir}"
    out = {}
    for f in files:
        with open(f, "rb") as fh:
            out[os.path.basename(f)] = fh.read()
    return out


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """The documents, the vocab, and the plain-text corpus with its bert_pretrain shards."""
    root = str(tmp_path_factory.mktemp("formats"))
    docs = cf.split_documents(cf.read_plain(EMMA, 30_000), 6)
    vocab = encoders.build_wordpiece_vocab(iter(open(EMMA, encoding="utf-8").read().split("\n")),
                                                vocab_size=1500, out_file=os.path.join(root, "vocab.txt"))
    text = cf.write_text(docs, os.path.join(root, "corpus.txt"))
    datagen(os.path.join(root, "ref_bert"), *BERT, f"--input_file={text}", f"--vocab_file={vocab}")
    return {"root": root, "docs": docs, "vocab": vocab, "text": text,
            "bert": shard_bytes(os.path.join(root, "ref_bert"))}


# ----------------------------------------------------------------------------------------------- #
# the same text in every format: the same shards
# ----------------------------------------------------------------------------------------------- #
@pytest.mark.parametrize("fmt", [n for n in cf.WRITERS if n != "text"])
def test_bert_pretrain_same_shards_in_every_format(work, tmp_path, fmt):
    if fmt == "datasets dir":
        pytest.importorskip("datasets")
    if fmt.startswith("mediawiki"):
        pytest.importorskip("mwparserfromhell")
    path, flags = cf.write(fmt, work["docs"], str(tmp_path))
    reference = work["bert"]
    splitter = "none"
    if fmt == "tsv":
        # A TSV cell cannot hold a line break: its documents are paragraphs, cut by the default splitter;
        # the reference is the plain text of the sentences that splitter gives.
        splitter = sentence_splitters.DEFAULT
        split = sentence_splitters.load(splitter)
        text = cf.write_text([split(" ".join(d)) for d in work["docs"]], str(tmp_path / "sentences.txt"))
        datagen(str(tmp_path / "ref"), *BERT, f"--input_file={text}", f"--vocab_file={work['vocab']}")
        reference = shard_bytes(str(tmp_path / "ref"))
    datagen(str(tmp_path / "out"), *BERT, f"--input_file={path}", f"--vocab_file={work['vocab']}",
            f"--sentence_splitter={splitter}", *flags)
    assert shard_bytes(str(tmp_path / "out")) == reference


def test_format_given_and_workers(work, tmp_path):
    """--input_format names a format the name does not tell; 2 workers write what 1 wrote."""
    path = cf.write_jsonl(work["docs"], str(tmp_path / "corpus.records"))
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:  # a first line that is not an object: content detection says text
        f.write(b"\n" + data)
    common = [*BERT, f"--input_file={path}", f"--vocab_file={work['vocab']}", "--sentence_splitter=none"]
    datagen(str(tmp_path / "one"), *common, "--input_format=jsonl")
    datagen(str(tmp_path / "two"), *common, "--input_format=jsonl", "--num_workers=2")
    assert shard_bytes(str(tmp_path / "one")) == work["bert"] == shard_bytes(str(tmp_path / "two"))


def test_jsonl_values_only_the_json_module_reads(work, tmp_path):
    """Records with values orjson refuses (NaN, an integer past 64 bits, a lone surrogate) in other fields:
    read as the json module reads them, the plain text's shards."""
    path = tmp_path / "odd.jsonl"
    odd = ['"n": NaN', '"big": 123456789012345678901234567890', '"s": "\\ud800"']
    path.write_text("".join("{" + odd[i % 3] + ", " + json.dumps({"text": "\n".join(d)})[1:] + "\n"
                            for i, d in enumerate(work["docs"])))
    datagen(str(tmp_path / "o"), *BERT, f"--input_file={path}", f"--vocab_file={work['vocab']}",
            "--sentence_splitter=none")
    assert shard_bytes(str(tmp_path / "o")) == work["bert"]


def test_electra_and_xlnet_same_shards(work, tmp_path):
    docs = work["docs"]
    parquet = cf.write_parquet(docs, str(tmp_path / "c.parquet"))
    jsonl = cf.write_jsonl(docs, str(tmp_path / "c.jsonl.zst"))
    electra = ["--problem=electra_pretrain", "--num_shards=3", "--max_seq_length=48", f"--vocab_file={work['vocab']}",
               "--sentence_splitter=none"]
    xlnet = ["--problem=xlnet_pretrain", f"--sp_model={SPM}", "--seq_len=64", "--reuse_len=32", "--num_predict=8",
             "--bsz_per_host=4", "--num_core_per_host=1", "--num_shards=2", "--sentence_splitter=none"]
    for name, args in (("electra", electra), ("xlnet", xlnet)):
        outs = []
        for i, path in enumerate((work["text"], parquet, jsonl)):
            out = str(tmp_path / f"{name}{i}")
            datagen(out, *args, f"--input_file={path}")
            outs.append(shard_bytes(out))
        assert outs[0] == outs[1] == outs[2], name


def test_classification_rows_from_jsonl_parquet_csv(tmp_path):
    """tsv_classification's columns from JSON Lines (a numeric label), Parquet and CSV: the shards of the TSV."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    rows = [(f"sentence number {i} is {'good' if i % 3 else 'bad'} , with a\ttab", i % 3 == 0) for i in range(40)]
    tsv = tmp_path / "train.tsv"
    tsv.write_text("sentence\tlabel\n" + "".join(f"{s.replace(chr(9), ' ')}\t{int(y)}\n" for s, y in rows))
    jsonl = tmp_path / "train.jsonl"
    jsonl.write_text("".join(json.dumps({"sentence": s, "label": int(y), "other": [1]}) + "\n" for s, y in rows))
    parquet = str(tmp_path / "train.parquet")
    pq.write_table(pa.table({"label": [str(int(y)) for _, y in rows], "sentence": [s for s, _ in rows]}), parquet,
                   row_group_size=9)
    csv_path = tmp_path / "train.csv"
    csv_path.write_text("label,sentence\n" + "".join(f'{int(y)},"{s}"\n' for s, y in rows))
    vocab = encoders.build_wordpiece_vocab(iter([s for s, _ in rows]), vocab_size=100,
                                                out_file=str(tmp_path / "vocab.txt"))
    outs = []
    for i, path in enumerate((tsv, jsonl, parquet, csv_path)):
        out = str(tmp_path / f"out{i}")
        datagen(out, "--problem=tsv_classification", f"--train_file={path}", f"--vocab_file={vocab}",
                "--max_seq_length=16", "--dev_fraction=0.25")
        outs.append(shard_bytes(out))
    assert outs[0] == outs[1] == outs[2] == outs[3]


def test_translation_pairs_from_jsonl_and_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    en = [f"the sentence number {i} ." for i in range(300)]
    zh = [f"第{i}句话。" for i in range(300)]
    plain, structured = tmp_path / "plain", tmp_path / "structured"
    plain.mkdir()
    structured.mkdir()
    (plain / "train.en").write_text("\n".join(en) + "\n")
    (plain / "train.zh").write_text("\n".join(zh) + "\n")
    (structured / "train.en.jsonl").write_text("".join(json.dumps({"t": {"s": s}}) + "\n" for s in en))
    pq.write_table(pa.table({"t": [{"s": s} for s in zh]}), str(structured / "train.zh.parquet"), row_group_size=64)
    common = ["--problem=translate_enzh_sub8k", "--num_shards=2"]
    datagen(str(tmp_path / "a"), *common, f"--tmp_dir={plain}")
    datagen(str(tmp_path / "b"), *common, f"--tmp_dir={structured}", "--text_field=t.s")
    assert shard_bytes(str(tmp_path / "a")) == shard_bytes(str(tmp_path / "b"))


# ----------------------------------------------------------------------------------------------- #
# documents to sentences; Wikipedia
# ----------------------------------------------------------------------------------------------- #
def test_default_splitter_cuts_paragraphs(work, tmp_path):
    """Records holding paragraphs: the default splitter's sentences, the shards of that text as plain text."""
    split = sentence_splitters.load(sentence_splitters.DEFAULT)
    paragraphs = [[" ".join(doc)] for doc in work["docs"]]
    sentences = [[s for p in doc for s in split(p)] for doc in paragraphs]
    assert sum(map(len, sentences)) > 2 * len(sentences)  # the splitter did cut
    text = cf.write_text(sentences, str(tmp_path / "sentences.txt"))
    jsonl = cf.write_jsonl(paragraphs, str(tmp_path / "paragraphs.jsonl"))
    common = [*BERT, f"--vocab_file={work['vocab']}"]
    datagen(str(tmp_path / "a"), *common, f"--input_file={text}")
    datagen(str(tmp_path / "b"), *common, f"--input_file={jsonl}")
    assert shard_bytes(str(tmp_path / "a")) == shard_bytes(str(tmp_path / "b"))


def test_splitter_handles_chinese_end_punctuation():
    split = sentence_splitters.load(sentence_splitters.DEFAULT)
    assert split("我们今天去了北京。天气很好！“你呢？”他问。") == ["我们今天去了北京。", "天气很好！", "“你呢？”", "他问。"]
    assert split("Mr. Smith went to Washington. He arrived at 3 p.m. yesterday!") == [
        "Mr. Smith went to Washington.", "He arrived at 3 p.m. yesterday!"]


def test_mediawiki_dump_articles_without_markup(work, tmp_path):
    pytest.importorskip("mwparserfromhell")
    docs = work["docs"][:12]
    path = cf.write_mediawiki(docs, str(tmp_path / "wiki-pages-articles.xml.bz2"))
    options = corpus_formats.ReadOptions(sentence_splitter="none")
    (wiki,) = corpus.expand_paths(path, options)
    assert wiki.options.input_format == "mediawiki"
    got = [corpus.document_lines(t) for t in corpus.iter_document_texts([wiki])]
    assert got == docs  # no redirect, no talk page, no template/ref/heading/link/bold markup


# ----------------------------------------------------------------------------------------------- #
# bad input: one line naming the file and place; --skip_bad_records; nothing written
# ----------------------------------------------------------------------------------------------- #
def _one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode != 0
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("textrain-datagen: error: "), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    return line


def _bad_cases(tmp_path, docs) -> list[tuple[str, list[str], list[str]]]:
    """(path, extra flags, words the message must hold)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard
    good = "".join(json.dumps({"text": "\n".join(d)}) + "\n" for d in docs)
    cases = []
    p = tmp_path / "missing.jsonl"
    p.write_text(good + '{"body": "x"}\n')
    cases.append((str(p), [], ["missing.jsonl", f"line {len(docs) + 1}", "no field 'text'"]))
    p = tmp_path / "notstring.jsonl"
    p.write_text('{"text": 3}\n' + good)
    cases.append((str(p), [], ["notstring.jsonl", "line 1", "int, not a string"]))
    p = tmp_path / "badjson.jsonl"
    p.write_text(good + '{"text": "cut\n')
    cases.append((str(p), [], ["badjson.jsonl", f"line {len(docs) + 1}", "not JSON"]))
    p = tmp_path / "nocolumn.parquet"
    pq.write_table(pa.table({"body": ["a"]}), str(p))
    cases.append((str(p), [], ["nocolumn.parquet", "no column 'text'", "body"]))
    p = tmp_path / "corrupt.parquet"
    pq.write_table(pa.table({"text": ["\n".join(d) for d in docs]}), str(p), row_group_size=5)
    data = bytearray(p.read_bytes())
    data[200:400] = b"\x00" * 200
    p.write_bytes(bytes(data))
    cases.append((str(p), [], ["corrupt.parquet", "row group"]))
    p = tmp_path / "cut.jsonl.zst"
    p.write_bytes(zstandard.ZstdCompressor().compress(good.encode())[:-40])
    cases.append((str(p), [], ["cut.jsonl.zst", "corrupt or truncated"]))
    p = tmp_path / "cut.txt.bz2"
    cf.write_text(docs, str(p))
    p.write_bytes(p.read_bytes()[:-60])
    cases.append((str(p), [], ["cut.txt.bz2", "corrupt or truncated"]))
    p = tmp_path / "cut-pages.xml"
    cf.write_mediawiki(docs[:3], str(p))
    p.write_bytes(p.read_bytes()[:-300])
    cases.append((str(p), [], ["cut-pages.xml", "truncated"]))
    return cases


def test_bad_input_is_one_line_and_writes_nothing(work, tmp_path):
    pytest.importorskip("mwparserfromhell")
    for path, flags, words in _bad_cases(tmp_path, work["docs"][:8]):
        out = tmp_path / ("out_" + os.path.basename(path))
        proc = datagen(str(out), *BERT, f"--input_file={path}", f"--vocab_file={work['vocab']}", *flags, ok=False)
        line = _one_line_error(proc)
        for word in words:
            assert word in line, (path, line)
        assert not glob.glob(str(out / "*" / "*.tfrecord*")), line


def test_skip_bad_records(work, tmp_path):
    docs = work["docs"]
    lines = [json.dumps({"text": "\n".join(d)}) for d in docs]
    bad = lines[:3] + ['{"text": null}', "not json"] + lines[3:]
    path = tmp_path / "some_bad.jsonl"
    path.write_text("\n".join(bad) + "\n")
    common = [*BERT, f"--input_file={path}", f"--vocab_file={work['vocab']}", "--sentence_splitter=none"]
    line = _one_line_error(datagen(str(tmp_path / "one"), *common, "--skip_bad_records=1", ok=False))
    assert "line 5" in line and "1 bad record(s) skipped before it" in line
    proc = datagen(str(tmp_path / "two"), *common, "--skip_bad_records=2")
    assert "skipped 2 bad record(s)" in proc.stderr and "line 4, line 5" in proc.stderr
    assert shard_bytes(str(tmp_path / "two")) == work["bert"]


def test_skip_bad_records_of_table_rows(tmp_path):
    """tsv_classification's rows from JSON Lines, one record without its label: the one line naming file and
    line; with --skip_bad_records=1 the shards of the same file without that record."""
    rows = [json.dumps({"sentence": f"sentence number {i} is {'good' if i % 3 else 'bad'}", "label": i % 3 == 0})
            for i in range(40)]
    vocab = encoders.build_wordpiece_vocab(iter(rows), vocab_size=100, out_file=str(tmp_path / "vocab.txt"))
    good, bad = tmp_path / "good" / "train.jsonl", tmp_path / "bad" / "train.jsonl"
    good.parent.mkdir()
    bad.parent.mkdir()
    good.write_text("\n".join(rows[:2] + rows[3:]) + "\n")
    bad.write_text("\n".join(rows[:2] + ['{"sentence": "no label"}'] + rows[3:]) + "\n")
    common = ["--problem=tsv_classification", f"--vocab_file={vocab}", "--max_seq_length=16", "--dev_fraction=0.25"]
    line = _one_line_error(datagen(str(tmp_path / "one"), *common, f"--train_file={bad}", ok=False))
    assert "bad/train.jsonl: line 3: no field 'label'" in line
    skipped = datagen(str(tmp_path / "skipped"), *common, f"--train_file={bad}", "--skip_bad_records=1",
                      "--num_shards=8")
    datagen(str(tmp_path / "reference"), *common, f"--train_file={good}", "--num_shards=8")
    assert shard_bytes(str(tmp_path / "skipped")) == shard_bytes(str(tmp_path / "reference"))
    # The file is read a fixed number of times (count pass, partition, header, labels), not once per shard
    # job: the skipped-record warning does not repeat with the shard count.
    one_shard = datagen(str(tmp_path / "skipped1"), *common, f"--train_file={bad}", "--skip_bad_records=1",
                        "--num_shards=1")
    warnings = [p.stderr.count("skipped 1 bad record(s)") for p in (one_shard, skipped)]
    assert warnings[0] == warnings[1] > 0, warnings


def test_compressed_parquet_is_refused(work, tmp_path):
    path = cf.write_parquet(work["docs"], str(tmp_path / "c.parquet"))
    os.rename(path, path + ".gz")
    line = _one_line_error(datagen(str(tmp_path / "o"), *BERT, f"--input_file={path}.gz",
                                   f"--vocab_file={work['vocab']}", ok=False))
    assert "c.parquet.gz" in line and "decompress" in line


def test_beam_runner_same_shards(work, tmp_path, split_corpus):
    """--runner=beam reads the partitions as a Beam stage, shuffles them to the shards through the engine and
    writes the shards local datagen wrote from the plain text; nothing is left."""
    pytest.importorskip("apache_beam")
    pattern, reference, parts = split_corpus
    direct_2 = "--runner=DirectRunner --direct_num_workers=2 --direct_running_mode=multi_processing"
    out = str(tmp_path / "beam")
    proc = datagen(out, *BERT, f"--input_file={pattern}", f"--vocab_file={work['vocab']}",
                   "--sentence_splitter=none", "--runner=beam", f"--beam_pipeline_options={direct_2}")
    assert f"{parts} partitions" in proc.stderr
    assert shard_bytes(out) == reference
    assert leftovers(out) == []


# ----------------------------------------------------------------------------------------------- #
# work split by file and row group: any number of workers, the same shards; nothing left
# ----------------------------------------------------------------------------------------------- #
def leftovers(data_dir: str) -> list[str]:
    """Spill files and temporary files left in a data_dir."""
    return sorted(p for p in glob.glob(os.path.join(data_dir, "**", "*"), recursive=True, include_hidden=True)
                  if ".shuffle" in p or ".beam-failures" in p or p.endswith(".incomplete"))


@pytest.fixture(scope="module")
def split_corpus(work):
    """The documents in three files of three formats (Parquet of 7-row groups, JSON Lines .gz, an Arrow file
    of 5-row batches), and the shards of the same three files as plain text: (pattern, shards, partition count)."""
    root = os.path.join(work["root"], "split")
    os.makedirs(root)
    docs = work["docs"]
    thirds = [docs[:len(docs) // 3], docs[len(docs) // 3:2 * len(docs) // 3], docs[2 * len(docs) // 3:]]
    cf.write_parquet(thirds[0], os.path.join(root, "part1.parquet"))
    cf.write_jsonl(thirds[1], os.path.join(root, "part2.jsonl.gz"))
    cf.write_arrow(thirds[2], os.path.join(root, "part3.arrow"))
    for i, third in enumerate(thirds, 1):
        cf.write_text(third, os.path.join(root, f"part{i}.txt"))
    out = os.path.join(root, "plain")
    datagen(out, *BERT, f"--input_file={root}/part*.txt", f"--vocab_file={work['vocab']}")
    parts = -(-len(thirds[0]) // 7) + 1 + -(-len(thirds[2]) // 5)  # row groups, one file, record batches
    return f"{root}/part1.parquet,{root}/part2.jsonl.gz,{root}/part3.arrow", shard_bytes(out), parts


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_partitions_of_files_and_row_groups_same_shards_any_workers(work, tmp_path, split_corpus, workers):
    """Three files, split into partitions by file, row group and record batch, read by 1, 2 or 3 workers:
    the shards of the same files as plain text, and no spill file left behind."""
    pattern, reference, parts = split_corpus
    out = str(tmp_path / "out")
    proc = datagen(out, *BERT, f"--input_file={pattern}", f"--vocab_file={work['vocab']}",
                   "--sentence_splitter=none", f"--num_workers={workers}")
    assert f"3 files -> {parts} partitions" in proc.stderr
    assert shard_bytes(out) == reference
    assert leftovers(out) == []


def test_tasks_one_after_another_read_each_partition_once(work, tmp_path, split_corpus):
    """--num_tasks=2 run one after the other: the first task reads every partition, the second reads none
    (it finds the spill files) and writes the manifests; the shards are one run's, and no spill is left."""
    pattern, reference, parts = split_corpus
    out = str(tmp_path / "tasks")
    common = [*BERT, f"--input_file={pattern}", f"--vocab_file={work['vocab']}", "--sentence_splitter=none",
              "--num_tasks=2"]
    first = datagen(out, *common, "--task_id=0")
    assert f"shuffle (partitions read): {parts}/{parts}, {len(work['docs'])} documents" in first.stderr
    assert leftovers(out) != []  # the spill files wait for task 1
    second = datagen(out, *common, "--task_id=1")
    assert f"shuffle (partitions read): {parts}/{parts}, 0 documents" in second.stderr
    assert shard_bytes(out) == reference
    assert leftovers(out) == [] and glob.glob(os.path.join(out, "*", "*.manifest.json"))


def test_failure_mid_way_leaves_nothing(work, tmp_path):
    """A file whose last row group is corrupt, after good partitions read by 2 workers: one line naming it, and
    no spill file, temporary file or shard left in a data_dir that existed before."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    docs = work["docs"]
    good = cf.write_parquet(docs, str(tmp_path / "a.parquet"))
    bad = tmp_path / "b.parquet"
    pq.write_table(pa.table({"text": ["\n".join(d) for d in docs]}), str(bad), row_group_size=40)
    meta = pq.ParquetFile(str(bad)).metadata
    last = meta.row_group(meta.num_row_groups - 1).column(0)
    data = bytearray(bad.read_bytes())
    start = last.data_page_offset
    data[start:start + 64] = b"\xff" * 64
    bad.write_bytes(bytes(data))
    out = tmp_path / "out"
    (out / "bert_pretrain").mkdir(parents=True)
    proc = datagen(str(out), *BERT, f"--input_file={good},{bad}", f"--vocab_file={work['vocab']}",
                   "--sentence_splitter=none", "--num_workers=2", ok=False)
    line = _one_line_error(proc)
    assert "b.parquet" in line and f"row group {meta.num_row_groups - 1}" in line, line
    assert leftovers(str(out)) == [] and not glob.glob(str(out / "*" / "*.tfrecord*"))


def test_skip_bad_records_counts_per_file_across_partitions(work, tmp_path):
    """Bad records in two row groups (two partitions, read apart): --skip_bad_records=1 names the second with
    the first skipped before it; =2 leaves both out and logs them."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    texts = ["\n".join(d) for d in work["docs"]]
    texts[2] = texts[30] = None
    path = str(tmp_path / "nulls.parquet")
    pq.write_table(pa.table({"text": texts}), path, row_group_size=7)
    common = [*BERT, f"--input_file={path}", f"--vocab_file={work['vocab']}", "--sentence_splitter=none",
              "--num_workers=2"]
    line = _one_line_error(datagen(str(tmp_path / "one"), *common, "--skip_bad_records=1", ok=False))
    assert "row group 4, row 2: field 'text' is NoneType" in line and "1 bad record(s) skipped before it" in line
    proc = datagen(str(tmp_path / "two"), *common, "--skip_bad_records=2")
    assert "skipped 2 bad record(s)" in proc.stderr and "row group 0, row 2, row group 4, row 2" in proc.stderr


def test_beam_checks_bad_records_per_file_as_local(work, tmp_path):
    """--runner=beam: the same file as above, one bad record in each of two row groups (two partitions, read by
    different bundles): --skip_bad_records=1 is the one line naming the second, =2 writes local's shards."""
    pytest.importorskip("apache_beam")
    import pyarrow as pa
    import pyarrow.parquet as pq
    texts = ["\n".join(d) for d in work["docs"]]
    texts[2] = texts[30] = None
    path = str(tmp_path / "nulls.parquet")
    pq.write_table(pa.table({"text": texts}), path, row_group_size=7)
    common = [*BERT, f"--input_file={path}", f"--vocab_file={work['vocab']}", "--sentence_splitter=none"]
    beam = ["--runner=beam", "--beam_pipeline_options=--runner=DirectRunner --direct_num_workers=2 "
                             "--direct_running_mode=multi_processing"]
    failed = str(tmp_path / "one")
    line = _one_line_error(datagen(failed, *common, *beam, "--skip_bad_records=1", ok=False))
    assert "row group 4, row 2: field 'text' is NoneType" in line and "1 bad record(s) skipped before it" in line
    assert not glob.glob(os.path.join(failed, "**", "*.tfrecord"), recursive=True) and leftovers(failed) == []
    datagen(str(tmp_path / "local"), *common, "--skip_bad_records=2")
    datagen(str(tmp_path / "two"), *common, *beam, "--skip_bad_records=2")
    assert shard_bytes(str(tmp_path / "two")) == shard_bytes(str(tmp_path / "local"))


# ----------------------------------------------------------------------------------------------- #
# detection; the plain-text path without the [corpora] extra
# ----------------------------------------------------------------------------------------------- #
def test_format_from_name_then_content(work, tmp_path):
    docs = work["docs"][:3]
    named = {"a.jsonl.zst": cf.write_jsonl, "a.ndjson": cf.write_jsonl, "a.csv": cf.write_csv,
             "a.parquet": cf.write_parquet, "a.arrow": cf.write_arrow, "a.txt": cf.write_jsonl,
             "wiki.xml.gz": cf.write_mediawiki}
    expected = {"a.jsonl.zst": "jsonl", "a.ndjson": "jsonl", "a.csv": "csv", "a.parquet": "parquet",
                "a.arrow": "arrow", "a.txt": "text", "wiki.xml.gz": "mediawiki"}
    unnamed = {"p.bin": cf.write_parquet, "s.bin": lambda d, p: cf.write_arrow(d, p, stream=True),
               "f.bin": cf.write_arrow, "j.bin": cf.write_jsonl, "w.bin": cf.write_mediawiki, "t.bin": cf.write_text}
    expected.update({"p.bin": "parquet", "s.bin": "arrow", "f.bin": "arrow", "j.bin": "jsonl", "w.bin": "mediawiki",
                     "t.bin": "text"})
    for name, writer in {**named, **unnamed}.items():
        writer(docs, str(tmp_path / name))
        assert corpus_formats.detect_format(str(tmp_path / name)) == expected[name], name
    (path,) = corpus.expand_paths(str(tmp_path / "j.bin"), corpus_formats.ReadOptions(text_field="x"))
    again = pickle.loads(pickle.dumps(path))  # what a Beam worker would get
    assert again == path and again.options == path.options and again.options.input_format == "jsonl"


_BLOCK_EXTRAS = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pyarrow", "zstandard", "mwparserfromhell", "blingfire"):
            raise ImportError(f"no module named {name} (blocked)")
sys.meta_path.insert(0, Block())
sys.argv = ["textrain-datagen", *sys.argv[1:]]
from textrain.framework import datagen
datagen.run()
"""


def test_plain_text_needs_no_extra_and_formats_name_theirs(work, tmp_path):
    """Without pyarrow, zstandard, mwparserfromhell and blingfire: plain text makes its shards; a Parquet
    file or the default splitter is one line naming the package to install."""
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", _BLOCK_EXTRAS, *BERT, f"--vocab_file={work['vocab']}", *args],
                              cwd=REPO, capture_output=True, text=True, timeout=300,
                              env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    proc = run(f"--input_file={work['text']}", f"--data_dir={tmp_path / 'plain'}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert shard_bytes(str(tmp_path / "plain")) == work["bert"]
    parquet = cf.write_parquet(work["docs"], str(tmp_path / "c.parquet"))
    line = _one_line_error(run(f"--input_file={parquet}", f"--data_dir={tmp_path / 'p'}", "--sentence_splitter=none"))
    assert "pyarrow" in line and "textrain[corpora]" in line
    jsonl = cf.write_jsonl(work["docs"], str(tmp_path / "c.jsonl"))
    line = _one_line_error(run(f"--input_file={jsonl}", f"--data_dir={tmp_path / 'j'}"))
    assert "blingfire" in line and "--sentence_splitter=none" in line


def test_paragraphs_as_documents(work, tmp_path):
    """Records of two paragraphs each (a blank line between): --paragraphs_as_documents makes each paragraph
    a document, the shards of the plain text whose documents they are."""
    docs = work["docs"]
    records = ["\n\n".join("\n".join(d) for d in docs[i:i + 2]) for i in range(0, len(docs), 2)]
    path = tmp_path / "paragraphs.jsonl"
    path.write_text("".join(json.dumps({"text": r}) + "\n" for r in records))
    common = [*BERT, f"--input_file={path}", f"--vocab_file={work['vocab']}", "--sentence_splitter=none"]
    datagen(str(tmp_path / "a"), *common, "--paragraphs_as_documents")
    assert shard_bytes(str(tmp_path / "a")) == work["bert"]
    datagen(str(tmp_path / "b"), *common)  # a record is one document: other pairs
    assert shard_bytes(str(tmp_path / "b")) != work["bert"]


def test_csv_pyarrow_and_csv_module_give_the_same_records(tmp_path):
    """CSV/TSV are parsed by pyarrow's reader, and by the csv module from wherever pyarrow stops: the same
    records (values, bad records and where they are, errors) as the csv module alone gives."""
    import gzip
    cases = {
        "bom_crlf.csv": "\ufeffid,text\r\n1,\"a\r\nb\"\r\n2,\"x\"\"y\"\r\n\r\n3,\r\n4,plain\r\n",
        "quoted.csv": "text,id\n\"multi\nline\",1\n,2\n\"q\",3\n",
        "quotes.tsv": "id\ttext\n1\thello \"world\"\n2\tsecond\n",
        "short_row.csv": "id,text\n1,a\n2\n3,c\n",
        "long_row.csv": "id,text\n1,a,extra\n2,b\n",
        "blank_ish.csv": "id,text\n1, spaced \n  \n2,b\n",
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data.encode())
    (tmp_path / "not_utf8.csv").write_bytes(b"id,text\n1,ok\n2,\xff\xfe\n")
    (tmp_path / "z.csv.gz").write_bytes(gzip.compress(cases["bom_crlf.csv"].encode()))

    def records(batches) -> list:
        out = []
        try:
            for where, columns in batches:
                out += [tuple(v if isinstance(v, str) else ("bad", where(i), v.why) for v in row)
                        for i, row in enumerate(zip(*columns))]
        except corpus_formats.FormatError as e:
            out.append(("error", str(e)))
        return out

    for name in [*cases, "not_utf8.csv", "z.csv.gz"]:
        delimiter = "\t" if name.endswith(".tsv") else ","
        path = str(tmp_path / name)
        both = records(corpus_formats.delimited._csv_batches(path, ("text", "id"), None, delimiter))
        alone = records(corpus_formats.delimited._csv_python_batches(path, ("text", "id"), delimiter))
        assert both == alone, name
        assert alone and (name != "short_row.csv" or ("bad", "line 3", "no field 'text'") in alone[1])


def test_concurrent_shard_jobs_each_read_their_own_documents():
    """An engine may run several shard jobs at once in one process (Beam's DirectRunner with
    direct_num_workers=2 runs them on threads): each job must read the documents it was handed, whatever
    the other threads are doing in between."""
    import threading

    from textrain.framework import shuffle

    spec = shuffle.DocumentCorpus(paths=("unused",))
    both_inside = threading.Barrier(2, timeout=30)
    seen: dict[int, list[str] | str] = {}

    def job(shard: int) -> None:
        mine = shuffle.GroupedTexts("train", shard, (f"document of shard {shard}",))
        with shuffle.reading_spills(mine):
            both_inside.wait()  # the other job has entered its block too before either reads
            try:
                seen[shard] = list(shuffle.shard_texts(spec, "train", shard, 2))
            except ValueError as e:
                seen[shard] = str(e)
            both_inside.wait()  # neither leaves before both have read

    threads = [threading.Thread(target=job, args=(s,)) for s in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {0: ["document of shard 0"], 1: ["document of shard 1"]}
