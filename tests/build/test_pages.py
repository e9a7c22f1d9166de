"""The real site's pages: every section of the lab anatomy in order, excerpts true to their files."""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

import pytest
from conftest import REPO, TESTS, lab_ids, lab_of, run_infralens

from infralens.build import load_project
from infralens.model.lab import SECTIONS, sections_of


def visible_text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def code_lines(page: str) -> list[tuple[int, str]]:
    """(line number, text) of every row of every listing on a page."""
    rows = re.findall(r'<span(?: class="[^"]*")? id="?L(\d+)"?[^>]*>(.*?)\n</span>', page, re.S)
    return [(int(number), visible_text(body)) for number, body in rows]


@pytest.mark.unit
def test_the_site_has_labs_01_and_10(project) -> None:
    assert {lab.id for lab in project.labs} >= {"lab-01-transformer-memory", "lab-10-memory-optimization-reading"}


@pytest.mark.cli
def test_index_lists_every_lab_under_its_track(project, real_site: Path) -> None:
    labs = project.labs
    index = (real_site / "index.html").read_text()
    for lab in labs:
        assert f'href="labs/{lab.id}/index.html"' in index
    track_order = [t.title for t in project.site.tracks if any(lab.track == t.id for lab in labs)]
    headings = [html.unescape(h) for h in re.findall(r'<h2 id="track-[^"]+">([^<]+)</h2>', index)]
    assert headings == track_order
    summaries = re.findall(r'<p class="track-summary">(.*?)</p>', index, re.S)
    assert [visible_text(s) for s in summaries] == [
        " ".join(t.summary.split()) for t in project.site.tracks if t.summary and any(lab.track == t.id for lab in labs)
    ]


@pytest.mark.parametrize("lab", lab_ids(), indirect=True)
@pytest.mark.cli
def test_lab_page_has_every_section_in_order(lab, real_site: Path) -> None:
    page = (real_site / "labs" / lab.id / "index.html").read_text()
    assert f"Lab {lab.number:02d}" in page
    assert f"<h1>{html.escape(lab.title)}</h1>" in page
    ids = re.findall(r'<section class="section" id="([^"]+)"', page)
    assert ids == [sid.replace("_", "-") for sid, _, _ in SECTIONS]
    eyebrows = re.findall(r'<p class="eyebrow">([^<]+)</p>\s*<h2 id="[^"]+-title">([^<]+)</h2>', page)
    assert [e for e, _ in eyebrows] == [eyebrow for _, eyebrow, _ in sections_of(lab.kind)]
    assert [html.unescape(t) for _, t in eyebrows] == [lab.section_title(sid) for sid, _, _ in SECTIONS]


@pytest.mark.parametrize("lab", lab_ids(), indirect=True)
@pytest.mark.cli
def test_excerpt_lines_equal_the_file_lines_at_the_shown_numbers(lab, real_site: Path) -> None:
    page = (real_site / "labs" / lab.id / "index.html").read_text()
    file_lines = (REPO / lab.previewed).read_text().split("\n")  # rows without a file prefix are its
    shown = code_lines(page)
    assert len(shown) >= 3
    for number, text in shown:
        assert text == file_lines[number - 1], f"line {number}"
        assert "region" not in text.split("#")[-1] or "endregion" not in text  # markers are hidden


def assert_every_note_names_and_marks_its_lines(page: str, lab) -> None:
    """Each key block's note links to its first line and names its span, and those lines are marked.
    A note on a walkthrough step of another file links to that file's rows, `#s2-L10` (the
    lab's second starter): a line's id is its file's prefix and its number."""
    notes = re.findall(r'<li class="key-block" id="kb-([^"]+)">.*?<p class="kb-lines"><a href="#((?:s\d+-)?)L(\d+)" data-lines="(\d+)-(\d+)">Lines? (\d+)(?:–(\d+))?</a>', page, re.DOTALL)
    assert len(notes) == len(lab.key_blocks)
    shown = {(prefix, int(n)): cls for cls, prefix, n in re.findall(r'<span(?: class="([^"]*)")? id="?((?:s\d+-)?)L(\d+)"?', page)}
    for slug, prefix, href, first, last, named_first, named_last in notes:
        assert href == first == named_first and last == (named_last or named_first), slug
        assert (prefix, int(first)) in shown, f"{slug}: #{prefix}L{first} is no row of the page"
        for number in range(int(first), int(last) + 1):
            if (prefix, number) in shown:  # a marker line inside a block is not shown
                assert "bound" in shown[prefix, number].split(), f"line {prefix}{number} should be marked for {slug}"


@pytest.mark.parametrize("lab", lab_ids(), indirect=True)
@pytest.mark.cli
def test_every_key_block_note_names_and_marks_its_lines(lab, real_site: Path) -> None:
    assert_every_note_names_and_marks_its_lines((real_site / "labs" / lab.id / "index.html").read_text(), lab)


@pytest.mark.cli
def test_a_note_on_the_second_file_of_a_walkthrough_passes_the_same_check(tmp_path: Path) -> None:
    """tests/sites/walkthrough: its note 'append' binds the third step, in cache.py, the lab's
    second starter (`#s2-L10`). The check above once read only `#L…` links and rejected it."""
    site = tmp_path / "site"
    shutil.copytree(TESTS / "sites" / "walkthrough", site, ignore=shutil.ignore_patterns(".infralens", "output"))
    result = run_infralens("build", "--out", str(tmp_path / "output"), cwd=site)
    assert result.returncode == 0, result.stderr
    lab = lab_of(load_project(site / "site.yml"), "lab-01-walk")
    page = (tmp_path / "output" / "labs" / lab.id / "index.html").read_text()
    assert '<a href="#s2-L10" data-lines="10-12">' in page  # the documented link form is what is tested
    assert_every_note_names_and_marks_its_lines(page, lab)


@pytest.mark.parametrize("lab", lab_ids(), indirect=True)
@pytest.mark.cli
def test_source_view_shows_the_whole_file_with_anchors(lab, real_site: Path) -> None:
    for starter in lab.starters:
        page = (real_site / f"{starter.path}.html").read_text()
        file_lines = (REPO / starter.path).read_text().split("\n")
        if file_lines[-1] == "":
            file_lines.pop()
        shown = code_lines(page)
        assert [n for n, _ in shown] == list(range(1, len(file_lines) + 1))
        assert [t for _, t in shown] == file_lines
        assert f'href="../../labs/{lab.id}/index.html"' in page
        assert (real_site / starter.path).read_bytes() == (REPO / starter.path).read_bytes()


@pytest.mark.cli
def test_pages_reference_nothing_outside_the_site(real_site: Path) -> None:
    for page in real_site.rglob("*.html"):
        text = page.read_text()
        assert not re.search(r'<(?:script|link|img|iframe)[^>]+(?:src|href)="(?:https?:)?//', text), page
        for href in re.findall(r'<link[^>]+href="([^"]+)"', text):
            assert (page.parent / href).resolve().is_file(), (page, href)


def shown_numbers(page: str) -> list[tuple[int, int]]:
    """(id number, number the CSS counter shows) for each row of a page's excerpt.

    An excerpt's numbers are the counter `ln`: reset on <code>, incremented by every row, then set
    by a row after a gap (CSS applies counter-set after counter-increment).
    """
    code = re.search(r'<pre class="code[^"]*"[^>]*><code style="counter-reset:ln (\d+)">(.*?)</code></pre>', page, re.S)
    value = int(code.group(1))
    pairs = []
    for number, style in re.findall(r'<span(?: class="[^"]*")? id="?L(\d+)"?[^>]*?(?: style="counter-set:ln (\d+)")?>', code.group(2)):
        value = int(style) if style else value + 1
        pairs.append((int(number), value))
    return pairs


@pytest.mark.cli
def test_excerpt_numbers_stay_true_across_hidden_marker_lines(sample_site: Path) -> None:
    from conftest import run_infralens

    starter = sample_site / "code/lab-01-sample/kv.py"
    text = starter.read_text()
    first = "    per_layer = 2 * kv_heads * head_dim  # one K and one V vector per KV head\n"
    starter.write_text(text.replace(first, first + "    # region inner\n    inner = 1\n    # endregion\n"))
    manifest = sample_site / "labs/lab-01-sample.yml"
    manifest.write_text(manifest.read_text().replace('lines: "10"', 'lines: "13"'))
    result = run_infralens("build", cwd=sample_site)
    assert result.returncode == 0, result.stderr
    page = (sample_site / "output/labs/lab-01-sample/index.html").read_text()
    pairs = shown_numbers(page)
    assert [n for n, _ in pairs] == [9, 11, 13]  # lines 10 and 12 are the hidden markers
    assert all(number == shown for number, shown in pairs), pairs


@pytest.mark.parametrize("lab", lab_ids(), indirect=True)
@pytest.mark.cli
def test_excerpt_numbers_shown_are_the_row_numbers(lab, real_site: Path) -> None:
    pairs = shown_numbers((real_site / "labs" / lab.id / "index.html").read_text())
    assert pairs and all(number == shown for number, shown in pairs)


@pytest.mark.cli
def test_index_maps_each_topic_to_its_lab_in_track_order(project, real_site: Path) -> None:
    index = (real_site / "index.html").read_text()
    table = re.search(r'<section class="handbook-map" id="map">.*?</section>', index, re.S).group(0)
    assert "Topic → Lab → what the lab makes concrete" in table
    rows = re.findall(r'<tr><th scope="row">(.*?)</th><td><a href="labs/([^/]+)/index.html">Lab (\d\d): .*?</a></td><td>(.*?)</td></tr>', table)
    order = [t.id for t in project.site.tracks]
    expected = sorted(project.labs, key=lambda lab: (order.index(lab.track), project.labs.index(lab)))
    assert [lab_id for _, lab_id, _, _ in rows] == [lab.id for lab in expected]
    for (topic, lab_id, number, concrete), lab in zip(rows, expected):
        assert visible_text(topic) == lab.topic and int(number) == lab.number
        assert visible_text(concrete) == visible_text(lab.concrete).replace("`", "")  # code spans lose their backticks
        assert lab.topic != lab.title and lab.concrete != lab.summary  # every real lab says its own


@pytest.mark.unit
def test_links_built_from_paths_are_percent_encoded_and_never_a_scheme() -> None:
    from infralens.urls import href

    assert href("code/lab-01/a b#c?d%e.py") == "code/lab-01/a%20b%23c%3Fd%25e.py"
    assert href("javascript:alert(1).py") == "javascript%3Aalert%281%29.py"


@pytest.mark.unit
def test_a_page_shows_the_end_of_its_runs_output_within_lines_and_bytes() -> None:
    from infralens.build.render import SAMPLE_BYTES, SAMPLE_LINES, sample_lines

    assert sample_lines("a\nb\nc\n") == ["a", "b", "c"]
    many = "\n".join(f"line {n}" for n in range(100))
    assert sample_lines(many) == [f"line {n}" for n in range(100 - SAMPLE_LINES, 100)]
    wide = "\n".join("x" * 100 for _ in range(30))
    kept = sample_lines(wide)
    assert sum(len(line) + 1 for line in kept) <= SAMPLE_BYTES < sum(len(line) + 1 for line in kept) + 101
    assert sample_lines("y" * 5000) == ["y" * 5000]  # the last line is always shown, however long
