"""MediaWiki XML dumps: a page at a time, its wikitext stripped of markup (mwparserfromhell)."""
from __future__ import annotations

from typing import Any, Iterator

from textrain.framework.corpus_formats.base import (
    Batch,
    FormatError,
    Part,
    _corrupt,
    _record_batches,
    _require,
    open_binary,
    read_errors,
)


def _mediawiki_records(path: str) -> Iterator[tuple[str, Any]]:
    """Articles (namespace 0, not redirects) of a MediaWiki XML export: {"title", "text"}, the text with
    its markup removed by mwparserfromhell."""
    import xml.etree.ElementTree as ET
    mw = _require("mwparserfromhell", path)
    with open_binary(path) as f:
        pages = 0
        try:
            context = ET.iterparse(f, events=("end",))
            for _, elem in context:
                if not elem.tag.endswith("}page") and elem.tag != "page":
                    continue
                pages += 1
                ns = _child_text(elem, "ns")
                redirect = any(_local(c.tag) == "redirect" for c in elem)
                title = _child_text(elem, "title") or ""
                revision = next((c for c in elem if _local(c.tag) == "revision"), None)
                wikitext = _child_text(revision, "text") if revision is not None else None
                elem.clear()  # memory stays flat however long the dump
                if ns not in (None, "0") or redirect or wikitext is None:
                    continue
                text = _strip_markup(mw, wikitext)
                yield f"page {pages} ({title!r})", {"title": title, "text": text}
        except ET.ParseError as e:
            line, column = e.position
            raise FormatError(f"{path}:{line}: the XML ends or breaks at column {column} after {pages} "
                              f"pages ({e}); the dump is truncated or corrupt") from None
        except read_errors() as e:
            raise _corrupt(path, f"after {pages} pages", e) from None



def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _child_text(elem: Any, name: str) -> str | None:
    for child in elem:
        if _local(child.tag) == name:
            return child.text or ""
    return None


def _strip_markup(mw: Any, wikitext: str) -> str:
    """Article text: templates, references, tables and link targets removed; paragraphs one per line."""
    code = mw.parse(wikitext)
    # Headings are titles, not sentences; references, tables and the like are not prose.
    unwanted = [*code.filter_headings(recursive=False),
                *(t for t in code.filter_tags(recursive=True)
                  if str(t.tag).lower() in ("ref", "table", "gallery", "math", "references"))]
    for node in unwanted:
        try:
            code.remove(node)
        except ValueError:  # inside a node removed already
            pass
    text = code.strip_code(normalize=True, collapse=True)
    # list bullets and indents are markup that strip_code leaves at the start of a line
    return "\n".join(line.strip().lstrip("*#:; ").strip() for line in text.split("\n"))




def batches(path: str, fields: tuple[str, ...], part: Part) -> Iterator[Batch]:
    return _record_batches(_mediawiki_records(path), fields)


def count_parts(path: str) -> None:
    """One part: the file is read whole by one job (records have no index to start a part at)."""
    return None
