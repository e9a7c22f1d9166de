"""Highlighting: Python through the standard library's tokenizer, every other language through Pygments."""

from __future__ import annotations

from pathlib import Path

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


TRICKY_PYTHON = [
    'x = rb"a\\"b" + Rb\'\'\'c\nd\'\'\' + f"{x!r:>{w}}" + u"é"\n',
    "total = (1 +\n         # a comment inside brackets\n         2)  ; y = 3\n",
    "s = 'a\\\ncontinued'\nif x: \\\n    pass\n",
    "@a.b.c(d)\nclass K(Base):\n    def __init__(self, *a, **k) -> None: ...\n",
    "from .pkg.mod import (a as b,\n    c)\nimport os.path, sys\n",
    "n = 0x_ff + 0o17 + 0b1_0 + 1_000.5e-3j + .5 + 1. ; m = x @ y; z @= w; q = (v := 3)\n",
    "async def f():\n    await g()\n\tx = 1\n" .replace("\tx = 1\n", "    return [i async for i in h()]\n"),
    "match p:\n    case [1, *rest] if rest:\n        pass\n    case _:\n        pass\n",
    "x = 1\r\ny = '''a\r\nb'''\r\n\x0cz = 2\n",
    "print(1)",  # no line break at the end
    "\n\n# only comments\n   # indented comment\n",
]


def _runs(text: str, scanned: bool, monkeypatch) -> list:
    from infralens.text import highlight

    with monkeypatch.context() as patch:
        if not scanned:
            patch.setattr(highlight, "scanned_tokens", lambda text: None)
        return highlight.merged(highlight.python_runs(text) or [])


@pytest.mark.unit
def test_a_parsed_file_is_scanned_into_the_runs_the_tokenizer_gives(monkeypatch, project) -> None:
    # A file that parses is read by one regular expression instead of the standard library's
    # tokenizer; every starter, these tricky cases and a spread of the standard library's own
    # modules must give the same runs both ways (the whole standard library did, 13,456 files).
    import ast
    import sysconfig

    from infralens.text.highlight import scanned_tokens

    stdlib = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[::4]
    texts = [*TRICKY_PYTHON, *(s.text for path, s in project.sources.items() if path.endswith(".py")), *(p.read_text(encoding="utf-8") for p in stdlib)]
    compared = 0
    for text in texts:
        ast.parse(text)  # each is valid Python: the scanner is only for those
        assert scanned_tokens(text) is not None, text[:80]
        assert _runs(text, True, monkeypatch) == _runs(text, False, monkeypatch), text[:80]
        compared += 1
    assert compared > 60


@pytest.mark.unit
def test_text_the_scanner_does_not_know_is_left_to_the_tokenizer() -> None:
    from infralens.text.highlight import scanned_tokens

    assert scanned_tokens("x = 1 $ 2\n") is None  # not Python: never guessed at
    assert scanned_tokens("s = 'open\n") is None
