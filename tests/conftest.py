"""Shared fixtures and the --update-golden flag."""

from __future__ import annotations

import importlib.util
from contextlib import contextmanager
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="Rewrite tests/golden/ from the current build instead of comparing; review with git diff.",
    )


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return request.config.getoption("--update-golden")


def load_starter(path: Path) -> ModuleType:
    """Import a starter file as a module (named after its file) so tests can call its functions."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


@contextmanager
def torch_threads(count: int):
    """Run a block with torch on `count` threads, as several starters do, then restore the setting."""
    import torch  # here, so tests that never touch torch do not pay for importing it

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture
def one_thread():
    """Run the test's in-process torch work on one thread."""
    with torch_threads(1):
        yield


def run_infralens(*args: str, cwd: Path, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run the real command line, as a user would, and capture what it prints."""
    return subprocess.run(
        [sys.executable, "-m", "infralens", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def sample_site(tmp_path: Path) -> Path:
    """A private copy of tests/sites/sample to build and break."""
    target = tmp_path / "site"
    # Results or a build left in the sample by hand must not leak into the tests.
    shutil.copytree(TESTS / "sites" / "sample", target, symlinks=True, ignore=shutil.ignore_patterns(".infralens", "output"))
    return target


@pytest.fixture(scope="session")
def real_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository's own site, built once into a temporary folder; returns that folder."""
    out = tmp_path_factory.mktemp("real") / "output"
    result = run_infralens("build", "--out", str(out), cwd=REPO)
    assert result.returncode == 0, result.stderr
    return out


# --- Real Chromium --------------------------------------------------------------------------------
# Debian's /usr/bin/chromium, installed by scripts/install-browser-deps; Playwright's own browser
# download is never used. The flags keep Chromium from reaching for Google's hosts, which this
# machine's closed network refuses.

CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
]


@pytest.fixture(scope="session")
def chromium():
    """One headless Chromium for the whole session."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="session")
def site_url(real_site: Path):
    """The real site served over HTTP on 127.0.0.1, as a reader's browser would fetch it."""
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(real_site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class Tab:
    """A browser tab that records console errors, page errors and requests that leave the site."""

    def __init__(self, context, base: str) -> None:
        self.context = context
        self.base = base
        self.errors: list[str] = []
        self.external: list[str] = []
        self.page = context.new_page()
        self.page.on("console", lambda message: self.errors.append(message.text) if message.type == "error" else None)
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("request", self._request)

    def _request(self, request) -> None:
        if not (request.url.startswith(self.base) or request.url.startswith(("data:", "about:", "blob:"))):
            self.external.append(request.url)

    def goto(self, path: str):
        self.page.goto(self.base + path)
        return self.page


@pytest.fixture
def open_tab(chromium, site_url: str):
    """Open tabs on the served site: open_tab(width=1280, js=True, scheme='light') → Tab."""
    contexts = []

    def open_one(width: int = 1280, height: int = 900, js: bool = True, scheme: str = "light", **options) -> Tab:
        context = chromium.new_context(
            viewport={"width": width, "height": height}, java_script_enabled=js, color_scheme=scheme, **options
        )
        # Anything outside the site is refused, so a stray CDN link fails loudly instead of hanging.
        context.route(lambda url: not url.startswith(site_url), lambda route: route.abort())
        contexts.append(context)
        return Tab(context, site_url)

    yield open_one
    for context in contexts:
        context.close()


SCREENSHOTS = REPO / ".infralens" / "screenshots"
"""Where the browser tests leave their screenshots (git-ignored); the end of a run prints it."""


@pytest.fixture(scope="session")
def screenshot_dir() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS


def pytest_terminal_summary(terminalreporter) -> None:
    shots = sorted(SCREENSHOTS.glob("*.png")) if SCREENSHOTS.is_dir() else []
    if shots:
        terminalreporter.write_line(f"screenshots: {SCREENSHOTS} ({', '.join(p.name for p in shots)})")
