"""What a reader may type as a number: the table the build's reader (infralens.lab.questions) and the
page's (questions.js) are both held to, by tests/lab/test_questions.py and
tests/reader/test_browser_questions.py."""

from __future__ import annotations

READINGS: tuple[tuple[str, str | None, float | None], ...] = (
    ("2 GiB", "B", 2.0**31),
    ("2GiB", "B", 2.0**31),
    ("2.15e9", "B", 2.15e9),
    ("2,147,483,648", "B", 2147483648.0),
    ("2,147,483,648 B", "B", 2147483648.0),
    ("2 GB", "B", 2e9),
    ("1,024 bytes", "B", 1024.0),
    ("128.0 KiB", "B", 131072.0),
    ("  4.00 MiB ", "B", 4194304.0),
    ("37.5%", "%", 37.5),
    ("37.5", "%", 37.5),
    ("3.2x", "x", 3.2),
    ("3.2×", "x", 3.2),
    ("12 ms", "s", 0.012),
    ("12 µs", "s", 12e-6),
    ("0.083 FLOP/B", "FLOP/B", 0.083),
    ("83 mFLOP/B", "FLOP/B", 0.083),
    ("312 TFLOP/s", "FLOP/s", 312e12),
    ("2.1G", None, 2.1e9),
    ("-3", None, -3.0),
    ("+.5", None, 0.5),
    ("5.", None, 5.0),
    ("1_000", None, 1000.0),
    ("2\u202f147\u202f483\u202f648", "B", 2147483648.0),
    ("1,23", None, None),
    ("2 gb", "B", None),
    ("2 GiB", "FLOP", None),
    ("abc", None, None),
    ("", None, None),
    (".", None, None),
    ("1e400", None, None),
    ("1/12", None, None),
    ("2 GiB extra", "B", None),
    # Digits are ASCII: Python's int() and float() take Arabic-Indic or fullwidth ones, a page's Number() does not.
    ("٤٢", None, None),
    ("４２", None, None),
    ("４２ GiB", "B", None),
    ("1.٥", None, None),
)
"""What a reader may type, in a question's unit, and the number it reads as (None: not a number)."""
