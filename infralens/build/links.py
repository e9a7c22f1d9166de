"""Links: rendered pages → every link and anchor they contain, and which of them are broken.

Pure: works on the pages in memory before anything is written, so `build --strict` can refuse a
site with a broken internal link, a missing `#anchor` (line anchors and links between labs
included) or an external link that is not http(s).
"""

from __future__ import annotations

import re

from dataclasses import dataclass
from html.parser import HTMLParser
from posixpath import dirname, join, normpath
from urllib.parse import unquote, urlsplit

from infralens.build.render import Page


@dataclass(kw_only=True, frozen=True)
class PageLink:
    """One href or src on a page."""

    page: str
    line: int
    col: int
    target: str
    problem: str
    """Why it is broken; empty when it is fine."""

    @property
    def external(self) -> bool:
        return bool(urlsplit(self.target).scheme)


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[tuple[int, int, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name == "id" and value:
                self.ids.add(value)
            elif name in ("href", "src") and value is not None:
                line, col = self.getpos()
                self.links.append((line, col + 1, value))


def collect(pages: list[Page]) -> tuple[dict[str, set[str]], dict[str, list[tuple[int, int, str]]]]:
    """Return the ids and the links of every HTML page."""
    ids, links = {}, {}
    for page in html_pages(pages):
        collector = _Collector()
        collector.feed(page.html)
        ids[page.path] = collector.ids
        links[page.path] = collector.links
    return ids, links


def check_links(pages: list[Page], files: set[str]) -> list[PageLink]:
    """Return every link of the site with its problem, if any; `files` are the copied outputs."""
    ids, links = collect(pages)
    files = files | {page.path for page in pages if page.path not in ids}  # a script such as the search index
    result = []
    for page in html_pages(pages):
        for line, col, target in links[page.path]:
            result.append(PageLink(page=page.path, line=line, col=col, target=target, problem=_problem(page.path, target, ids, files)))
    return result


def html_pages(pages: list[Page]) -> list[Page]:
    """Return the pages that are HTML, leaving out generated scripts such as the search index."""
    return [page for page in pages if page.path.endswith(".html")]


def _problem(page: str, target: str, ids: dict[str, set[str]], files: set[str]) -> str:
    parts = urlsplit(target)
    if parts.scheme:
        return "" if parts.scheme in ("http", "https") and parts.netloc else f"external link is not http(s): {target}"
    if parts.netloc:
        return f"protocol-relative link fetches from outside the site: {target}"
    path = normpath(join(dirname(page), unquote(parts.path))) if parts.path else page
    if path.startswith("../"):
        return f"link leaves the site: {target}"
    if path not in ids and path not in files:
        return f"broken link: {target} (no {path} in the site)"
    if parts.fragment and path in ids and not anchored(unquote(parts.fragment), ids[path]):
        return f"broken anchor: {target} (no id {parts.fragment!r} in {path})"
    return ""


LINE_RANGE = re.compile(r"((?:s\d+-)?)L(\d+)-L(\d+)")
"""A range of lines (`#L12-L18`, `#s2-L3-L5` in a walkthrough's other file), which the reader selects."""


def anchored(fragment: str, known: set[str]) -> bool:
    """Whether a page with these ids has what a fragment names: an id, or both ends of a line range."""
    if fragment in known:
        return True
    lines = LINE_RANGE.fullmatch(fragment)
    return lines is not None and f"{lines[1]}L{lines[2]}" in known and f"{lines[1]}L{lines[3]}" in known
