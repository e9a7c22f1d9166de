"""Serve: build, serve output/ on 127.0.0.1, rebuild what an input change affects, reload open pages.

The server is the only long-lived part of InfraLens. A failed rebuild keeps the last good site
on disk (build never touches output/ on error) and shows its `path:line:col` errors in every page
until a later rebuild succeeds. Pages learn about rebuilds by polling a small JSON endpoint; the
script doing it is added to pages as they are served, never written into output/.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from html import escape
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from infralens.build import build, update
from infralens.errors import InputError

STATE_PATH = "/__infralens/state"
WATCHED = ("site.yml", "labs", "code", "templates")

RELOAD_SCRIPT = """<script>
(function () {
  var seen = null;
  function poll() {
    fetch("%s", {cache: "no-store"}).then(function (r) { return r.json(); }).then(function (s) {
      if (seen !== null && s.version !== seen) { location.reload(); return; }
      seen = s.version;
      setTimeout(poll, 400);
    }).catch(function () { setTimeout(poll, 1000); });
  }
  poll();
})();
</script>""" % STATE_PATH


@dataclass
class BuildState:
    """What the last build said; shared between the watcher and request threads."""

    version: int = 0
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, errors: list[str], seconds: float) -> None:
        with self.lock:
            self.version += 1
            self.errors = errors
            self.seconds = seconds

    def snapshot(self) -> dict:
        with self.lock:
            return {"version": self.version, "errors": list(self.errors), "seconds": round(self.seconds, 4)}


def snapshot_inputs(root: Path) -> dict[str, float]:
    """Return the modification time of every watched file, to notice edits, additions and removals."""
    stamps = {}
    for name in WATCHED:
        path = root / name
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else []
        for file in files:
            if "__pycache__" in file.parts:
                continue
            try:
                stamps[str(file)] = file.stat().st_mtime_ns
            except FileNotFoundError:
                continue
    return stamps


def affected_labs(root: Path, changed: set[str]) -> frozenset[str] | None:
    """Return the labs whose starters alone changed, or None when the change needs a full build.

    A file under code/<lab-id>/ can only change that lab's page, its source views and the index's
    run status; a manifest, site.yml or template change can change every page (the navigation).
    """
    labs = set()
    for path in changed:
        parts = Path(path).relative_to(root).parts
        if len(parts) < 3 or parts[0] != "code" or not (root / "labs" / f"{parts[1]}.yml").is_file():
            return None
        labs.add(parts[1])
    return frozenset(labs)


def rebuild(site_path: Path, out_dir: Path, state: BuildState, log, changed: set[str] | None = None) -> None:
    """Build once, or only the affected pages when the last build succeeded, and record the outcome."""
    started = time.perf_counter()
    labs = affected_labs(site_path.parent, changed) if changed and not state.snapshot()["errors"] and state.version else None
    try:
        if labs:
            summary = update(site_path, out_dir, labs)
            log(f"updated {summary.pages} pages of {', '.join(sorted(labs))} in {summary.seconds * 1000:.0f} ms")
        else:
            summary = build(site_path, out_dir)
            log(f"rebuilt {summary.labs} labs in {summary.seconds * 1000:.0f} ms")
        errors = []
    except InputError as exc:
        errors = [str(problem) for problem in exc.problems]
        for line in errors:
            log(line)
    state.record(errors, time.perf_counter() - started)


def error_banner(errors: list[str]) -> str:
    """The banner a page shows while the last rebuild failed (visible without JavaScript too)."""
    items = "".join(f"<li><code>{escape(line)}</code></li>" for line in errors)
    return (
        '<div role="alert" style="position:sticky;top:0;z-index:100;background:#7a1f1f;color:#fff;'
        'padding:0.8rem 1.2rem;font:14px/1.5 system-ui,sans-serif">'
        "<strong>infralens serve: the last rebuild failed; this is the last good page.</strong>"
        f'<ul style="margin:0.4rem 0 0;padding-left:1.2rem">{items}</ul></div>'
    )


class Handler(SimpleHTTPRequestHandler):
    """Serves output/, the state endpoint, and HTML with the reload script and any error banner."""

    def __init__(self, *args, state: BuildState, directory: str, **kwargs) -> None:
        self.state = state
        super().__init__(*args, directory=directory, **kwargs)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        pass  # the terminal shows rebuilds, not every request

    def do_GET(self) -> None:
        if self.path.split("?")[0] == STATE_PATH:
            return self.send_body(json.dumps(self.state.snapshot()).encode(), "application/json")
        path = Path(self.translate_path(self.path))
        if path.is_dir():
            path = path / "index.html"
        if path.suffix == ".html" and path.is_file():
            html = path.read_text(encoding="utf-8")
            errors = self.state.snapshot()["errors"]
            banner = error_banner(errors) if errors else ""
            body_open = html.find(">", html.find("<body")) + 1
            html = html[:body_open] + banner + html[body_open:]
            html = html.replace("</body>", RELOAD_SCRIPT + "</body>", 1)
            return self.send_body(html.encode(), "text/html; charset=utf-8")
        errors = self.state.snapshot()["errors"]
        if errors and not path.exists():
            # No good build to fall back on yet: the errors are the page.
            page = f"<!doctype html><title>Build failed</title><body>{error_banner(errors)}{RELOAD_SCRIPT}</body>"
            return self.send_body(page.encode(), "text/html; charset=utf-8")
        return super().do_GET()

    def send_body(self, body: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)


def serve(site_path: Path, out_dir: Path, port: int, log, ready=None, stop: threading.Event | None = None) -> None:
    """Build, serve and watch until `stop` is set (or forever)."""
    root = site_path.parent
    state = BuildState()
    # Stamps taken before the first build: an edit made while it runs is then seen as a change.
    stamps = snapshot_inputs(root)
    rebuild(site_path, out_dir, state, log)
    out_dir.mkdir(parents=True, exist_ok=True)
    handler = partial(Handler, state=state, directory=str(out_dir.resolve()))
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    if ready:
        ready(f"http://127.0.0.1:{server.server_address[1]}/")
    stop = stop or threading.Event()
    try:
        while not stop.wait(0.25):
            current = snapshot_inputs(root)
            if current != stamps:
                changed = {path for path in current.keys() | stamps.keys() if current.get(path) != stamps.get(path)}
                stamps = current
                rebuild(site_path, out_dir, state, log, changed)
    finally:
        server.shutdown()
        server.server_close()
