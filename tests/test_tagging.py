"""Token classification: the conlleval scorer against one written here from its definition, the CoNLL and
JSON Lines readers, word -> sub-token alignment and windows merged back, bad input through the datagen CLI,
and (slow) datagen + textrain-finetune with tagging.gin end to end, its export's raw-text tags included."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from textrain.framework import metrics
from textrain.framework.encoders import SentencePieceEncoder, WordpieceEncoder, build_wordpiece_vocab
from textrain.framework.errors import UserError
from textrain.problems import tagging

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMMA = os.path.join(REPO, "tests", "data", "austen_emma.txt")
SPIECE = os.path.join(REPO, "tests", "data", "xlnet_spiece_1200.model")


@pytest.fixture(scope="module")
def vocab(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("vocab") / "vocab.txt")
    return build_wordpiece_vocab(EMMA, vocab_size=1500, out_file=path)


# ----------------------------------------------------------------------------------------------- #
# An independent scorer: conlleval.pl's line-by-line counting, restated from its definition
# ----------------------------------------------------------------------------------------------- #
def _parts(tag: str) -> tuple[str, str]:
    if "-" in tag:
        head, rest = tag.split("-", 1)
        return head, rest
    return tag, ""


def _ends(prev_tag, tag, prev_type, typ) -> bool:
    # endOfChunk of conlleval.pl, case by case as it is written there
    return ((prev_tag == "B" and tag == "B") or (prev_tag == "B" and tag == "O") or (prev_tag == "I" and tag == "B")
            or (prev_tag == "I" and tag == "O") or (prev_tag == "E" and tag in ("E", "I", "O", "B"))
            or (prev_tag == "S" and tag in ("E", "I", "O", "B", "S")) or (prev_tag == "B" and tag == "S")
            or (prev_tag == "I" and tag == "S") or (prev_tag != "O" and prev_tag != "." and prev_type != typ))


def _starts(prev_tag, tag, prev_type, typ) -> bool:
    # startOfChunk of conlleval.pl
    return ((prev_tag == "B" and tag == "B") or (prev_tag == "I" and tag == "B") or (prev_tag == "O" and tag == "B")
            or (prev_tag == "O" and tag == "I") or (prev_tag == "E" and tag in ("E", "I", "B"))
            or (prev_tag == "S" and tag in ("E", "I", "B", "S")) or (prev_tag == "O" and tag in ("E", "S"))
            or (prev_tag in ("B", "I") and tag == "S") or (tag != "O" and tag != "." and prev_type != typ))


def conlleval(sentences: list[list[tuple[str, str]]]) -> dict[str, float]:
    """(gold, guess) per word; the script's counters: correctChunk, foundGuessed, foundCorrect, token counts."""
    correct_chunk = found_guessed = found_correct = correct_tags = tokens = 0
    for sentence in sentences:
        in_correct = False
        last_c, last_g, last_ct, last_gt = "O", "O", "", ""
        for gold, guess in sentence + [("O", "O")]:  # the blank line: a boundary, as conlleval's "O" sentinel
            c, ct = _parts(gold)
            g, gt = _parts(guess)
            end_c, end_g = _ends(last_c, c, last_ct, ct), _ends(last_g, g, last_gt, gt)
            start_c, start_g = _starts(last_c, c, last_ct, ct), _starts(last_g, g, last_gt, gt)
            if in_correct:
                if end_c and end_g and last_gt == last_ct:
                    in_correct = False
                    correct_chunk += 1
                elif end_c != end_g or gt != ct:
                    in_correct = False
            if start_c and start_g and gt == ct:
                in_correct = True
            if start_c:
                found_correct += 1
            if start_g:
                found_guessed += 1
            last_c, last_g, last_ct, last_gt = c, g, ct, gt
        for gold, guess in sentence:
            tokens += 1
            correct_tags += gold == guess
    p = correct_chunk / found_guessed if found_guessed else 0.0
    r = correct_chunk / found_correct if found_correct else 0.0
    return {"precision": p, "recall": r, "f1": 2 * p * r / (p + r) if p + r else 0.0,
            "token_accuracy": correct_tags / tokens if tokens else 0.0}


def _pairs(gold: str, guess: str) -> list[tuple[str, str]]:
    return list(zip(gold.split(), guess.split()))


@pytest.mark.parametrize("gold, guess, want", [
    # one of two right: the second has the wrong type
    ("B-PER I-PER O B-LOC", "B-PER I-PER O B-ORG", (1, 2, 2)),
    # a chunk one word short is wrong (exact span)
    ("B-PER I-PER O", "B-PER O O", (0, 1, 1)),
    # conlleval: an I- after O starts a chunk, so IOB1 "I-PER I-PER" equals BIO "B-PER I-PER"
    ("I-PER I-PER O", "B-PER I-PER O", (1, 1, 1)),
    # a B- inside splits the chunk in two
    ("I-PER I-PER", "I-PER B-PER", (0, 2, 1)),
    # I- of another type ends one chunk and starts the next
    ("B-PER I-LOC", "B-PER I-LOC", (2, 2, 2)),
    # IOBES: S- alone, B- ... E-, and an E- after O starts (and ends) a chunk
    ("S-PER B-LOC E-LOC O", "S-PER B-LOC E-LOC O", (2, 2, 2)),
    ("O E-LOC O", "O S-LOC O", (1, 1, 1)),
    # nothing predicted, nothing gold
    ("O O", "O O", (0, 0, 0)),
])
def test_reference_scorer_on_hand_computed_cases(gold, guess, want):
    correct, found, wanted = want
    p = correct / found if found else 0.0
    r = correct / wanted if wanted else 0.0
    expected = {"precision": p, "recall": r, "f1": 2 * p * r / (p + r) if p + r else 0.0}
    ref = conlleval([_pairs(gold, guess)])
    lib = metrics.entity_scores([gold.split()], [guess.split()])
    for k, v in expected.items():
        assert ref[k] == pytest.approx(v) and lib[k] == pytest.approx(v), (k, ref, lib)


def test_library_scorer_equals_the_reference_on_random_tags():
    rng = random.Random(7)
    tags = ["O", "O", "O", "B-PER", "I-PER", "B-LOC", "I-LOC", "E-PER", "S-LOC", "I-ORG"]
    for _ in range(300):
        sentences = []
        for _ in range(rng.randrange(1, 6)):
            n = rng.randrange(1, 12)
            sentences.append([(rng.choice(tags), rng.choice(tags)) for _ in range(n)])
        gold = [[g for g, _ in s] for s in sentences]
        guess = [[p for _, p in s] for s in sentences]
        ref, lib = conlleval(sentences), metrics.entity_scores(gold, guess)
        assert lib == pytest.approx(ref), sentences


def test_chunks_of_a_sentence():
    assert metrics.conll_chunks("B-PER I-PER O I-LOC I-LOC B-LOC O I-PER B-ORG".split()) == [
        (0, 1, "PER"), (3, 4, "LOC"), (5, 5, "LOC"), (7, 7, "PER"), (8, 8, "ORG")]


# ----------------------------------------------------------------------------------------------- #
# readers and the scheme check
# ----------------------------------------------------------------------------------------------- #
def _write(path, text: str) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return str(path)


def test_conll_reader_skips_docstart_and_picks_the_label_column(tmp_path):
    path = _write(tmp_path / "a.conll", "-DOCSTART- -X- O O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\n\n"
                                        "Peter NNP B-NP B-PER\nBlackburn NNP I-NP I-PER")
    sentences = list(tagging.read_conll(path))
    assert [s.words for s in sentences] == [["EU", "rejects"], ["Peter", "Blackburn"]]
    assert [s.tags for s in sentences] == [["B-ORG", "O"], ["B-PER", "I-PER"]]
    assert [s.lines for s in sentences] == [[3, 4], [7, 8]] and [s.index for s in sentences] == [0, 1]
    chunks = list(tagging.read_conll(path, label_column="2"))
    assert chunks[0].tags == ["B-NP", "B-VP"]
    with pytest.raises(UserError, match="--label_column=7"):
        list(tagging.read_conll(path, label_column="7"))


def test_jsonl_reader(tmp_path):
    path = _write(tmp_path / "a.jsonl", '{"tokens": ["Emma", "smiled"], "tags": ["B-PER", "O"]}\n\n'
                                        '{"tokens": ["Mr.", "Knightley"], "tags": ["B-PER", "I-PER"]}\n')
    sentences = list(tagging.read_sentences(path))
    assert [s.words for s in sentences] == [["Emma", "smiled"], ["Mr.", "Knightley"]]
    assert sentences[1].where(1) == f"{path}:3"
    bad = _write(tmp_path / "b.jsonl", '{"tokens": ["a", "b"], "tags": ["O"]}\n')
    with pytest.raises(UserError, match=f"{bad}:1: 2 tokens but 1 tags"):
        list(tagging.read_sentences(bad))


@pytest.mark.parametrize("tags, scheme, bad_word", [
    ("B-PER I-PER O", "bio", None), ("O I-PER", "bio", 1), ("B-PER I-LOC", "bio", 1),
    ("I-PER I-PER B-PER", "iob1", None), ("O B-PER", "iob1", 1),
    ("S-PER B-LOC I-LOC E-LOC", "iobes", None), ("B-PER O", "iobes", 1), ("B-PER", "iobes", 0),
    ("O E-PER", "iobes", 1), ("X-PER", "bio", 0), ("I-PER O", "none", None),
])
def test_scheme_check(tags, scheme, bad_word):
    found = tagging.scheme_error(tags.split(), scheme)
    assert (found[0] if found else None) == bad_word, found


# ----------------------------------------------------------------------------------------------- #
# alignment and windows
# ----------------------------------------------------------------------------------------------- #
def test_windows_score_every_word_once_and_merge_back():
    rng = random.Random(3)
    for _ in range(200):
        n = rng.randrange(1, 30)
        pieces = [[rng.randrange(5, 50) for _ in range(rng.randrange(1, 4))] for _ in range(n)]
        labels = [rng.randrange(4) for _ in range(n)]
        max_tokens, stride = rng.randrange(1, 10), None
        stride = rng.randrange(1, max_tokens + 1)
        windows = tagging.sentence_windows(pieces, labels, max_tokens, stride)
        flat = [t for p in pieces for t in p]
        assert [t for w in windows for t in w.ids][:max_tokens] == flat[:max_tokens]
        scored = sorted(w for win in windows for w in win.word_ids if w >= 0)
        assert scored == list(range(n))  # every word exactly once
        for win in windows:  # a label only on a word's first sub-token, and it is that word's
            for word, label in zip(win.word_ids, win.label_ids):
                assert word < 0 or label == labels[word]
        # the model "predicts" each position's gold label: merging gives the labels back
        width = max_tokens
        word_ids = np.array([w.word_ids + [-1] * (width - len(w.ids)) for w in windows])
        tag_ids = np.array([[max(x, 0) for x in w.label_ids] + [0] * (width - len(w.ids)) for w in windows])
        assert tagging.merge_windows([n], np.zeros(len(windows), int), word_ids, tag_ids) == [labels]


def test_records_put_the_label_on_the_first_sub_token(tmp_path, vocab):
    train = _write(tmp_path / "t.conll", "Emma B-PER\nWoodhouse I-PER\nunaccountably O\n")
    for tokenizer in ("wordpiece", "sentencepiece"):
        hp = tagging.TaggingHParams(train_file=train, vocab_file=vocab, sp_model=SPIECE, tokenizer=tokenizer,
                                    max_seq_length=12, doc_stride=4)
        problem = tagging.TaggingProblem(hp)
        problem.prepare(str(tmp_path / tokenizer), "")
        sentence = next(problem.sentences("train"))
        (record,) = problem.encode_sentence(sentence, str(tmp_path / tokenizer))
        encoder = WordpieceEncoder(vocab) if tokenizer == "wordpiece" else SentencePieceEncoder(SPIECE)
        pieces = [encoder.encode(w) for w in sentence.words]
        assert len(pieces[2]) > 1  # "unaccountably" is several pieces
        first = np.cumsum([0] + [len(p) for p in pieces[:-1]])
        offset = 1 if tokenizer == "wordpiece" else 12 - sum(map(len, pieces)) - 2  # [CLS] / left padding
        want_labels = [-1] * 12
        want_words = [-1] * 12
        for w, (pos, label) in enumerate(zip(first, [1, 2, 3])):  # labels sorted: B-PER I-PER O
            want_labels[offset + pos] = label - 1
            want_words[offset + pos] = w
        assert record["label_ids"] == want_labels and record["word_ids"] == want_words, tokenizer
        assert [record["input_ids"][offset + i] for i in range(sum(map(len, pieces)))] == [t for p in pieces for t in p]


def test_graph_windows_equal_the_records_windows(vocab):
    from textrain.framework.graph_tagging import word_windows
    from textrain.framework.graph_wordpiece import GraphWordpieceTokenizer

    encoder = WordpieceEncoder(vocab)
    tokenizer = GraphWordpieceTokenizer(vocab, max_seq_length=8)
    with open(EMMA, encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()][:40] + ["", "\u200b x"]
    windows = word_windows(tokenizer, tf.constant(lines), doc_stride=3)
    ids = windows.features["input_ids"].numpy()
    pick = windows.pick.numpy()
    row = word = 0
    for line in lines:
        words = line.split()
        if not words:  # the graph gives a sentence without words one empty window
            assert [t for t in ids[row] if t != 0] == [encoder.special_ids["[CLS]"], encoder.special_ids["[SEP]"]]
            row += 1
            continue
        python = tagging.sentence_windows(tagging.word_pieces(encoder, words, encoder.special_ids["[UNK]"]),
                                          None, 6, 3)
        for w in python:
            got = [t for t in ids[row] if t != 0]
            assert got == [encoder.special_ids["[CLS]"], *w.ids, encoder.special_ids["[SEP]"]], line
            row += 1
        scored = {wid: (row - len(python) + k, col + 1) for k, w in enumerate(python)
                  for col, wid in enumerate(w.word_ids) if wid >= 0}
        for i in range(len(words)):
            assert tuple(pick[word + i]) == scored[i], (line, i)
        word += len(words)
    assert row == len(ids) and word == len(pick)


# ----------------------------------------------------------------------------------------------- #
# bad input through the CLI
# ----------------------------------------------------------------------------------------------- #
def _datagen(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TEXTRAIN_VERBOSE", None)
    return subprocess.run([sys.executable, "-m", "textrain.framework.datagen", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


GOOD = "Emma B-PER\nWoodhouse I-PER\nsmiled O\n\nHarriet B-PER\nwept O\n"


@pytest.mark.parametrize("name, train, dev, message", [
    ("ragged.conll", GOOD + "\nMr. B-PER x\n", None, "{train}:8: 3 columns where the file's first row has 2"),
    ("unknown.conll", GOOD, "Emma B-PER\nHighbury B-LOC\n", "{dev}:2: label 'B-LOC' is not one of the 3 labels"),
    ("empty.jsonl", '{"tokens": ["a"], "tags": ["O"]}\n{"tokens": [], "tags": []}\n', None,
     "{train}:2: empty sentence"),
    ("scheme.conll", GOOD, "Emma I-PER\n", "{dev}:1: 'I-PER' follows the sentence start (bio:"),
])
def test_bad_input_is_one_line_naming_file_line_and_leaves_nothing(tmp_path, vocab, name, train, dev, message):
    train_path = _write(tmp_path / name, train)
    args = ["--problem=tagging", f"--train_file={train_path}", f"--vocab_file={vocab}", f"--data_dir={tmp_path / 'data'}"]
    dev_path = ""
    if dev is not None:
        dev_path = _write(tmp_path / "dev.conll", dev)
        args.append(f"--dev_file={dev_path}")
    r = _datagen(*args)
    assert r.returncode == 1
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("textrain-datagen: error: ") and "Traceback" not in r.stderr
    assert message.format(train=train_path, dev=dev_path) in lines[-1]
    left = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path / "data") for f in fs]
    assert left == []


# ----------------------------------------------------------------------------------------------- #
# end to end: datagen CLI, textrain-finetune with tagging.gin, predictions, export
# ----------------------------------------------------------------------------------------------- #
NAMES = ["Emma", "Harriet", "Knightley", "Elton", "Weston", "Jane"]
PLACES = ["Highbury", "Hartfield", "Randalls", "London", "Donwell"]
FILLER = ["walked", "to", "the", "garden", "with", "and", "met", "quietly", "near", "yesterday", "a", "friend"]


def _sentences(rng: random.Random, n: int, long_every: int) -> list[tuple[list[str], list[str]]]:
    out = []
    for i in range(n):
        words, tags = [], []
        for _ in range(rng.randrange(3, 7) + (14 if long_every and i % long_every == 0 else 0)):
            kind = rng.random()
            if kind < 0.2:
                words.append(rng.choice(NAMES)); tags.append("B-PER")  # noqa: E702
                if rng.random() < 0.3:
                    words.append("Smith"); tags.append("I-PER")  # noqa: E702
            elif kind < 0.3:
                words.append(rng.choice(PLACES)); tags.append("B-LOC")  # noqa: E702
            else:
                words.append(rng.choice(FILLER)); tags.append("O")  # noqa: E702
        out.append((words, tags))
    return out


def _conll(sentences) -> str:
    return "\n".join("".join(f"{w} {t}\n" for w, t in zip(words, tags)) for words, tags in sentences)


def _cli(module: str, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
def test_datagen_finetune_predict_and_export_end_to_end(tmp_path, vocab):
    rng = random.Random(11)
    train = _write(tmp_path / "train.conll", _conll(_sentences(rng, 60, 0)))
    dev_sentences = _sentences(rng, 12, 3)  # every 3rd sentence needs several windows of 8
    dev = _write(tmp_path / "dev.jsonl", "".join(json.dumps({"tokens": w, "tags": t}) + "\n" for w, t in dev_sentences))
    data, run = str(tmp_path / "data"), str(tmp_path / "run")
    r = _cli("textrain.framework.datagen", "--problem=tagging", f"--train_file={train}", f"--dev_file={dev}",
             f"--vocab_file={vocab}", "--max_seq_length=8", "--doc_stride=3", f"--data_dir={data}")
    assert r.returncode == 0, r.stderr[-3000:]
    r = _cli("textrain.trainers.finetune", "--gin_file=tagging.gin",
             "--gin_param=finetune.model='bert_tagger'", f"--gin_param=finetune.data_dir='{data}'",
             f"--gin_param=finetune.model_dir='{run}'", f"--gin_param=finetune.vocab_file='{vocab}'",
             "--gin_param=finetune.max_seq_length=8", "--gin_param=finetune.datagen=False",
             "--gin_param=finetune.model_size='tiny'", "--gin_param=finetune.num_train_steps=60",
             "--gin_param=finetune.train_batch_size=16", "--gin_param=finetune.learning_rate=1e-3",
             "--gin_param=finetune.export=True")
    assert r.returncode == 0, r.stderr[-3000:]
    results = json.load(open(os.path.join(run, "eval_results.json")))["dev"][-1]
    assert {"precision", "recall", "f1", "token_accuracy"} <= set(results) and 0 <= results["f1"] <= 1
    assert results["num_examples"] > len(dev_sentences)  # windows
    # predict_dev.conll: every input word once, in order, with its gold tag; scores as eval_results says
    blocks = open(os.path.join(run, "predict_dev.conll"), encoding="utf-8").read().split("\n\n")
    rows = [[line.split() for line in block.splitlines()] for block in blocks if block.strip()]
    assert [[r[0] for r in rs] for rs in rows] == [w for w, _ in dev_sentences]
    assert [[r[1] for r in rs] for rs in rows] == [t for _, t in dev_sentences]
    predicted = [[r[2] for r in rs] for rs in rows]
    assert metrics.entity_scores([t for _, t in dev_sentences], predicted)["f1"] == pytest.approx(results["f1"])
    # the export's raw-text tags equal the trainer's predictions (one eval: best/ is the last step)
    served = tf.saved_model.load(os.path.join(run, "export")).signatures["serve_text"](
        text=tf.constant([" ".join(w) for w, _ in dev_sentences]))
    tags = served["tags"].numpy()
    for i, (words, _) in enumerate(dev_sentences):
        assert int(served["num_words"][i]) == len(words)
        assert [t.decode() for t in tags[i, :len(words)]] == predicted[i]


@pytest.mark.slow
@pytest.mark.parametrize("family", ["electra", "xlnet"])
def test_electra_and_xlnet_taggers_through_finetune(tmp_path, vocab, family):
    """The records are made by the run itself (XLNet: SentencePiece, left-padded layout); windows of 8."""
    rng = random.Random(5)
    train = _write(tmp_path / "train.conll", _conll(_sentences(rng, 40, 0)))
    dev_sentences = _sentences(rng, 6, 2)
    dev = _write(tmp_path / "dev.conll", _conll(dev_sentences))
    if family == "electra":
        extra = ["--gin_param=finetune.model='electra_tagger'", f"--gin_param=finetune.vocab_file='{vocab}'",
                 "--gin_param=finetune.model_overrides={'hidden_size': 32, 'num_hidden_layers': 2, "
                 "'num_attention_heads': 2, 'intermediate_size': 64, 'embedding_size': 16}"]
    else:
        extra = ["--gin_param=finetune.model='xlnet_tagger'", f"--gin_param=finetune.sp_model='{SPIECE}'",
                 "--gin_param=finetune.model_overrides={'n_layer': 2, 'd_model': 32, 'n_head': 2, 'd_head': 16, "
                 "'d_inner': 64}"]
    run = str(tmp_path / "run")
    r = _cli("textrain.trainers.finetune", "--gin_file=tagging.gin", *extra,
             f"--gin_param=finetune.problem_hparams={{'train_file': '{train}', 'dev_file': '{dev}', 'doc_stride': 3}}",
             f"--gin_param=finetune.data_dir='{tmp_path / 'data'}'", f"--gin_param=finetune.model_dir='{run}'",
             "--gin_param=finetune.max_seq_length=8", "--gin_param=finetune.num_train_steps=4",
             "--gin_param=finetune.train_batch_size=8", "--gin_param=finetune.learning_rate=1e-3",
             f"--gin_param=finetune.export={family == 'electra'}")
    assert r.returncode == 0, r.stderr[-3000:]
    results = json.load(open(os.path.join(run, "eval_results.json")))["dev"][-1]
    assert 0 <= results["f1"] <= 1 and 0 <= results["token_accuracy"] <= 1
    rows = [b.splitlines() for b in open(os.path.join(run, "predict_dev.conll"), encoding="utf-8").read().split("\n\n")
            if b.strip()]
    assert [[line.split()[0] for line in b] for b in rows] == [w for w, _ in dev_sentences]
    if family == "electra":  # ELECTRA serves raw text as BERT does: the same tags as predict_dev.conll
        served = tf.saved_model.load(os.path.join(run, "export")).signatures["serve_text"](
            text=tf.constant([" ".join(w) for w, _ in dev_sentences]))
        for i, block in enumerate(rows):
            assert [t.decode() for t in served["tags"].numpy()[i, :len(block)]] == [line.split()[2] for line in block]
