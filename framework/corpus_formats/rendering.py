"""Rendering once per datagen, for problems that read their input whole in each shard job: a file or a
range of row groups a unit, in parallel (framework/generator.py)."""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
from typing import Any, Iterable, Iterator

from textrain.framework import fileio
from textrain.framework.corpus_formats.base import (
    _RENDERED,
    CorpusFile,
    ReadOptions,
    _compression,
    _corrupt,
    _key,
    _Skips,
    _TooMany,
    open_binary,
    read_errors,
    too_many_error,
    warn_skipped,
)
from textrain.framework.corpus_formats.records import _rendered_pieces, parts_of


@dataclasses.dataclass(frozen=True)
class RenderUnit:
    """A piece of a corpus file that one worker renders to plain text at `out`: the whole file, or (`part`)
    Parquet row groups / Arrow file record batches [start, stop). `number`: its place among its file's."""

    source: CorpusFile
    number: int
    part: tuple[int, int] | None
    out: str


def needs_rendering(path: str) -> bool:
    """A structured or compressed corpus file (datagen renders it once to plain text)."""
    return isinstance(path, CorpusFile) and (path.structured or bool(_compression(path)))





def plan_units(paths: Iterable[str], directory: str) -> list[RenderUnit]:
    """The units of the files among `paths` that need rendering, in corpus order; their text goes to
    `directory` (one file per unit, named by the file, its read options and the unit's number)."""
    units: list[RenderUnit] = []
    seen = set()
    for path in paths:
        if not needs_rendering(path) or _key(path) in seen:
            continue
        seen.add(_key(path))
        name = hashlib.sha256(repr(_key(path)).encode()).hexdigest()[:16]
        for number, part in enumerate(parts_of(path)):
            units.append(RenderUnit(path, number, part, os.path.join(directory, f"{name}-{number:05d}.txt")))
    return units


def render_unit(unit: RenderUnit) -> list[tuple[str, str]]:
    """Write a unit's text to `unit.out` (as `.incomplete`, renamed when whole). Returns its bad records
    (where, why); past --skip_bad_records it stops there and writes nothing (`check_units` reports it)."""
    path = unit.source
    skips = _Skips(path.options.skip_bad_records)
    tmp = fileio.incomplete_path(unit.out)
    try:
        with fileio.open_file(tmp, "wb") as f:
            if path.structured:
                for piece in _rendered_pieces(path, unit.part, unit.number == 0, skips):
                    f.write(piece.encode("utf-8"))
            else:
                _copy_decompressed(path, f)
        fileio.rename(tmp, unit.out, overwrite=True)
    except _TooMany:
        fileio.remove_if_exists(tmp)
    except BaseException:
        fileio.remove_if_exists(tmp)
        raise
    return skips.places


def _copy_decompressed(path: str, out: Any) -> None:
    with open_binary(path) as f:
        try:
            while True:
                data = f.read(1 << 22)
                if not data:
                    return
                out.write(data)
        except read_errors() as e:
            offset = getattr(f, "compressed_offset", lambda: None)()
            raise _corrupt(path, "the compressed data" + (f" (byte {offset})" if offset else ""), e) from None


def check_units(units: list[RenderUnit], bad: list[list[tuple[str, str]]]) -> None:
    """After all units of a run are rendered: a file whose units hold more bad records than its
    --skip_bad_records is an error naming the first one past it (each unit lists up to budget + 1, so the
    file's first budget + 1 are among them, in order); fewer are logged."""
    by_file: dict[tuple, tuple[CorpusFile, list]] = {}
    for unit, places in zip(units, bad):
        by_file.setdefault(_key(unit.source), (unit.source, []))[1].extend(places)
    for path, places in by_file.values():
        budget = path.options.skip_bad_records
        if len(places) > budget:
            raise too_many_error(path, places, budget)
        warn_skipped(path, places, budget)


def renderings(units: list[RenderUnit]) -> dict[tuple[str, ReadOptions], tuple[str, ...]]:
    """{(path, read options): its units' files in order}: what `reading_rendered` takes."""
    out: dict[tuple[str, ReadOptions], list[str]] = {}
    for unit in units:
        out.setdefault(_key(unit.source), []).append(unit.out)
    return {k: tuple(v) for k, v in out.items()}




@contextlib.contextmanager
def reading_rendered(rendered: dict[tuple[str, ReadOptions], tuple[str, ...]]) -> Iterator[None]:
    """Within it, `corpus_files` gives each file that datagen rendered its rendered files
    (`CorpusFile.rendered`): the readers read those, not the source (a shard job's setting)."""
    old = _RENDERED.files
    _RENDERED.files = dict(rendered)
    try:
        yield
    finally:
        _RENDERED.files = old


