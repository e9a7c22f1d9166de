"""Shared fixtures, the --update-golden flag, the test kinds (markers) and a private cache folder.

The repository's project is read by the session fixture `project`, never at a module's import: a
broken manifest then fails the tests that read it, with its own error, instead of stopping the
collection of every module. What collection must know before then (the labs, which of them declare
calculators, the runs of their starters) is read from the names and the plain YAML of labs/*.yml.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from infralens.build import Project, load_project
from infralens.model.lab import Lab
from infralens.model.resolved import ResolvedLab

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"

KINDS = ("unit", "cli", "browser", "starters", "hostile")
"""The markers of pyproject.toml; every test carries exactly one, so `-m` can split the suite."""

CACHE_ENV = "INFRALENS_CACHE_DIR"
"""Where infralens keeps its caches (highlighting, compiled templates, run results) when set."""

_SESSION_CACHE = pytest.StashKey[tuple[Path, str | None]]()
_SCREENSHOTS = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    """Point infralens's caches at a fresh folder for the session, so no test writes into the repository.

    Set in the environment, so every `infralens` subprocess inherits it too. A folder the user
    chose (INFRALENS_CACHE_DIR already set) is kept.
    """
    # Hypothesis would keep its example database and caches in .hypothesis/ of the working folder.
    import hypothesis.configuration

    fuzz = Path(tempfile.mkdtemp(prefix="infralens-test-hypothesis-"))
    hypothesis.configuration.set_hypothesis_home_dir(fuzz)
    config.add_cleanup(lambda: shutil.rmtree(fuzz, ignore_errors=True))
    before = os.environ.get(CACHE_ENV)
    if before:
        return
    folder = Path(tempfile.mkdtemp(prefix="infralens-test-cache-"))
    config.stash[_SESSION_CACHE] = (folder, before)
    os.environ[CACHE_ENV] = str(folder)


def pytest_unconfigure(config: pytest.Config) -> None:
    folder, before = config.stash.get(_SESSION_CACHE, (None, None))
    if folder is None:
        return
    if before is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = before
    shutil.rmtree(folder, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects anything, so every collected test is checked
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse the run if a test carries no kind marker, or more than one."""
    wrong = []
    for item in items:
        kinds = sorted({mark.name for mark in item.iter_markers()} & set(KINDS))
        if len(kinds) != 1:
            wrong.append(f"  {item.nodeid}: {', '.join(kinds) or 'no kind marker'}")
    if wrong:
        raise pytest.UsageError(
            f"every test must carry exactly one of the markers {', '.join(KINDS)} (see pyproject.toml); "
            "add `pytestmark = pytest.mark.<kind>` to the module or mark the test itself:\n" + "\n".join(wrong)
        )


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
    """Import a starter file as a module (named after its file) so tests can call its functions.

    A starter already imported is returned as it is: a second copy would replace the first in
    sys.modules, and functions of the first could no longer be pickled to a spawned process.
    """
    loaded = sys.modules.get(path.stem)
    if loaded is not None and getattr(loaded, "__file__", None) == str(path):
        return loaded
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses look their module up while the file executes
    writes_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no __pycache__ in code/
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = writes_bytecode
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


def add_starter(site: Path, name: str, code: str, run: str = "{}", role: str = "Tries something.") -> None:
    """Give lab 01 of a sample site copy one more starter, `code/lab-01-sample/<name>`, run with `run`."""
    (site / "code/lab-01-sample" / name).write_text(code)
    manifest = site / "labs/lab-01-sample.yml"
    entry = f"  - path: code/lab-01-sample/{name}\n    role: {role}\n    run: {run}\n"
    manifest.write_text(manifest.read_text().replace("preview:\n", entry + "preview:\n", 1))


def run_of(report: Path, name: str) -> dict:
    """The result of the starter called `name` in a `check --json` report."""
    import json

    return next(run for run in json.loads(report.read_text())["results"] if run["starter"].endswith(f"/{name}"))


@pytest.fixture
def sample_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy of tests/sites/sample to build and break, with its own cache folder.

    The cache is the copy's own `.infralens/` (the default place), so results and caches of one
    test never show up in another, and a test can look into them.
    """
    target = tmp_path / "site"
    # Results or a build left in the sample by hand must not leak into the tests.
    shutil.copytree(TESTS / "sites" / "sample", target, symlinks=True, ignore=shutil.ignore_patterns(".infralens", "output"))
    monkeypatch.setenv(CACHE_ENV, str(target / ".infralens"))
    return target


@pytest.fixture(scope="session")
def project() -> Project:
    """The repository's project (site.yml, every manifest and starter), read and parsed once a session."""
    return load_project(REPO / "site.yml")


@pytest.fixture(scope="session")
def resolved(project: Project) -> dict[str, ResolvedLab]:
    """Every lab of the repository's project resolved (its excerpt, key blocks and state), by lab id."""
    from infralens.build.memory import resolve  # the page stack: loaded only where a test resolves labs

    return {lab.lab.id: lab for lab in resolve(project)}


@pytest.fixture(scope="session")
def sample_project() -> Project:
    """tests/sites/sample read and parsed once a session; to build or break it, use `sample_site`."""
    return load_project(TESTS / "sites" / "sample" / "site.yml")


def lab_of(project: Project, lab_id: str) -> Lab:
    """The lab of the project with this id (a KeyError names an id the project lacks)."""
    return {lab.id: lab for lab in project.labs}[lab_id]


@pytest.fixture
def lab(request: pytest.FixtureRequest, project: Project) -> Lab:
    """The repository's lab a test is parametrized with by id: `parametrize("lab", lab_ids(), indirect=True)`."""
    return lab_of(project, request.param)


# --- The repository's labs as collection sees them, before anything is parsed ---------------------


def lab_ids() -> list[str]:
    """The repository's lab ids in number order: the names of labs/*.yml (a lab's id is its file's)."""
    return sorted(path.stem for path in (REPO / "labs").glob("*.yml"))


def manifest_data() -> dict[str, dict]:
    """Each of labs/*.yml as plain YAML data, by lab id: read, not validated.

    A manifest that is not a YAML mapping is left out here; the `project` fixture reports its error.
    """
    data = {}
    for lab_id in lab_ids():
        try:
            loaded = yaml.safe_load((REPO / "labs" / f"{lab_id}.yml").read_text(encoding="utf-8"))
        except yaml.YAMLError:
            continue
        if isinstance(loaded, dict):
            data[lab_id] = loaded
    return data


def declared_starters() -> list[str]:
    """The path of every starter the manifests list, in lab order."""
    return [
        starter["path"]
        for manifest in manifest_data().values()
        for starter in manifest.get("starters") or []
        if isinstance(starter, dict) and isinstance(starter.get("path"), str)
    ]


def calculator_labs() -> list[str]:
    """The ids of the labs whose manifests declare calculators, in number order."""
    return [lab_id for lab_id, manifest in manifest_data().items() if manifest.get("calculators")]


@pytest.fixture(scope="session")
def real_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository's own site, built once into a temporary folder; returns that folder.

    Its caches go to the session's INFRALENS_CACHE_DIR (pytest_configure), not into the repository.
    """
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


@contextmanager
def served(folder: Path):
    """Serve a built site over HTTP on 127.0.0.1, as a reader's browser would fetch it; yields its URL."""
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def checked_and_served(tmp_path_factory: pytest.TempPathFactory, name: str):
    """tests/sites/NAME copied to a temporary folder, checked (so what its pages show from runs is
    there) and built with the real commands, then served; yields its URL."""
    import shutil

    site = tmp_path_factory.mktemp(name) / "site"
    shutil.copytree(TESTS / "sites" / name, site, ignore=shutil.ignore_patterns(".infralens", "output"))
    env = {"INFRALENS_CACHE_DIR": str(site / ".infralens")}
    checked = run_infralens("check", cwd=site, env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    built = run_infralens("build", "--out", "out", cwd=site, env=env)
    assert built.returncode == 0, built.stderr
    with served(site / "out") as url:
        yield url


@pytest.fixture(scope="session")
def site_url(real_site: Path):
    """The real site served over HTTP on 127.0.0.1."""
    with served(real_site) as url:
        yield url


AXE = TESTS / "browser" / "node_modules" / "axe-core" / "axe.min.js"
"""axe-core, installed by scripts/install-browser-deps (npm, pinned in tests/browser/package-lock.json)."""


def axe_violations(page) -> list[str]:
    """Run axe-core on the page as it is now; one line per violation (rule, impact, help, first targets)."""
    assert AXE.is_file(), "axe-core is missing: run scripts/install-browser-deps"
    page.add_script_tag(path=str(AXE))
    result = page.evaluate("axe.run(document, {resultTypes: ['violations']})")
    return [
        f"{v['id']} ({v['impact']}): {v['help']} — {[node['target'] for node in v['nodes']][:5]}"
        for v in result["violations"]
    ]


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

    def reader(self):
        """Wait for the reader (static/reader.js), which loads when a reader first reaches for the
        code or the notes (here: the pointer moves over the code) or follows a link to a line."""
        self.page.hover("pre.code")
        self.page.wait_for_function("window.InfraLensReader === true")
        return self.page


@contextmanager
def tabs_on(chromium, site_url: str):
    """Yield open(width=1280, js=True, scheme='light') → Tab, for tabs on a served site; closes them after."""
    contexts = []

    def open_one(width: int = 1280, height: int = 900, js: bool = True, scheme: str = "light", **options) -> Tab:
        context = chromium.new_context(
            viewport={"width": width, "height": height}, java_script_enabled=js, color_scheme=scheme, **options
        )
        # Anything outside the site is refused, so a stray CDN link fails loudly instead of hanging.
        context.route(lambda url: not url.startswith(site_url), lambda route: route.abort())
        contexts.append(context)
        return Tab(context, site_url)

    try:
        yield open_one
    finally:
        for context in contexts:
            context.close()


@pytest.fixture
def open_tab(chromium, site_url: str):
    """Open tabs on the served real site: open_tab(width=1280, js=True, scheme='light') → Tab."""
    with tabs_on(chromium, site_url) as open_one:
        yield open_one


@pytest.fixture(scope="session")
def screenshot_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the browser tests leave their screenshots: `screenshots/` under pytest's basetemp.

    pytest keeps the basetemp of its last few runs; the end of a run prints the folder.
    """
    folder = tmp_path_factory.mktemp("screenshots", numbered=False)
    request.config.stash[_SCREENSHOTS] = folder
    return folder


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    folder = config.stash.get(_SCREENSHOTS, None)
    shots = sorted(folder.glob("*.png")) if folder is not None else []
    if shots:
        terminalreporter.write_line(f"screenshots: {folder} ({', '.join(p.name for p in shots)})")
