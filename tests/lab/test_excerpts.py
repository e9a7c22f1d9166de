"""Excerpt selection and line binding, on small in-memory starters."""

from __future__ import annotations

import pytest

from infralens.errors import Mark, Problems
from infralens.lab.resolve import Unbound, bind_lines, cut_excerpt, select_lines, slugify
from infralens.model.starter import KeyBlockSpec, LineBinding, Selector
from infralens.text.highlight import source_file

pytestmark = pytest.mark.unit

PY = '''import functools


# region setup
SIZE = 4
# endregion


@functools.cache
@staticmethod
def area(w, h):
    # region inner
    total = w * h
    # endregion
    return total


class Cache:
    def append(self, k, v):
        self.k = k
        self.v = v
'''

MD = """# Title

## Chunking

Text with a fenced block:

```python
# not a heading
x = 1
```

### Detail

More.

## Next

End.
"""


def select(text: str, path: str, kind: str, value: str):
    problems = Problems()
    found = select_lines(source_file(path, text), Selector(kind, value, Mark("lab.yml", 3, 5)), problems)
    return found, [str(p) for p in problems._items]


def test_region_is_the_lines_between_its_markers() -> None:
    assert select(PY, "s.py", "region", "setup") == ((5, 5), [])
    assert select(PY, "s.py", "region", "inner") == ((13, 13), [])


def test_missing_region_lists_the_regions_there() -> None:
    found, problems = select(PY, "s.py", "region", "tear-down")
    assert found is None
    assert problems == ["lab.yml:3:5: error: region 'tear-down' not found in s.py (regions there: 'setup', 'inner')"]


def test_unclosed_region_is_an_error() -> None:
    found, problems = select("# region a\nx = 1\n", "s.py", "region", "a")
    assert problems == ["lab.yml:3:5: error: region 'a' is never closed with '# endregion'\ns.py:1:1: note: region 'a' opens here"]


def test_a_stray_endregion_and_a_syntax_error_point_at_their_line_of_the_starter_in_a_note() -> None:
    found, problems = select("x = 1\n# endregion\n", "s.py", "region", "a")
    assert found is None
    assert problems == ["lab.yml:3:5: error: '# endregion' without a matching '# region' in s.py\ns.py:2:1: note: this '# endregion' closes no region"]
    found, problems = select("x = 1\ndef f(:\n", "s.py", "symbol", "f")
    assert found is None
    assert problems == ["lab.yml:3:5: error: cannot parse s.py: invalid syntax\ns.py:2:7: note: invalid syntax"]


def test_marker_text_inside_a_python_string_is_not_a_marker_but_a_comment_is() -> None:
    text = 'def f():\n    # region core\n    s = """\n# endregion\n# region core\n"""\n    # endregion\n    return s\n'
    assert select(text, "s.py", "region", "core") == ((3, 6), [])  # before: the string's lines closed and reopened it
    lines = cut_excerpt(source_file("s.py", text), 1, 8)
    assert [line.number for line in lines] == [1, 3, 4, 5, 6, 8]
    assert select("<!-- region a -->\nx\n<!-- endregion -->\n", "n.md", "region", "a") == ((2, 2), [])


def test_symbol_includes_decorators_and_nested_markers_are_hidden() -> None:
    found, _ = select(PY, "s.py", "symbol", "area")
    assert found == (9, 15)
    lines = cut_excerpt(source_file("s.py", PY), *found)
    assert [line.number for line in lines] == [9, 10, 11, 13, 15]


def test_dotted_symbol_selects_a_method() -> None:
    assert select(PY, "s.py", "symbol", "Cache.append") == ((19, 21), [])


def test_unknown_symbol_suggests_a_close_name() -> None:
    assert select(PY, "s.py", "symbol", "areas")[1] == ["lab.yml:3:5: error: symbol 'areas' not found in s.py (did you mean 'area'?)"]


def test_line_range_past_the_end_is_an_error() -> None:
    assert select(PY, "s.py", "lines", "19-21") == ((19, 21), [])
    assert select(PY, "s.py", "lines", "20-22")[1] == ["lab.yml:3:5: error: lines 20-22 are past the end of s.py (21 lines)"]


def test_heading_section_stops_at_the_next_heading_of_the_same_level() -> None:
    assert select(MD, "n.md", "heading", "Chunking") == ((3, 15), [])
    assert select(MD, "n.md", "heading", "Detail") == ((12, 15), [])


def test_a_hash_line_inside_a_code_fence_is_not_a_heading() -> None:
    assert select(MD, "n.md", "heading", "not a heading")[1] == ["lab.yml:3:5: error: heading 'not a heading' not found in n.md"]


def bind(lines, binding: LineBinding):
    """The lines bound, or the problem's message (at the key block's `lines:`)."""
    bound = bind_lines(lines, KeyBlockSpec(name="kb", lines=binding, note="note", mark=Mark("lab.yml", 9, 12), starter_mark=None), "s.py")
    if isinstance(bound, Unbound):
        assert bound.problem.mark == Mark("lab.yml", 9, 12)
        assert bound.several == ("quote more" in bound.problem.message)
        return bound.problem.message
    return bound


def test_binding_by_text_span_and_range() -> None:
    lines = cut_excerpt(source_file("s.py", PY), 9, 15)
    assert bind(lines, LineBinding(kind="text", text="total = w")) == (13, 13)
    assert bind(lines, LineBinding(kind="span", text="def area", until="return")) == (11, 15)
    assert bind(lines, LineBinding(kind="range", first=11, last=13)) == (11, 13)


@pytest.mark.parametrize(
    "binding, message",
    [
        (LineBinding(kind="text", text="total"), "key block 'kb': text 'total' matches 2 lines of the excerpt (lines 13, 15); quote more of the line so it matches exactly one"),
        (LineBinding(kind="text", text="SIZE"), "key block 'kb': text 'SIZE' matches no line of the excerpt (s.py:9-15)"),
        (LineBinding(kind="range", first=5, last=9), "key block 'kb': lines 5-9 are outside the excerpt (s.py:9-15)"),
        (LineBinding(kind="range", first=12, last=13), "key block 'kb': lines 12-13 start or end on a hidden marker line"),
        (LineBinding(kind="span", text="def area", until="yield"), "key block 'kb': 'to' text 'yield' matches no line at or after line 11 of the excerpt (s.py:9-15)"),
    ],
)
def test_binding_errors_say_what_went_wrong(binding: LineBinding, message: str) -> None:
    lines = cut_excerpt(source_file("s.py", PY), 9, 15)
    assert bind(lines, binding) == message


def test_slugs_are_stable_fragment_ids() -> None:
    assert slugify("Setup / contract") == "setup-contract"
    assert slugify("param_bytes / grad_bytes") == "param_bytes-grad_bytes"
    assert slugify("???") == "block"


def test_highlighting_keeps_one_html_line_per_file_line() -> None:
    source = source_file("s.py", 'x = """a\nb"""\n\n')
    assert [line.text for line in source.lines] == ['x = """a', 'b"""', ""]
    assert all("\n" not in line.html for line in source.lines)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("text", "lines"),
    [
        ("# region a\nx = 1\n# endregion\n", [1, 3]),
        ('s = """\n# region in_a_string\n"""\n# region out\n# endregion\n', [4, 5]),  # the tokenizer decides
        ('v = ("a"\n  # region between_literals\n  "b")\n', [2]),  # inside a joined string's lines, still a comment
        ("x = (a\n// region floor_division\n)\n# region real\n", [4]),  # `//` is code in Python
        ("def f(:\n# region unparsed\n", [2]),  # a file that does not parse: every marker-shaped line counts
    ],
)
def test_python_region_markers_are_comments_whether_or_not_the_tokenizer_is_asked(text: str, lines: list[int]) -> None:
    from infralens.text.regions import _python_comment_lines, region_markers

    assert [marker.line for marker in region_markers("x.py", text)] == lines
    comments = _python_comment_lines(text)
    if comments is not None:  # the tokenizer, asked directly, agrees
        assert [line for line in lines if line in comments] == lines
