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
    assert lines[0] == '<span class=k>from</span> <span class=f>collections.abc</span> <span class=k>import</span> Callable'
    assert lines[1] == '<span class=k>import</span> <span class=f>torch.nn.functional</span> <span class=k>as</span> <span class=f>F</span>'
    assert lines[4] == '<span class=f>@torch.no_grad</span>()'
    assert lines[5] == '<span class=k>def</span> <span class=f>kv_bytes</span>(layers: <span class=b>int</span>) -&gt; <span class=b>int</span>:'
    assert lines[6] == '    <span class=s>&quot;&quot;&quot;Bytes per token.&quot;&quot;&quot;</span>'
    assert lines[7] == '    total = <span class=m>2</span> * layers  <span class=c># K and V</span>'
    # Replacement fields are code: a builtin inside one is a builtin; `{{` stays string.
    assert lines[8] == (
        '    <span class=b>print</span>(<span class=s>f&quot;{</span>total<span class=s>:,} of {</span>'
        '<span class=b>len</span>(<span class=b>self</span>.x)<span class=s>!r:&gt;8} {{literal}}&quot;</span>)'
    )
    # `@` between operands is matrix multiplication, not a decorator; exceptions are names of their own kind.
    assert lines[9] == '    <span class=k>return</span> q @ k.T <span class=k>if</span> layers <span class=k>else</span> <span class=f>ValueError</span>'


def test_every_character_is_kept_in_order() -> None:
    runs = python_runs(CODE)
    assert runs is not None and "".join(text for _, text in runs) == CODE


def test_a_file_the_tokenizer_refuses_falls_back_to_pygments() -> None:
    text = 's = """never closed\nx = 1\n'
    assert python_runs(text) is None
    lines, language = highlight_lines("broken.py", text)
    assert language == "Python" and lines[1] == '<span class=s>x = 1</span>'


def test_other_languages_use_pygments() -> None:
    lines, language = highlight_lines("notes.md", "# Title\n\nText with `code`.\n")
    assert language == "Markdown" and lines[0].startswith('<span class=h>')
