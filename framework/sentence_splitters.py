"""Sentence splitters for corpora whose records hold documents (JSON Lines, Parquet, Wikipedia...).

`load(name)` gives `split(line) -> sentences` (stripped, non-empty; at least one for a non-blank line).
Every splitter is followed by one pass that cuts after Chinese/Japanese end punctuation (。！？ and
their full-width kin, with closing quotes/brackets kept on the sentence), which not all of them do.

Decisions (benchmarks/bench_splitters.py, table in benchmarks/README.md): the default is the one with
the best boundary F1 on the bundled corpora re-joined into paragraphs at a throughput datagen does not
notice; the others stay selectable with --sentence_splitter. Each library is imported only when used.
"""
from __future__ import annotations

import re
from typing import Callable

NAMES = ("none", "blingfire", "pysbd", "sentencex")
DEFAULT = "blingfire"

# A run of CJK end punctuation and the closing quotes/brackets after it, not at the line's end.
_CJK_END = re.compile(r"(?<=[。！？．｡])([」』”’）)\]】》〉]*)(?=[^\s」』”’）)\]】》〉。！？!?．｡])")
_HAS_CJK_END = re.compile(r"[。！？．｡]")


def _cjk_pass(sentences: list[str]) -> list[str]:
    out: list[str] = []
    for s in sentences:
        if _HAS_CJK_END.search(s):
            out.extend(p.strip() for p in _CJK_END.sub(lambda m: m.group(1) + "\n", s).split("\n"))
        else:
            out.append(s)
    return [s for s in out if s]


_CLOSERS = "」』”’）)]】》〉"


def _reattach_closers(sentences: list[str]) -> list[str]:
    """Closing quotes/brackets a splitter left at the start of the next sentence go back to their own."""
    out: list[str] = []
    for s in sentences:
        lead = len(s) - len(s.lstrip(_CLOSERS))
        if lead and out:
            out[-1] += s[:lead]
            s = s[lead:].strip()
        if s:
            out.append(s)
    return out


def _finish(line: str, sentences: list[str]) -> list[str]:
    sentences = _cjk_pass(_reattach_closers([s.strip() for s in sentences if s.strip()]))
    return sentences or [line.strip()]


def _blingfire() -> Callable[[str], list[str]]:
    import blingfire

    def split(line: str) -> list[str]:
        return _finish(line, blingfire.text_to_sentences(line).split("\n"))

    return split


def _pysbd() -> Callable[[str], list[str]]:
    import pysbd
    segmenter = pysbd.Segmenter(language="en", clean=False)

    def split(line: str) -> list[str]:
        return _finish(line, segmenter.segment(line))

    return split


def _sentencex() -> Callable[[str], list[str]]:
    import sentencex

    def split(line: str) -> list[str]:
        return _finish(line, list(sentencex.segment("en", line)))

    return split


_LOADERS: dict[str, Callable[[], Callable[[str], list[str]]]] = {
    "blingfire": _blingfire, "pysbd": _pysbd, "sentencex": _sentencex}


def load(name: str) -> Callable[[str], list[str]]:
    """The splitter `name` ("none": the line is one sentence); a missing library is a one-line error."""
    from textrain.framework.errors import UserError
    if name == "none":
        return lambda line: [line.strip()] if line.strip() else []
    if name not in _LOADERS:
        raise UserError(f"--sentence_splitter={name!r}: use one of {', '.join(NAMES)}")
    try:
        return _LOADERS[name]()
    except ImportError:
        raise UserError(f"--sentence_splitter={name} needs the Python package {name}: pip install "
                        f"'textrain[corpora]' (or --sentence_splitter=none)") from None
