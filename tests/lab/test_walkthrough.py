"""Walkthroughs: a preview of several excerpts from one or several starters, in order, with notes
bound to any of them by the same strict rules (tests/sites/walkthrough)."""

from __future__ import annotations

import pytest
from conftest import TESTS

from infralens.errors import InputError, Problems
from infralens.lab.resolve import plain_excerpt, resolve_excerpt
from infralens.lab.state import traced_spans
from infralens.model.parse import parse_lab
from infralens.text.highlight import source_file

pytestmark = pytest.mark.unit

SITE = TESTS / "sites" / "walkthrough"
MANIFEST = "labs/lab-01-walk.yml"
DECODE, CACHE = "code/lab-01-walk/decode.py", "code/lab-01-walk/cache.py"
TEXTS = {path: (SITE / path).read_text() for path in (DECODE, CACHE)}


def lab(text: str | None = None):
    return parse_lab(MANIFEST, "lab-01-walk", text if text is not None else (SITE / MANIFEST).read_text())


def resolved(text: str | None = None):
    problems = Problems()
    excerpt = resolve_excerpt(lab(text), {path: source_file(path, body) for path, body in TEXTS.items()}, problems)
    return excerpt, [str(p) for p in problems]


def test_each_step_is_an_excerpt_of_its_own_with_its_file_prefix() -> None:
    excerpt, problems = resolved()
    assert problems == []
    assert [(p.starter, p.title, p.first, p.last, p.prefix) for p in excerpt.parts] == [
        (DECODE, "Prefill", 6, 9, ""),
        (DECODE, "Decode step", 12, 15, ""),
        (CACHE, "Cache append", 9, 12, "s2-"),
    ]
    assert excerpt.walkthrough and excerpt.starter == DECODE
    assert [line.number for line in excerpt.lines] == [6, 7, 8, 9, 12, 13, 14, 15]  # the previewed starter's
    assert [(b.name, b.part, b.starter, b.first, b.last) for b in excerpt.key_blocks] == [
        ("Prompt loop", 0, DECODE, 7, 7),
        ("One more row", 1, DECODE, 13, 13),
        ("attended", 1, DECODE, 14, 14),
        ("append", 2, CACHE, 10, 12),
    ]


def test_only_the_previewed_starters_lines_are_traced() -> None:
    excerpt, _ = resolved()
    assert traced_spans(lab(), excerpt) == ((6, 9), (12, 15))
    assert traced_spans(lab(), plain_excerpt(lab(), TEXTS)) == ((6, 9), (12, 15))


def with_blocks(blocks: str) -> str:
    text = (SITE / MANIFEST).read_text()
    head, tail = text.split("key_blocks:\n")
    return (head + "key_blocks:\n" + blocks + "checkpoints:" + tail.split("checkpoints:", 1)[1]).split("questions:")[0]


def test_a_text_on_lines_of_two_steps_is_an_error_that_says_how_to_choose() -> None:
    _, problems = resolved(with_blocks('  - {name: twice, lines: "length = cache.append(token * 2.0, token * 3.0)", note: N.}\n'))
    assert problems == [
        f"{MANIFEST}:18:26: error: key block 'twice': its lines match in 2 steps (step 1 ({DECODE}, line 8); "
        f"step 2 ({DECODE}, line 13)); quote more of the line or give its line number"
    ]
    _, problems = resolved(with_blocks('  - {name: twice, lines: "9", note: N.}\n'))
    assert problems == [
        f"{MANIFEST}:18:26: error: key block 'twice': its lines match in 2 steps (step 1 ({DECODE}, line 9); "
        f"step 3 ({CACHE}, line 9)); quote more of the line or name its file with `starter:`"
    ]
    excerpt, problems = resolved(with_blocks(f'  - {{name: once, lines: "9", starter: {CACHE}, note: N.}}\n'))
    assert problems == [] and (excerpt.key_blocks[0].starter, excerpt.key_blocks[0].first) == (CACHE, 9)


def test_a_text_no_step_shows_names_every_step() -> None:
    _, problems = resolved(with_blocks('  - {name: nowhere, lines: "no such text", note: N.}\n'))
    assert problems == [
        f"{MANIFEST}:18:28: error: key block 'nowhere': text 'no such text' matches no line of the walkthrough "
        f"({DECODE}:6-9, {DECODE}:12-15, {CACHE}:9-12)"
    ]


def test_a_key_block_starter_must_be_a_step_of_the_preview() -> None:
    with pytest.raises(InputError) as caught:
        lab(with_blocks('  - {name: x, lines: "9", starter: code/lab-01-walk/other.py, note: N.}\n'))
    assert [str(p) for p in caught.value.problems] == [
        f"{MANIFEST}:18:36: error: key block 'x': starter 'code/lab-01-walk/other.py' is not a step of the preview ('{DECODE}', '{CACHE}')"
    ]


def test_two_steps_of_one_file_may_not_overlap() -> None:
    text = (SITE / MANIFEST).read_text().replace("symbol: decode_step", "lines: '8-13'")
    _, problems = resolved(text)
    assert problems == [f"{MANIFEST}:15:50: error: step 2 (lines 8-13 of {DECODE}) overlaps step 1 (lines 6-9); a line is shown once"]


def test_state_names_on_another_files_note_are_an_error() -> None:
    _, problems = resolved(with_blocks('  - {name: append, lines: "self.keys.append(key)", state: [key], note: N.}\n'))
    assert problems == [f"{MANIFEST}:18:60: error: state: key block 'append' is bound to {CACHE}, and only the previewed starter ({DECODE}) records execution state"]


def test_a_single_preview_is_a_walkthrough_of_one_step() -> None:
    text = (SITE / MANIFEST).read_text()
    head, tail = text.split("preview:\n")
    single = head + f"preview:\n  starter: {DECODE}\n  symbol: decode_step\nkey_blocks:\n" + '  - {name: attended, lines: "attended =", note: N.}\n' + "checkpoints:" + tail.split("checkpoints:", 1)[1]
    single = single.split("questions:")[0]
    excerpt, problems = resolved(single)
    assert problems == [] and not excerpt.walkthrough
    assert [(p.starter, p.prefix) for p in excerpt.parts] == [(DECODE, "")]
