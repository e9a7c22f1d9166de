"""Highlighting: Python through the standard library's tokenizer, every other language through Pygments."""

from __future__ import annotations

import pytest

from infralens.text.highlight import highlight_lines, python_runs

pytestmark = pytest.mark.unit

CODE = '''\
from collections.abc import Callable
import torch.nn.functional as F


@torch.no_grad()
def kv_bytes(layers: int) -> int:
    """Bytes per token."""
    total = 2 * layers  # K and V
    print(f"{total:,} of {len(self.x)!r:>8} {{literal}}")
    return q @ k.T if layers else ValueError
'''


def test_python_gets_the_theme_kinds_of_each_token() -> None:
    lines, language = highlight_lines("kv.py", CODE)
    assert language == "Python"
    assert lines[0] == '<b class=k>from</b> <b class=f>collections.abc</b> <b class=k>import</b> Callable'
    assert lines[1] == '<b class=k>import</b> <b class=f>torch.nn.functional</b> <b class=k>as</b> <b class=f>F</b>'
    assert lines[4] == '<b class=f>@torch.no_grad</b>()'
    assert lines[5] == '<b class=k>def</b> <b class=f>kv_bytes</b>(layers: <b class=b>int</b>) -&gt; <b class=b>int</b>:'
    assert lines[6] == '    <b class=s>"""Bytes per token."""</b>'
    assert lines[7] == '    total = <b class=m>2</b> * layers  <b class=c># K and V</b>'
    # Replacement fields are code: a builtin inside one is a builtin; `{{` stays string.
    assert lines[8] == (
        '    <b class=b>print</b>(<b class=s>f"{</b>total<b class=s>:,} of {</b>'
        '<b class=b>len</b>(<b class=b>self</b>.x)<b class=s>!r:&gt;8} {{literal}}"</b>)'
    )
    # `@` between operands is matrix multiplication, not a decorator; exceptions are names of their own kind.
    assert lines[9] == '    <b class=k>return</b> q @ k.T <b class=k>if</b> layers <b class=k>else</b> <b class=f>ValueError</b>'


def test_every_character_is_kept_in_order() -> None:
    runs = python_runs(CODE)
    assert runs is not None and "".join(text for _, text in runs) == CODE


def test_a_file_the_tokenizer_refuses_falls_back_to_pygments() -> None:
    text = 's = """never closed\nx = 1\n'
    assert python_runs(text) is None
    lines, language = highlight_lines("broken.py", text)
    assert language == "Python" and lines[1] == '<b class=s>x = 1</b>'


def test_other_languages_use_pygments() -> None:
    lines, language = highlight_lines("notes.md", "# Title\n\nText with `code`.\n")
    assert language == "Markdown" and lines[0].startswith('<b class=h>')
