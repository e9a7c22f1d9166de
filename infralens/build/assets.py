"""Theme assets: the files of templates/static/ as output/static/ serves them.

Pure: (file name, text) → text. Stylesheets and scripts are minified (rcssmin, rjsmin: comments
and layout whitespace go, names and behaviour stay), because every lab page loads them and a lab
page's budget is 60 KiB of HTML, CSS and JS together; the sources under templates/ stay readable.
Other files (images, fonts) are copied as they are.

rjsmin reads a template literal nested inside another's `${…}` as code and drops its spaces: the
scripts build such strings by concatenation instead (a test in tests/build/test_golden.py holds them to it).
"""

from __future__ import annotations

import rcssmin
import rjsmin

MINIFIED = (".css", ".js")
"""Kinds of theme file that are served minified."""


def minified(name: str, text: str) -> str:
    """Return a stylesheet or script as output/static/ serves it."""
    if name.endswith(".css"):
        return rcssmin.cssmin(text)
    if name.endswith(".js"):
        return rjsmin.jsmin(text)
    raise ValueError(f"{name} is neither a stylesheet nor a script")
