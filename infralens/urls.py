"""Where each page and file of a built site goes under output/: one place for every address."""

from __future__ import annotations

from urllib.parse import quote


def href(path: str) -> str:
    """Return a site path as a URL path: every character but letters, digits, '/', '.', '-', '_' and
    '~' percent-encoded, so a file name can never be read as a scheme, a query or a fragment."""
    return quote(path, safe="/")


def lab_url(lab_id: str) -> str:
    """Path of a lab page under output/."""
    return f"labs/{lab_id}/index.html"


def practice_url(lab_id: str) -> str:
    """Path of a lab's practice page (its questions) under output/."""
    return f"labs/{lab_id}/practice.html"


def source_url(starter_path: str) -> str:
    """Path of a starter's source view under output/."""
    return f"{starter_path}.html"


def artifact_url(lab_id: str, name: str) -> str:
    """Path under output/ of a file a lab's last run wrote."""
    return f"runs/{lab_id}/{name}"
