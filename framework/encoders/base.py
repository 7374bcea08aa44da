"""What every text encoder offers (`Encoder`), its error type, and the file helpers the encoders share.

Files go through framework.fileio (gs:// works); everything written goes to a temporary name first and
is renamed into place, so a reader never sees half a vocabulary.
"""
from __future__ import annotations

import hashlib
import os
from typing import Iterable, Iterator, Protocol, Sequence, runtime_checkable

from textrain.framework import fileio
from textrain.framework.errors import UserError


class EncoderError(UserError, ValueError):
    """A missing or malformed vocabulary/model file; the message names the file."""


@runtime_checkable
class Encoder(Protocol):
    """What every text encoder offers to problems."""

    vocab_size: int
    special_ids: dict[str, int]

    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: Sequence[int]) -> str: ...
    def tokenize(self, text: str) -> list[str]: ...
    def convert_tokens_to_ids(self, tokens: Sequence[str]) -> list[int]: ...
    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]: ...
    def fingerprint(self) -> str: ...


# File helpers (framework.fileio, so that gs:// paths work).

def require_file(path: str, what: str) -> None:
    """Refuse an empty, missing or directory path, naming it."""
    if not path:
        raise EncoderError(f"no {what} given")
    if not fileio.exists(path):
        raise EncoderError(f"{what} {path} does not exist")
    if fileio.isdir(path):
        raise EncoderError(f"{what} {path} is a directory, not a file")


def read_bytes(path: str, what: str) -> bytes:
    """The bytes of a file that must exist (`what` names it in the error)."""
    require_file(path, what)
    with fileio.open_file(path, "rb") as f:
        return f.read()


def decode_utf8(data: bytes, path: str) -> str:
    """UTF-8 text, or an EncoderError naming the file and line of the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise EncoderError(f"{path}:{line}: not UTF-8 ({data[e.start:e.start + 4]!r})") from None


def sha256_of_file(path: str) -> str:
    """Hex sha256 of a (possibly gs://) file; the fingerprint recorded in manifests."""
    h = hashlib.sha256()
    with fileio.open_file(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def atomic_write(path: str, data: bytes) -> None:
    """Write to a temporary name next to `path` (its directory made if needed), then rename over it."""
    parent = os.path.dirname(path)
    if parent and not fileio.exists(parent):
        fileio.makedirs(parent)
    fileio.write_bytes_atomic(path, data)


def iter_text_lines(inputs: str | Sequence[str] | Iterable[str]) -> Iterator[str]:
    """Lines of text from files or from an iterator.

    A str (comma-separated paths/globs) or a list/tuple of them names files (.gz/.bz2 ok, gs:// ok);
    anything else (a generator, `iter(list_of_lines)`, a file object) yields the lines themselves.
    """
    if isinstance(inputs, (str, list, tuple)):
        from textrain.framework import corpus  # lazy: only needed when reading files
        if not all(isinstance(p, str) for p in inputs):
            raise TypeError(f"file names must be strings, got {inputs!r:.200}")
        pattern = inputs if isinstance(inputs, str) else ",".join(inputs)
        for path in corpus.expand_paths(pattern):
            for _, line in corpus.iter_lines(path):
                yield line
    else:
        yield from inputs
