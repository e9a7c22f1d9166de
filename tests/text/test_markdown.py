"""The one Markdown parser: what a Markdown starter's headings, fences and code spans are."""

from __future__ import annotations

import pytest

from infralens.build.search import plain_text
from infralens.text.markdown import outline, python_blocks

pytestmark = pytest.mark.unit

NOTES = """\
# Notes

Call `decode(z)` first.

```python
# not a heading: inside a fence
x = 1
```

Chunking
--------

- a list item with a fence:

  ```py
  y = 2
  ```

~~~text
plain
~~~
"""


def test_headings_fences_and_code_spans_follow_commonmark() -> None:
    found = outline(NOTES)
    assert [(h.line, h.level, h.title) for h in found.headings] == [(1, 1, "Notes"), (10, 2, "Chunking")]
    assert [(f.line, f.language, f.code) for f in found.fences] == [
        (6, "python", "# not a heading: inside a fence\nx = 1\n"),
        (16, "py", "y = 2\n"),
        (20, "text", "plain\n"),
    ]
    assert found.code_spans == ("decode(z)",)


def test_python_blocks_keep_their_real_line_numbers() -> None:
    lines = NOTES.split("\n")
    blocks = python_blocks(NOTES)
    assert [line for line, _ in blocks] == [6, 16]
    for line, code in blocks:
        assert lines[line - 1].strip() == code.split("\n")[0].strip()


def test_plain_text_is_what_the_page_shows() -> None:
    assert plain_text("See [the paper](https://arxiv.org/abs/1) and `a * b`, **not** $2 \\times d$.") == (
        "See the paper and a * b, not 2 × d."
    )


def test_an_image_from_the_network_is_shown_as_a_link_and_a_local_one_as_an_image() -> None:
    from infralens.text.markdown import parser

    html = parser().renderInline("![px](https://evil.example/p.png) ![b](//evil.example/b.png) ![fig](fig.png)")
    assert "<img" in html and html.count("<img") == 1 and 'src="fig.png"' in html
    assert '<a href="https://evil.example/p.png">px</a>' in html and '<a href="//evil.example/b.png">b</a>' in html
