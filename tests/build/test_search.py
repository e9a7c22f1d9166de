"""The search index: how text becomes tokens, what each starter contributes, and what the build writes."""

from __future__ import annotations

import io
import json
import keyword
import re
import tokenize
from pathlib import Path

import pytest
from conftest import REPO, declared_starters

from infralens.build import build, load_project
from infralens.build.links import check_links
from infralens.build.memory import render_in_memory, resolve
from infralens.build.search import (
    SNIPPET,
    documents,
    plain_text,
    python_names,
    search_index,
    snippet,
    starter_names,
    tokens,
    words,
)
from infralens.project.workspace import Workspace
from infralens.text.source import SourceFile

ONLY_IN_A_STARTER = ("requests_that_fit", "code/lab-13-paged-kv-cache/paged_kv_cache.py")
"""An identifier of one lab's starter that no manifest and no other starter mentions."""


def parse(chunk_js: str) -> dict:
    """Read the data back out of one chunk of the index."""
    match = re.fullmatch(r"/\*[^*\n]*\*/\n\(window\.InfraLensSearchChunks = window\.InfraLensSearchChunks \|\| \{\}\)\[\d+\] = (.*);\n", chunk_js, re.S)
    assert match, chunk_js[:200]
    return json.loads(match.group(1))


def read_index(out: Path) -> dict:
    """Read a built site's whole index: search-index.js and its chunks, joined as search.js joins them."""
    match = re.fullmatch(r"/\*[^*\n]*\*/\nwindow\.InfraLensSearchIndex = (.*);\n", (out / "search-index.js").read_text(), re.S)
    assert match
    manifest = json.loads(match.group(1))
    assert manifest["version"] == 2
    docs, terms = [], []
    for path in manifest["chunks"]:
        chunk = parse((out / path).read_text())
        offset = len(docs)
        docs += chunk["docs"]
        terms += [[token, [value + offset if i % 2 == 0 else value for i, value in enumerate(postings)]] for token, postings in chunk["terms"]]
    return {"docs": docs, "terms": terms, "stop": manifest["stop"]}


def found(index: dict, term: str) -> list[str]:
    """URLs of the documents holding a token that starts with term, as search.js looks one term up."""
    ids = {doc for token, postings in index["terms"] if token.startswith(term) for doc in postings[::2]}
    return [index["docs"][doc][2] for doc in sorted(ids)]


def tokenize_names(code: str) -> list[str]:
    """The NAME tokens of Python code other than keywords, by the standard library's tokenizer."""
    skip = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist)
    names, depth = [], 0
    for token in tokenize.generate_tokens(io.StringIO(code).readline):
        # From Python 3.12 tokenize looks inside f-strings; their names are string content to us.
        if token.type == getattr(tokenize, "FSTRING_START", -1):
            depth += 1
        elif token.type == getattr(tokenize, "FSTRING_END", -1):
            depth -= 1
        elif token.type == tokenize.NAME and not depth and token.string not in skip:
            names.append(token.string)
    return names


@pytest.mark.unit
def test_words_are_lowercase_runs_of_letters_digits_and_underscores() -> None:
    assert words("Llama-2-7B keeps `kv_cache_bytes`; GQA!") == ["llama", "2", "7b", "keeps", "kv_cache_bytes", "gqa"]


@pytest.mark.unit
def test_tokens_keep_whole_identifiers_and_their_parts_without_stop_words_or_single_letters() -> None:
    assert tokens("Count the kv_cache_bytes of a KV-head, then q") == {"count", "kv_cache_bytes", "kv", "cache", "bytes", "head"}
    assert tokens("__torch_dispatch__") == {"__torch_dispatch__", "torch", "dispatch"}


@pytest.mark.unit
def test_plain_text_drops_markdown_marks_but_keeps_words() -> None:
    markdown = "Use `kv_cache` and **bold** text, see [the docs](https://example.org/a_b) and $2 d^2$."
    assert plain_text(markdown) == "Use kv_cache and bold text, see the docs and 2 d^2."
    assert plain_text(r"$I = \text{FLOPs} / \text{bytes}$, $m\,d_{model} \times 2$") == "I = FLOPs / bytes, m d_model × 2"


@pytest.mark.unit
def test_snippet_is_cut_at_a_space_within_the_limit() -> None:
    text = " ".join(f"word{n}" for n in range(60))
    short = snippet(text)
    assert len(short) <= SNIPPET and short.endswith("…")
    assert text.startswith(short[:-1]) and text[len(short) - 1] == " "
    assert snippet("  short   text ") == "short text"


@pytest.mark.parametrize("path", sorted({p for p in declared_starters() if p.endswith(".py")}))
@pytest.mark.unit
def test_python_names_are_the_names_tokenize_finds(project, path: str) -> None:
    text = project.sources[path].text
    defined, names = python_names(text)
    assert names == tokenize_names(text)
    assert set(defined) <= set(names)
    assert [name for name in defined if f"def {name}(" in text or f"class {name}" in text] == defined


@pytest.mark.unit
def test_python_names_skip_comments_strings_and_numbers() -> None:
    code = 'x = 1e-12 + 0x0F  # not_a_name\ns = rb"not_this" + f\'{nor_this}\' + """nor_\nthat"""\ndef kv_bytes(): pass\n'
    assert python_names(code) == (["kv_bytes"], ["x", "s", "kv_bytes"])


@pytest.mark.unit
def test_a_markdown_starter_gives_its_headings_and_the_names_in_its_code(sample_project) -> None:
    headings, defined, names = starter_names("code/lab-02-notes/notes.md", sample_project.sources["code/lab-02-notes/notes.md"].text)
    assert headings == ["Notes", "Chunking", "Later"]
    assert defined == []
    assert names == ["rows", "sum", "range", "n", "n", "range", "print", "rows", "print", "sum", "rows"]
    notes = "# Notes\n\nCall `decode_tiled(z)`, not decode_sliced.\n\n```text\nout_shape\n```\n"
    assert starter_names("notes.md", notes) == (["Notes"], [], ["out_shape", "decode_tiled", "z"])


@pytest.mark.unit
def test_the_sample_site_has_a_document_per_lab_section_key_block_and_starter(sample_project) -> None:
    docs = documents(sample_project.site, resolve(sample_project), sample_project.sources)
    notes = [(d.title, d.crumb, d.url) for d in docs if "lab-02-notes" in d.url]
    assert notes == [
        ("Sample notes", "Lab 02 · Reading", "labs/lab-02-notes/index.html"),
        ("Read code to understand the concept", "Lab 02 · Sample notes", "labs/lab-02-notes/index.html#concept-goal"),
        ("Core mechanism", "Lab 02 · Sample notes", "labs/lab-02-notes/index.html#mechanism"),
        ("Annotated starter links", "Lab 02 · Sample notes", "labs/lab-02-notes/index.html#starters"),
        ("How to read this code", "Lab 02 · Sample notes", "labs/lab-02-notes/index.html#checkpoints"),
        ("What this code does not mean", "Lab 02 · Sample notes", "labs/lab-02-notes/index.html#misunderstandings"),
        ("How to say it out loud", "Lab 02 · Sample notes", "labs/lab-02-notes/index.html#interview"),
        ("Additional intuition", "Lab 02 · Sample notes", "labs/lab-02-notes/index.html#intuition"),
        ("Official, paper and practical references", "Lab 02 · Sample notes", "labs/lab-02-notes/index.html#further-reading"),
        ("Setup / contract", "Lab 02 · Sample notes · What each block is doing", "labs/lab-02-notes/index.html#kb-setup-contract"),
        ("code/lab-02-notes/notes.md", "Lab 02 · Sample notes · Annotated source", "code/lab-02-notes/notes.md.html"),
    ]
    kv = next(d for d in docs if d.url == "labs/lab-01-sample/index.html#kb-per_layer")
    assert kv.snippet == "K and V, so the factor 2."


@pytest.mark.unit
def test_titles_outrank_prose_and_identifiers_point_at_the_source_view(sample_project) -> None:
    index = parse(search_index(sample_project.site, resolve(sample_project), sample_project.sources))
    weights = dict(index["terms"])
    urls = [doc[2] for doc in index["docs"]]
    by_url = {urls[doc]: weight for doc, weight in zip(weights["sample"][::2], weights["sample"][1::2])}
    assert by_url["labs/lab-01-sample/index.html"] > by_url.get("labs/lab-01-sample/index.html#concept-goal", 0)
    assert found(index, "kv_bytes_per_token") == ["code/lab-01-sample/kv.py.html"]
    assert found(index, "argparse") == ["code/lab-01-sample/kv.py.html"]
    assert "the" not in weights and "k" not in weights


@pytest.mark.unit
def test_the_index_is_the_same_bytes_on_every_build(project) -> None:
    first = search_index(project.site, resolve(project), project.sources)
    again = load_project(REPO / "site.yml")
    assert search_index(again.site, resolve(again), again.sources) == first
    index = parse(first)
    terms = [token for token, _ in index["terms"]]
    assert terms == sorted(set(terms))
    assert all(postings[::2] == sorted(set(postings[::2])) for _, postings in index["terms"])
    assert all(len(doc[3]) <= SNIPPET for doc in index["docs"])


@pytest.mark.cli
def test_a_lab_is_found_by_an_identifier_that_only_its_starter_has(project, real_site: Path) -> None:
    identifier, starter = ONLY_IN_A_STARTER
    manifests = [lab.path for lab in project.labs if identifier in (REPO / lab.path).read_text()]
    holders = [path for path, source in project.sources.items() if identifier in source.text]
    assert (manifests, holders) == ([], [starter]), "pick another identifier for this test"
    index = read_index(real_site)
    assert found(index, identifier) == [f"{starter}.html"]


@pytest.mark.cli
def test_every_result_links_to_a_page_and_anchor_of_the_built_site(project, real_site: Path) -> None:
    index = read_index(real_site)
    ids: dict[str, set[str]] = {}
    for title, crumb, url, text in index["docs"]:
        assert title and crumb.startswith("Lab ") and text, url
        path, _, fragment = url.partition("#")
        if path not in ids:
            ids[path] = set(re.findall(r'\bid="([^"]+)"', (real_site / path).read_text()))
        assert not fragment or fragment in ids[path], url
    assert {url.partition("#")[0] for _, _, url, _ in index["docs"]} >= {f"{path}.html" for path in project.sources}


@pytest.mark.unit
def test_an_incremental_build_writes_the_same_index_as_a_cold_one(sample_site: Path, tmp_path: Path) -> None:
    notes = sample_site / "code/lab-02-notes/notes.md"
    ws = Workspace.open(sample_site / "site.yml", tmp_path / "out", tmp_path / "cache")
    build(ws)
    notes.write_text(notes.read_text() + "\nCall `new_identifier()` here.\n")
    assert build(ws).rendered == 1  # only the lab that owns the edited starter
    cold = Workspace.open(sample_site / "site.yml", tmp_path / "cold", tmp_path / "cold-cache")
    build(cold)
    assert sorted(p.name for p in (ws.out / "search").iterdir()) == ["chunk-0000.js"]
    for path in ("search-index.js", "search/chunk-0000.js"):
        assert (ws.out / path).read_text() == (cold.out / path).read_text()
    index = read_index(ws.out)
    assert found(index, "new_identifier") == ["code/lab-02-notes/notes.md.html"]
    assert found(index, "kv_bytes_per_token") == ["code/lab-01-sample/kv.py.html"]
    pages, files = render_in_memory(sample_site / "site.yml", tmp_path / "cache")
    assert not [link for link in check_links(pages, files) if link.problem]


@pytest.mark.unit
def test_a_file_that_is_neither_python_nor_markdown_gives_what_looks_like_identifiers() -> None:
    source = SourceFile("code/x/run.sh", "export KV_HEADS=8\nrun_model --fast\n", (), "Bash")
    assert starter_names(source.path, source.text) == ([], [], ["export", "KV_HEADS", "run_model", "fast"])


def _prose_strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in _prose_strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _prose_strings(item)]
    return []


ONE_PARAGRAPH_CASES = [
    "plain words", "a *b* **c** `d` [e](https://x.org) ![f](g.png) &amp; \\* x", "line one\nline two  \nhard break",
    "ends with a backslash \\", "  leading spaces", "trailing spaces   ", "math $a_1 + b$ and $$c$$ inline",
    "x\n   lazy continuation", "3.5 times 2", "a (1) b", "snake_case and __dunder__", "<b>raw</b> html as text",
    "`code with | pipe`", "a | b", "url https://example.org/x_y", "[ref][missing] and [x]",
    "***", "a\n---", "1) one", "- a", "# h", "> q", "    code", "a\n\nb", "[x]: https://x.org\n[x]", "$$\nx\n$$",
    "~~~\nx\n~~~", "a\n| b |", "a\n1. b", "a\n+ b", "tab\there", "a\r\nb",
]


@pytest.mark.unit
def test_one_paragraph_has_the_same_words_parsed_inline_as_parsed_as_a_block() -> None:
    """plain_text reads a one-paragraph text from its inline tokens (shared with the page's inline
    render): for every manifest string of the site and the cases above, wherever `one_paragraph`
    says so, the words are the block parse's."""
    import yaml

    from infralens.build.search import tokens_text
    from infralens.text.markdown import block_tokens, inline_tokens, one_paragraph

    texts = list(ONE_PARAGRAPH_CASES)
    for manifest in sorted((REPO / "labs").glob("*.yml")):
        texts += _prose_strings(yaml.safe_load(manifest.read_text(encoding="utf-8")))
    fast = [text for text in texts if one_paragraph(text)]
    for text in fast:
        assert tokens_text(inline_tokens(text)[0]) == tokens_text(block_tokens(text)[0]), repr(text)
    assert len(fast) > len(texts) // 2  # most prose takes the shared path
    # every case that might open another block is left to the block parser
    assert not any(one_paragraph(text) for text in ONE_PARAGRAPH_CASES[ONE_PARAGRAPH_CASES.index("***"):])
