"""`tagging`: token classification (NER, POS, chunking, slot filling) from CoNLL or JSON Lines files.

    textrain-datagen --problem=tagging --train_file=train.conll --dev_file=dev.conll \
        --vocab_file=vocab.txt --data_dir=data          # then textrain-finetune --gin_file=tagging.gin

Input, by the file's name: `*.jsonl` / `*.json` (optionally .gz/.bz2/.zst) is JSON Lines, one sentence a line
`{"tokens": [...], "tags": [...]}`; anything else is CoNLL: a word per line, whitespace-separated columns
(the word first, the label in `--label_column`, default the last), a blank line between sentences,
`-DOCSTART-` lines skipped. The label list is the sorted labels of the train file, saved to
`{problem_dir}/labels.json` and the manifests as for classification; `--scheme` checks the tag sequences
(bio: I-X only after B-X or I-X; iob1: CoNLL-2003's original files, B-X only right after a X chunk;
iobes; none). A ragged row, a dev/test label the train file lacks, an empty sentence or a bad tag
sequence stops datagen before any record is written, with one error naming file:line.

Records (one per window): the sentence's words are tokenised one by one with the PRETRAINED model's
tokenizer (WordPiece: BERT, ELECTRA; SentencePiece: XLNet), a word that gives no sub-token gets the
unknown token, so every word has a first sub-token. The sub-tokens are cut into windows of
max_seq_length - 2 tokens, each starting `--doc_stride` tokens after the previous one (SQuAD's windows:
problems/squad.py), laid out as the classifiers' single text (problems/layouts.py). `label_ids` [L]: the
word's label id on its FIRST sub-token, `IGNORE_LABEL` (-1) elsewhere (no loss there). `word_ids` [L]: the
word's index on its first sub-token in the ONE window where that token has the most context (min of
left and right context, SQuAD's rule), -1 elsewhere: evaluation reads each word's prediction exactly
once from there. `sentence_index`, `example_index` = 1000 * sentence + window (input order),
`is_real_example`.

Decisions:
- The whole input is read and checked in `prepare`, so a bad file leaves nothing behind (no shard, no
  labels.json); the shard jobs then read it again (sentence i goes to train shard i % 8; dev and test
  are one unshuffled shard).
- dev/test splits write a sidecar `{name}-{split}.sentences.jsonl` (words and gold tags per sentence,
  atomically, before the manifest): metrics and `predict_<split>.conll` come from it and the gathered
  `tag_ids` / `word_ids`, so they need only the data_dir.
- Entity precision/recall/F1 are conlleval's (framework/metrics.entity_scores); the best checkpoint is
  kept by `f1`, by `token_accuracy` with `--scheme=none` (POS tags have no chunks).
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import ClassVar, Iterator, NamedTuple, Sequence

import numpy as np

from textrain.framework import corpus, corpus_formats, encoders, fileio
from textrain.framework import metrics as metric_fns
from textrain.framework.errors import UserError
from textrain.framework.lazy_tf import tf
from textrain.framework.problem import DatasetSplit
from textrain.framework.registry import register_problem
from textrain.framework.settings import help_text
from textrain.framework.tasks import FinetuneTask, tokenizer_file
from textrain.problems.classification import SavedLabelList, TokenizerHParams
from textrain.problems.layouts import bert_layout, xlnet_layout
from textrain.problems.squad import doc_windows, is_max_context

IGNORE_LABEL = -1  # models/tagging_heads.py: no loss, no metric at such a position
MAX_WINDOWS = 1000  # example_index = MAX_WINDOWS * sentence + window
SCHEMES = ("bio", "iob1", "iobes", "none")
JSONL_SUFFIXES = (".jsonl", ".json")


def setting(default, text: str, **kw):
    return dataclasses.field(default=default, metadata=help_text(text, **kw))


@dataclasses.dataclass
class TaggingHParams(TokenizerHParams):
    train_file: str = setting("", "tagging: train file, CoNLL columns or JSON Lines {tokens, tags} (by its name).")
    dev_file: str = setting("", "tsv_classification: dev TSV (optional); tagging: dev file (evaluated; "
                                  "predict_dev.conll).")
    test_file: str = setting("", "tsv_classification: test TSV (optional; the label column may be "
                                   "absent); tagging: test file (optional, labelled; predicted).")
    label_column: str = setting("", "tsv_classification: label column (name, or 0-based index); tagging: "
                                      "the CoNLL label column's 0-based index (empty: the last).")
    scheme: str = setting("bio", "tagging: tag scheme checked on every file: bio | iob1 (CoNLL-2003's original "
                                 "files) | iobes | none.", choices=SCHEMES)
    doc_stride: int = setting(64, "tagging: sub-tokens between the starts of two windows over a long sentence.",
                              low=1)


class Sentence(NamedTuple):
    """One sentence of an input file: its words, their tags (None: no label column) and where each word is."""

    words: list[str]
    tags: list[str] | None
    path: str
    lines: list[int]  # the line of each word (JSON Lines: the sentence's line for every word)
    index: int        # 0-based position among the file's sentences

    def where(self, word: int = 0) -> str:
        return f"{self.path}:{self.lines[word] if self.lines else 0}"


# ================================================================================================ #
# Reading
# ================================================================================================ #
def is_jsonl(path: str) -> bool:
    """Whether `path` names a JSON Lines file (.jsonl / .json, a compression suffix allowed)."""
    name = path[:path.rindex(".")] if corpus.is_compressed(path) else path
    return name.endswith(JSONL_SUFFIXES)


def label_index(spec: str, path: str) -> int:
    """The label column of `--label_column` (empty: the last)."""
    if not spec:
        return -1
    try:
        return int(spec)
    except ValueError:
        raise UserError(f"--label_column={spec!r}: a CoNLL file's columns are 0-based indexes ({path})") from None


def read_conll(path: str, label_column: str = "", on_bad_utf8: str = "error") -> Iterator[Sentence]:
    """The sentences of a CoNLL file (see the module docstring); a row whose column count differs from the
    file's first row, or a row without a label column, is a UserError naming file:line."""
    column = label_index(label_column, path)
    width: int | None = None
    words: list[str] = []
    tags: list[str] = []
    lines: list[int] = []
    count = 0
    for lineno, line in corpus.iter_lines(path, on_bad_utf8):
        columns = line.split()
        if columns and columns[0] == "-DOCSTART-":
            columns = []
        if not columns:
            if words:
                yield Sentence(words, tags, path, lines, count)
                count += 1
                words, tags, lines = [], [], []
            continue
        if width is None:
            width = len(columns)
            if width < 2:
                raise UserError(f"{path}:{lineno}: one column; a CoNLL row is a word and its label(s)")
            if not -width <= column < width:
                raise UserError(f"--label_column={label_column}: {path}:{lineno} has {width} columns")
        if len(columns) != width:
            raise UserError(f"{path}:{lineno}: {len(columns)} columns where the file's first row has {width}")
        words.append(columns[0])
        tags.append(columns[column])
        lines.append(lineno)
    if words:
        yield Sentence(words, tags, path, lines, count)


def read_jsonl(path: str, on_bad_utf8: str = "error") -> Iterator[Sentence]:
    """The sentences of a JSON Lines file, one `{"tokens": [...], "tags": [...]}` a line; a line that is not
    such an object, an empty sentence or tags of another length are a UserError naming file:line."""
    count = 0
    for lineno, line in corpus.iter_lines(path, on_bad_utf8):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"{where}: not JSON ({e.msg})") from None
        if not isinstance(record, dict) or not isinstance(record.get("tokens"), list):
            raise UserError(f"{where}: a line is an object with a list \"tokens\" (and \"tags\")")
        words, tags = record["tokens"], record.get("tags")
        if not words:
            raise UserError(f"{where}: empty sentence (no tokens)")
        if not all(isinstance(w, str) and w.strip() for w in words):
            raise UserError(f"{where}: every token is a non-empty string")
        if not isinstance(tags, list) or not all(isinstance(t, str) and t for t in tags):
            raise UserError(f"{where}: \"tags\" must be a list of non-empty strings")
        if len(tags) != len(words):
            raise UserError(f"{where}: {len(words)} tokens but {len(tags)} tags")
        yield Sentence(list(words), list(tags), path, [lineno] * len(words), count)
        count += 1


def read_sentences(path: str, label_column: str = "", on_bad_utf8: str = "error") -> Iterator[Sentence]:
    if not fileio.exists(path):
        raise UserError(f"{path} does not exist")
    if is_jsonl(path):
        return read_jsonl(path, on_bad_utf8)
    return read_conll(path, label_column, on_bad_utf8)


def scheme_error(tags: Sequence[str], scheme: str) -> tuple[int, str] | None:
    """(word, why) of the first tag that breaks `scheme` in one sentence, or None."""
    if scheme == "none":
        return None
    prefixes = {"bio": ("B", "I"), "iob1": ("B", "I"), "iobes": ("B", "I", "E", "S")}[scheme]
    prev, prev_type = "O", ""
    for i, tag in enumerate(tags):
        after = repr(tags[i - 1]) if i else "the sentence start"
        prefix, _, kind = tag.partition("-")
        if tag == "O":
            prefix, kind = "O", ""
        elif prefix not in prefixes or not kind:
            return i, f"tag {tag!r} is neither O nor {'/'.join(prefixes)}-TYPE"
        inside = prev in ("B", "I") and prev_type == kind  # the word continues an open chunk of its type
        if scheme == "bio" and prefix == "I" and not inside:
            return i, f"{tag!r} follows {after} (bio: I-X continues B-X or I-X)"
        if scheme == "iob1" and prefix == "B" and not (prev in ("B", "I") and prev_type == kind):
            return i, f"{tag!r} follows {after} (iob1: B-X only right after a X chunk)"
        if scheme == "iobes":
            if prefix in ("I", "E") and not inside:
                return i, f"{tag!r} follows {after} (iobes: I-/E-X continue B-X or I-X)"
            if prev in ("B", "I") and prefix not in ("I", "E"):
                return i, f"{tag!r} follows {tags[i - 1]!r} (iobes: B-X / I-X go on with I-X or E-X)"
        prev, prev_type = prefix, kind
    if scheme == "iobes" and prev in ("B", "I"):
        return len(tags) - 1, f"the sentence ends inside a chunk ({tags[-1]!r}; iobes ends one with E- or S-)"
    return None


# ================================================================================================ #
# Alignment and windows
# ================================================================================================ #
def word_pieces(encoder, words: Sequence[str], unk_id: int) -> list[list[int]]:
    """Each word's sub-token ids, tokenised alone; a word with none gets [unk_id]."""
    return [list(encoder.encode(w)) or [unk_id] for w in words]


class Window(NamedTuple):
    ids: list[int]        # the window's sub-token ids
    label_ids: list[int]  # label id on a word's first sub-token, IGNORE_LABEL elsewhere
    word_ids: list[int]   # the word index where this window scores the word, -1 elsewhere


def sentence_windows(pieces: Sequence[Sequence[int]], label_ids: Sequence[int] | None, max_tokens: int,
                     stride: int) -> list[Window]:
    """The windows of one sentence's sub-tokens (see the module docstring): every word is scored by
    exactly one window, the one where its first sub-token has the most context."""
    flat = [t for p in pieces for t in p]
    first: dict[int, int] = {}  # token position -> word
    position = 0
    for w, p in enumerate(pieces):
        first[position] = w
        position += len(p)
    spans = doc_windows(len(flat), max_tokens, stride)
    out = []
    for k, (start, length) in enumerate(spans):
        labels, scored = [], []
        for t in range(start, start + length):
            word = first.get(t)
            labels.append(IGNORE_LABEL if word is None or label_ids is None else label_ids[word])
            scored.append(word if word is not None and is_max_context(spans, k, t) else -1)
        out.append(Window(flat[start:start + length], labels, scored))
    return out


def merge_windows(num_words: Sequence[int], sentence_index: np.ndarray, word_ids: np.ndarray,
                  tag_ids: np.ndarray) -> list[list[int]]:
    """Each sentence's predicted tag id per word from its windows' rows (`word_ids` / `tag_ids` [N, L]);
    a word scored by no row, or by two, is a ValueError (the records and the outputs disagree)."""
    merged = [[-1] * n for n in num_words]
    for s, words, tags in zip(np.reshape(sentence_index, [-1]), word_ids, tag_ids):
        row = merged[int(s)]
        for w, t in zip(words, tags):
            if w < 0:
                continue
            if row[w] != -1:
                raise ValueError(f"sentence {int(s)} word {int(w)} is scored by two windows")
            row[int(w)] = int(t)
    for s, row in enumerate(merged):
        if -1 in row:
            raise ValueError(f"sentence {s} word {row.index(-1)} has no prediction: are all its windows there?")
    return merged


# ================================================================================================ #
# The problem
# ================================================================================================ #
@register_problem(name="tagging")
class TaggingProblem(SavedLabelList, FinetuneTask):
    """CoNLL / JSON Lines tagged sentences -> windowed token-classification records (module docstring)."""

    HParams: ClassVar[type] = TaggingHParams
    task_type = "tagging"
    train_shards: ClassVar[int] = 8
    DATA_SETTINGS: ClassVar[tuple[str, ...]] = ("tokenizer", "max_seq_length", "do_lower_case", "uncased",
                                                "scheme", "doc_stride")
    _FLAGS = {DatasetSplit.TRAIN: "train_file", DatasetSplit.EVAL: "dev_file", DatasetSplit.TEST: "test_file"}

    def __init__(self, hparams=None):
        super().__init__(hparams)
        self._labels: list[str] | None = None
        self._bound: str | None = None

    @property
    def main_metric(self) -> str:  # type: ignore[override]
        return "token_accuracy" if self.hparams.scheme == "none" else "f1"

    # ------------------------------------------------------------------ splits and files
    def split_path(self, split: str) -> str:
        return getattr(self.hparams, self._FLAGS[split])

    def dataset_splits(self) -> list[tuple[str, int]]:
        return [(s, self.train_shards if s == DatasetSplit.TRAIN else 1)
                for s in (DatasetSplit.TRAIN, DatasetSplit.EVAL, DatasetSplit.TEST) if self.split_path(s)]

    def shuffle_split(self, split: str) -> bool:
        return split == DatasetSplit.TRAIN

    def eval_splits(self) -> list[str]:
        return [DatasetSplit.EVAL]

    def predict_splits(self) -> list[str]:
        return [DatasetSplit.EVAL, DatasetSplit.TEST]

    def sentences(self, split: str) -> Iterator[Sentence]:
        hp = self.hparams
        return read_sentences(self.split_path(split), hp.label_column, hp.on_bad_utf8)

    # ------------------------------------------------------------------ generation side
    def check_hparams(self) -> None:
        hp = self.hparams
        tokenizer_file(hp)
        if not hp.train_file:
            raise UserError("--train_file is required (the label list is the train file's)")
        if hp.max_seq_length < 3:
            raise UserError(f"--max_seq_length={hp.max_seq_length}: must be at least 3 (special tokens)")
        if hp.doc_stride > hp.max_seq_length - 2:
            raise UserError(f"--doc_stride={hp.doc_stride}: at most max_seq_length - 2 = {hp.max_seq_length - 2} "
                            f"(windows must overlap or touch)")

    def prepare(self, data_dir: str, tmp_dir: str) -> None:
        """Read and check every file, decide the label list (sorted labels of the train file), write it."""
        self.check_hparams()
        self.encoder()
        labels: set[str] = set()
        for split, _ in self.dataset_splits():
            for sentence in self.sentences(split):
                self.check_sentence(sentence, labels if split != DatasetSplit.TRAIN else None)
                if split == DatasetSplit.TRAIN:
                    labels.update(sentence.tags)
            if split == DatasetSplit.TRAIN and not labels:
                raise UserError(f"--train_file={self.hparams.train_file}: no sentences")
        ordered = sorted(labels)
        fileio.makedirs(self.problem_dir(data_dir))
        fileio.write_json_atomic(self.labels_path(data_dir), {"labels": ordered, "task_type": self.task_type})
        self._labels = ordered

    def check_sentence(self, sentence: Sentence, known: set[str] | None) -> None:
        """The scheme check and, for dev/test (`known`: the train labels), the unknown-label check."""
        bad = scheme_error(sentence.tags, self.hparams.scheme)
        if bad is not None:
            raise UserError(f"{sentence.where(bad[0])}: {bad[1]}; fix the file or pick --scheme "
                            f"(bio | iob1 | iobes | none)")
        if known is not None:
            for i, tag in enumerate(sentence.tags):
                if tag not in known:
                    shown = ", ".join(sorted(known)[:20])
                    raise UserError(f"{sentence.where(i)}: label {tag!r} is not one of the {len(known)} labels of "
                                    f"the train file ({shown})")

    def feature_encoders(self, data_dir: str) -> dict:
        return {"inputs": self.encoder()}

    def manifest_settings(self, data_dir: str) -> dict:
        encoder = self.encoder()
        labels = self.labels(data_dir)
        settings = corpus_formats.without_default_settings(dataclasses.asdict(self.hparams))
        return dict(settings, task_type=self.task_type, label_list=labels, num_labels=len(labels),
                    tokenizer=self.hparams.tokenizer, max_seq_length=self.hparams.max_seq_length,
                    scheme=self.hparams.scheme, doc_stride=self.hparams.doc_stride,
                    vocab_size=int(encoder.vocab_size), vocab_fingerprint=encoder.fingerprint(),
                    layout="xlnet" if self.hparams.tokenizer == "sentencepiece" else "bert")

    def unk_id(self) -> int:
        encoder = self.encoder()
        if isinstance(encoder, encoders.SentencePieceEncoder):
            return encoders.XLNET_SPECIAL_IDS["<unk>"]
        return encoder.special_ids["[UNK]"]

    def encode_sentence(self, sentence: Sentence, data_dir: str) -> list[dict]:
        """The records of one sentence's windows."""
        hp = self.hparams
        index = {name: i for i, name in enumerate(self.labels(data_dir))}
        label_ids = [index[t] for t in sentence.tags] if sentence.tags is not None else None
        pieces = word_pieces(self.encoder(), sentence.words, self.unk_id())
        windows = sentence_windows(pieces, label_ids, hp.max_seq_length - 2, hp.doc_stride)
        if len(windows) > MAX_WINDOWS:
            raise UserError(f"{sentence.where()}: a sentence of {len(windows)} windows (at most {MAX_WINDOWS}); "
                            f"raise --doc_stride or --max_seq_length")
        return [dict(self.layout(w), sentence_index=sentence.index, is_real_example=1,
                     example_index=MAX_WINDOWS * sentence.index + k) for k, w in enumerate(windows)]

    def layout(self, window: Window) -> dict:
        """input_ids, input_mask, segment_ids, label_ids, word_ids of one window in the family's layout."""
        length = self.hparams.max_seq_length
        n = len(window.ids)
        if self.hparams.tokenizer == "wordpiece":
            special = self.encoder().special_ids
            features = bert_layout(window.ids, None, length, special["[CLS]"], special["[SEP]"])
            before, after = 1, length - n - 1  # [CLS] window [SEP] padding
        else:
            features = xlnet_layout(window.ids, None, length)
            before, after = length - n - 2, 2  # padding window <sep> <cls>
        pad = [IGNORE_LABEL]
        features["label_ids"] = pad * before + window.label_ids + pad * after
        features["word_ids"] = pad * before + window.word_ids + pad * after
        return features

    def generate_shard(self, data_dir, tmp_dir, split, shard_id, num_shards, seed) -> Iterator[dict]:
        """Sentence i's windows go to shard i % num_shards (dev/test: one shard, in input order)."""
        for sentence in self.sentences(split):
            if sentence.index % num_shards == shard_id:
                yield from self.encode_sentence(sentence, data_dir)

    def sidecar_filename(self, split: str) -> str:
        return f"{self.name}-{split}.sentences.jsonl"

    def after_split(self, data_dir: str, split: str, manifest: dict) -> None:
        """dev/test: the words and gold tags of every sentence (metrics and predictions read them)."""
        manifest["has_labels"] = True
        if split == DatasetSplit.TRAIN:
            return
        path = os.path.join(self.problem_dir(data_dir), self.sidecar_filename(split))
        lines = [json.dumps({"words": s.words, "tags": s.tags}, ensure_ascii=False) for s in self.sentences(split)]
        fileio.write_text_atomic(path, "".join(line + "\n" for line in lines))
        manifest["sidecar"] = {"file": os.path.basename(path), "num_sentences": len(lines)}

    # ------------------------------------------------------------------ reading side
    def bind_data(self, data_dir: str) -> None:
        """Adopt the settings the records were made with (the train manifest's), so a trainer that builds
        the problem with other settings still parses the records as written."""
        if self._bound == data_dir:
            return
        settings = self.read_manifest(data_dir, DatasetSplit.TRAIN)["settings"]
        adopt = {k: settings[k] for k in self.DATA_SETTINGS if k in settings}
        adopt.update({k: settings[k] for k in ("vocab_file", "sp_model")
                      if settings.get(k) and not getattr(self.hparams, k)})
        self.hparams = dataclasses.replace(self.hparams, **adopt)
        self._labels = list(settings["label_list"])
        self._bound = data_dir

    def label_list(self, data_dir: str) -> list[str]:
        self.bind_data(data_dir)
        return list(self._labels)

    def num_labels(self, data_dir: str) -> int:
        return len(self.label_list(data_dir))

    def example_reading_spec(self) -> dict:
        length = self.hparams.max_seq_length
        f = tf.io.FixedLenFeature
        mask_dtype = tf.float32 if self.hparams.tokenizer == "sentencepiece" else tf.int64
        return {"input_ids": f([length], tf.int64), "input_mask": f([length], mask_dtype),
                "segment_ids": f([length], tf.int64), "label_ids": f([length], tf.int64),
                "word_ids": f([length], tf.int64), "sentence_index": f([], tf.int64),
                "example_index": f([], tf.int64), "is_real_example": f([], tf.int64)}

    def dataset(self, mode, data_dir, params, input_context=None, split=None) -> tf.data.Dataset:
        self.bind_data(data_dir)
        params = dataclasses.replace(params, max_length=0, batching="fixed")
        return super().dataset(mode, data_dir, params, input_context=input_context, split=split)

    # ------------------------------------------------------------------ evaluation and predictions
    def read_sidecar(self, data_dir: str, split: str) -> list[dict]:
        info = self.read_manifest(data_dir, split).get("sidecar")
        if not info:
            raise FileNotFoundError(f"the {split} manifest of {self.name} in {data_dir} names no sidecar; re-run datagen")
        path = os.path.join(self.problem_dir(data_dir), info["file"])
        with fileio.open_file(path) as f:
            entries = [json.loads(line) for line in f if line.strip()]
        if len(entries) != info["num_sentences"]:
            raise ValueError(f"{path}: {len(entries)} sentences, the manifest says {info['num_sentences']}")
        return entries

    def predicted_tags(self, data_dir: str, split: str, outputs: dict[str, np.ndarray]
                       ) -> tuple[list[dict], list[list[str]]]:
        """(the split's sentences, each word's predicted tag) from the gathered outputs of its windows."""
        sentences = self.read_sidecar(data_dir, split)
        labels = self.label_list(data_dir)
        merged = merge_windows([len(s["words"]) for s in sentences], outputs["sentence_index"],
                               outputs["word_ids"], outputs["tag_ids"])
        return sentences, [[labels[t] for t in row] for row in merged]

    def metrics(self, data_dir: str, split: str, outputs: dict[str, np.ndarray]) -> dict[str, float]:
        """Entity precision / recall / f1 (conlleval) and token_accuracy over the split's words."""
        sentences, predicted = self.predicted_tags(data_dir, split, outputs)
        return metric_fns.entity_scores([s["tags"] for s in sentences], predicted)

    def write_predictions(self, data_dir: str, split: str, outputs: dict[str, np.ndarray], base_path: str) -> str:
        """`{base_path}.conll`: word, gold tag, predicted tag per line, a blank line between sentences
        (conlleval's input), every input word once, in input order."""
        sentences, predicted = self.predicted_tags(data_dir, split, outputs)
        blocks = ["".join(f"{w} {g} {p}\n" for w, g, p in zip(s["words"], s["tags"], tags))
                  for s, tags in zip(sentences, predicted)]
        path = base_path + ".conll"
        fileio.write_text_atomic(path, "\n".join(blocks))
        return path

    def serving_labels(self, data_dir: str) -> list[str]:
        return self.label_list(data_dir)

    def serving_doc_stride(self, data_dir: str) -> int:
        self.bind_data(data_dir)
        return int(self.hparams.doc_stride)
