"""Search stage: site, resolved labs and their starters → the text of output/search-index.js.

Pure. One document per lab, per lab section, per key block and per starter's source view; each
keeps what a result shows (title, breadcrumb, URL from the site root, a short snippet) and each of
its tokens gets a weight from the fields it occurs in. The index is a script that sets
`window.InfraLensSearchIndex`, because a page opened from file:// cannot fetch() JSON;
templates/static/search.js loads it on first use and splits queries exactly as `words` does here.
"""

from __future__ import annotations

import json
import keyword
import re
from dataclasses import dataclass
from functools import partial
from pathlib import PurePosixPath
from typing import Iterable

from infralens.model.declare import texts
from infralens.model.lab import SECTIONS, Lab
from infralens.model.resolved import ResolvedLab
from infralens.model.schema import Choice, Regex, Spec, Text
from infralens.model.site import Site
from infralens.text.source import SourceFile
from infralens.urls import href, lab_url, source_url

FORMAT = 2
"""Version of the index layout, checked by search.js."""

CHUNK_LABS = 32
"""Labs per chunk of the index: an edit rewrites the chunk of its lab, not the whole index (at
1,000 labs, 32 chunks of ~250 kB; merging a chunk's labs again is most of a one-lab edit's search
work, and search.js loads every chunk at the first query either way)."""

SNIPPET = 160
"""Longest snippet a result shows, in characters."""

STOP_WORDS = frozenset(
    "an and are as at be but by can do does for from has have if in into is it its of on or so than that the their "
    "them then there these this those to was were what when where which while who why will with".split()
)
"""Words too common to find anything; not indexed, and dropped from queries by search.js too."""

# Field weights: a match in a title outranks one in a name, which outranks one in running prose.
LAB_TITLE, LAB_SUMMARY = 10, 4
SECTION_TITLE, SECTION_TEXT = 3, 1
BLOCK_NAME, BLOCK_NOTE = 8, 1
STARTER_PATH, STARTER_ROLE, DEFINED_NAME, IDENTIFIER = 6, 2, 4, 2

# Sections with no document of their own: the preview is code, and each key block is a document.
UNINDEXED_SECTIONS = frozenset({"preview", "key_blocks"})

_WORD = re.compile(r"\w+")
_IDENTIFIER = re.compile(r"[^\W\d]\w*")
_KEYWORDS = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist)
# A comment, a string literal with its prefix, or a number; the lookahead skips most positions fast.
_PY_NOISE = re.compile(
    r"""(?=[#'"rRbBuUfF\d])(?:\#[^\n]*|(?:\b[rRbBuUfF]{1,2})?"""
    r"""(?:'''[\s\S]*?'''|\"\"\"[\s\S]*?\"\"\"|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*")|\b\d[\w.]*)"""
)
_PY_DEFINED = re.compile(r"\b(?:def|class)\s+([^\W\d]\w*)")
_TEX_COMMAND = re.compile(r"\\(?:text|mathrm|operatorname)\{([^}]*)\}|\\(times|cdot)\b|\\([A-Za-z]+)|(\\.)|[{}]")
_TEX_SYMBOLS = {"times": "×", "cdot": "·"}


@dataclass(kw_only=True, frozen=True)
class Document:
    """One search result: what it shows, where it links, and the text it is found by."""

    title: str
    crumb: str
    """Where it sits, e.g. "Lab 04 · Online Softmax · Key code blocks"."""
    url: str
    """Relative to the site root, with a #fragment for a section or key block."""
    snippet: str
    fields: tuple[tuple[int, str], ...]
    """(weight, text) pairs; each distinct token of a field adds the field's weight once."""


def words(text: str) -> list[str]:
    """Split text as search.js splits a query: lowercase runs of letters, digits and `_`."""
    return _WORD.findall(text.lower())


def tokens(text: str) -> set[str]:
    """Return the index tokens of text: each word, and the `_`-separated parts of an identifier."""
    found = set(words(text))
    found.update([part for word in found if "_" in word for part in word.split("_")])
    return {token for token in found if len(token) > 1 and token not in STOP_WORDS}


def plain_text(markdown: str) -> str:
    """Return the words a reader sees of Markdown prose, parsed as the page parses it: link text
    kept, code and emphasis marks dropped, math read as text (\\times as ×)."""
    # deferred: markdown-it and latex2mathml take ~0.1 s to load, and a build with no lab to index never needs them
    from infralens.text.markdown import block_tokens, inline_tokens, one_paragraph

    # One paragraph has the same words parsed either way: the inline tokens are the ones an inline
    # field's page render parsed (most fields); a block field's are parsed anew, without block rules.
    return tokens_text((inline_tokens if one_paragraph(markdown) else block_tokens)(markdown)[0])


def tokens_text(tokens) -> str:
    """The words of parsed Markdown (see plain_text), whitespace made single spaces."""
    words: list[str] = []
    for token in tokens:
        if token.type in ("math_block", "fence", "code_block"):
            words.append(_tex_text(token.content) if token.type == "math_block" else token.content)
        for child in token.children or ():
            if child.type in ("text", "code_inline"):
                words.append(child.content)
            elif child.type in ("math_inline", "math_inline_double"):
                words.append(_tex_text(child.content))
            elif child.type in ("softbreak", "hardbreak"):
                words.append(" ")
        words.append(" ")
    return " ".join("".join(words).split())


def _tex_text(latex: str) -> str:
    return _TEX_COMMAND.sub(tex_replacement, latex)


def tex_replacement(command: re.Match) -> str:
    """Read a TeX command as text: \\text{FLOPs} → FLOPs, \\times → ×, \\min → min, \\, → space, braces go."""
    text, symbol, name, spacing = command.groups()
    return text if text is not None else _TEX_SYMBOLS[symbol] if symbol else name or (" " if spacing else "")


def snippet(text: str) -> str:
    """Shorten text to at most SNIPPET characters, cutting at a space."""
    text = " ".join(text.split())
    if len(text) <= SNIPPET:
        return text
    cut = text[: SNIPPET - 1]
    return (cut.rsplit(" ", 1)[0] if " " in cut else cut).rstrip(",;:.") + "…"


def python_names(code: str) -> tuple[list[str], list[str]]:
    """Return (names defined by def/class, every identifier) of Python code; keywords left out.

    The same names as the NAME tokens of `tokenize` (tests/build/test_search.py holds it to that on every
    starter) in a tenth of the time: comments, strings and numbers are blanked, then names found.
    """
    code = _PY_NOISE.sub(" ", code)
    return _PY_DEFINED.findall(code), [name for name in _IDENTIFIER.findall(code) if name not in _KEYWORDS]


def starter_names(path: str, text: str) -> tuple[list[str], list[str], list[str]]:
    """Return (headings, defined names, identifiers) of a starter file.

    Python: every name but keywords. Markdown: the headings, and the names in code spans and fenced
    blocks. Anything else: whatever looks like an identifier.
    """
    suffix = PurePosixPath(path).suffix.lower()
    if suffix == ".py":
        return [], *python_names(text)
    if suffix != ".md":
        return [], [], _IDENTIFIER.findall(text)
    # deferred: markdown-it and latex2mathml take ~0.1 s to load, and a build with no lab to index never needs them
    from infralens.text.markdown import PYTHON, outline


    found = outline(text)
    defined, names = [], []
    for fence in found.fences:
        if fence.language in PYTHON:
            fence_defined, fence_names = python_names(fence.code)
            defined += fence_defined
            names += fence_names
        else:
            names += _IDENTIFIER.findall(fence.code)
    names += [name for span in found.code_spans for name in _IDENTIFIER.findall(span)]
    return [heading.title for heading in found.headings], defined, names


def section_texts(lab: Lab) -> dict[str, str]:
    """Return the plain text of each section of a lab page: every indexed field declared for it."""
    def wanted(spec: Spec, meta: dict) -> bool:
        return bool(meta["section"]) and meta["indexed"] and isinstance(spec, (Text, Choice)) and not isinstance(spec, Regex)

    found: dict[str, list[str]] = {}
    for text, meta in texts(lab, wanted):
        found.setdefault(meta["section"], []).append(plain_text(text))
    return {section: " ".join(parts) for section, parts in found.items()}


def lab_documents(site: Site, resolved: ResolvedLab, texts: tuple[str, ...]) -> tuple[Document, ...]:
    """Return the documents of one lab: the lab, its sections, its key blocks, its starters.

    `texts` are the lab's starters' contents, in the order of `lab.starters`.
    """
    lab = resolved.lab
    url = lab_url(lab.id)
    number = f"Lab {lab.number:02d}"
    track = next((track.title for track in site.tracks if track.id == lab.track), lab.track)
    summary = plain_text(lab.summary)
    fields = ((LAB_TITLE, f"{lab.title} {number}"), (LAB_SUMMARY, summary))
    documents = [Document(title=lab.title, crumb=f"{number} · {track}", url=url, snippet=snippet(summary), fields=fields)]
    sections = section_texts(lab)
    for section, _, _ in SECTIONS:
        text = "" if section in UNINDEXED_SECTIONS else sections.get(section, "")
        if not text:
            continue
        title = lab.section_title(section)
        anchor = section.replace("_", "-")
        fields = ((SECTION_TITLE, title), (SECTION_TEXT, text))
        documents.append(Document(title=title, crumb=f"{number} · {lab.title}", url=f"{url}#{anchor}", snippet=snippet(text), fields=fields))
    blocks_title = lab.section_title("key_blocks")
    for block in resolved.excerpt.key_blocks:
        note = plain_text(block.note)
        fields = ((BLOCK_NAME, block.name), (BLOCK_NOTE, note))
        documents.append(Document(title=block.name, crumb=f"{number} · {lab.title} · {blocks_title}", url=f"{url}#kb-{block.slug}", snippet=snippet(note), fields=fields))
    for starter, text in zip(lab.starters, texts):
        headings, defined, names = starter_names(starter.path, text)
        role = plain_text(starter.role)
        fields = (
            (STARTER_PATH, starter.path),
            (STARTER_ROLE, role),
            (SECTION_TITLE, " ".join(headings)),
            (DEFINED_NAME, " ".join(defined)),
            (IDENTIFIER, " ".join(names)),
        )
        crumb = f"{number} · {lab.title} · Annotated source"
        documents.append(Document(title=starter.path, crumb=crumb, url=href(source_url(starter.path)), snippet=snippet(role), fields=fields))
    return tuple(documents)


def documents(site: Site, labs: tuple[ResolvedLab, ...], sources: dict[str, SourceFile]) -> list[Document]:
    """Return every document of the site, in the order of the labs and of their pages."""
    return [
        document
        for resolved in labs
        for document in lab_documents(site, resolved, tuple(sources[starter.path].text for starter in resolved.lab.starters))
    ]


@dataclass(frozen=True)
class Partial:
    """One lab's share of the index: its documents and, for each, its tokens with their weights.

    Built with the lab's pages and kept by the build, so an edit re-tokenizes one lab, not the site.
    """

    docs: tuple[Document, ...]
    weights: tuple[tuple[tuple[str, int], ...], ...]


def lab_partial(site: Site, resolved: ResolvedLab, texts: tuple[str, ...]) -> Partial:
    """Return one lab's documents with their token weights; the documents keep what a result shows,
    not the texts they were found by (their weights hold those: the build keeps every lab's
    partial, and an edit reads its chunk's partials back)."""
    docs = lab_documents(site, resolved, texts)
    return Partial(tuple(Document(title=doc.title, crumb=doc.crumb, url=doc.url, snippet=doc.snippet, fields=()) for doc in docs), tuple(token_weights(doc) for doc in docs))


def postings(partials: Iterable[Partial], docs: list[Document]) -> dict[str, list[str]]:
    """Map each token to its postings, "document id,weight" each, ids ascending.

    Appends every document to `docs` as it goes, so partials can be read one at a time. The pairs
    are text already: a chunk of 32 labs has some 20,000 of them, and they are only ever written out.
    """
    index: dict[str, list[str]] = {}
    for lab in partials:
        for doc, weights in zip(lab.docs, lab.weights):
            doc_id = len(docs)
            docs.append(doc)
            for token, weight in weights:
                pair = f"{doc_id},{weight}"
                entry = index.get(token)
                if entry is None:
                    index[token] = [pair]
                else:
                    entry.append(pair)
    return index


def token_weights(document: Document) -> tuple[tuple[str, int], ...]:
    """Return each token of a document with its weight: the sum of the weights of its fields."""
    weights: dict[str, int] = {}
    for weight, text in document.fields:
        for token in tokens(text):
            weights[token] = weights.get(token, 0) + weight
    return tuple(weights.items())


_dump = partial(json.dumps, separators=(",", ":"), ensure_ascii=True)


def chunk_path(number: int) -> str:
    """Where chunk `number` of the index goes under output/."""
    return f"search/chunk-{number:04d}.js"


def chunk_script(number: int, partials: Iterable[Partial]) -> str:
    """Return one chunk of the index: the documents of some labs, in order, and their postings.

    Document ids count from 0 in each chunk; search.js shifts them as it joins the chunks. The
    same input gives the same bytes, one document and one token per line, so a change reads as a diff.
    """
    docs: list[Document] = []
    index = postings(partials, docs)
    return (
        "/* A chunk of the site's search index, written by infralens build (infralens/build/search.py). */\n"
        f"(window.InfraLensSearchChunks = window.InfraLensSearchChunks || {{}})[{number}] = {{\n"
        '"docs":[\n' + ",\n".join(_dump([d.title, d.crumb, d.url, d.snippet]) for d in docs) + "],\n"
        '"terms":[\n' + ",\n".join(f'[{_dump(token)},[{",".join(index[token])}]]' for token in sorted(index)) + "]};\n"
    )


def index_script(chunks: list[str]) -> str:
    """Return search-index.js: the format, the stop words and the chunks search.js loads."""
    return (
        "/* The site's search index, written by infralens build (infralens/build/search.py): its chunks follow. */\n"
        f'window.InfraLensSearchIndex = {{"version":{FORMAT},"stop":{_dump(sorted(STOP_WORDS))},"chunks":{_dump(chunks)}}};\n'
    )


def search_index(site: Site, labs: tuple[ResolvedLab, ...], sources: dict[str, SourceFile]) -> str:
    """Return the whole index of these labs as one chunk script (for tests and tools)."""
    return chunk_script(0, [
        lab_partial(site, resolved, tuple(sources[starter.path].text for starter in resolved.lab.starters)) for resolved in labs
    ])
