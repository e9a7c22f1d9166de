"""Serve: build, serve output/ on 127.0.0.1, rebuild what an edit touched, reload open pages.

The server is the only long-lived part of InfraLens. It keeps one build Session for its whole life,
so an edit re-reads the inputs but re-parses and re-renders only the labs whose inputs changed,
whichever folder the changed file is in (owners are decided from the manifests). It learns of
edits from the operating system (watchfiles: inotify on Linux), never by polling the disk. A failed
rebuild keeps the last good site on disk (a build never touches output/ on error) and shows its
`path:line:col` errors in every page until a later rebuild succeeds. Pages learn about rebuilds
by polling a small JSON endpoint; the script doing it is added to pages as they are served, never
written into output/.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from infralens.build import Session, build, renderer_for
from infralens.errors import InputError
from infralens.workspace import Workspace

STATE_PATH = "/__infralens/state"
WATCHED_FOLDERS = ("labs", "code", "templates")
SETTLE_MS = 20
"""How long to wait for more events once one arrived: an editor's save is often several events."""


@dataclass
class BuildState:
    """What the last build said, and the overlay pages get; shared between the watcher and request threads."""

    version: int = 0
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    overlay: tuple[str, str, str] = ("", "", "")
    """(error banner, reload script, failed page) as rendered from the theme's serve/ templates."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, errors: list[str], seconds: float, overlay: tuple[str, str, str]) -> None:
        with self.lock:
            self.version += 1
            self.errors = errors
            self.seconds = seconds
            self.overlay = overlay

    def snapshot(self) -> dict:
        with self.lock:
            return {"version": self.version, "errors": list(self.errors), "seconds": round(self.seconds, 4)}


def rebuild(ws: Workspace, session: Session, state: BuildState, log) -> None:
    """Build once, redoing only what changed since the last build of this session, and record the outcome."""
    started = time.perf_counter()
    try:
        summary = build(ws, session=session)
        verb = "built" if not state.version else "rebuilt"
        log(f"{verb} {summary.rendered} of {summary.labs} labs ({summary.pages} pages, {summary.files} other files) in {summary.seconds * 1000:.0f} ms")
        # Keep in memory what a site of this size needs between edits, and no more.
        ws.memory_limit = 8 * summary.labs + 64
        errors = []
    except InputError as exc:
        errors = [str(problem) for problem in exc.problems]
        for line in errors:
            log(line)
    state.record(errors, time.perf_counter() - started, overlay(ws, session, errors))


def overlay(ws: Workspace, session: Session, errors: list[str]) -> tuple[str, str, str]:
    """Render the error banner and the reload script from the theme, with the build's own renderer."""
    return renderer_for(session.theme(ws)).render_serve_overlay(errors, STATE_PATH)


class Handler(SimpleHTTPRequestHandler):
    """Serves output/, the state endpoint, and HTML with the reload script and any error banner.

    A development server on loopback, made safe for what a browser can be tricked into sending it:
    a Host header other than the loopback one is refused (DNS rebinding), a path that cannot name a
    file (a NUL byte) gets 400 instead of a dropped connection, a folder without its trailing slash
    is redirected so the page's relative links work, HEAD answers as GET would, and a client that
    stalls is dropped after `timeout` seconds instead of holding a thread for good.
    """

    timeout = 30

    def __init__(self, *args, state: BuildState, directory: str, **kwargs) -> None:
        self.state = state
        super().__init__(*args, directory=directory, **kwargs)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        pass  # the terminal shows rebuilds, not every request

    def do_GET(self) -> None:
        self.answer(head=False)

    def do_HEAD(self) -> None:
        self.answer(head=True)

    def answer(self, head: bool) -> None:
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0].strip("[]").lower()
        if host not in ("127.0.0.1", "localhost", "::1"):
            return self.send_error(421, "infralens serve answers only requests for 127.0.0.1 or localhost")
        if self.path.split("?")[0] == STATE_PATH:
            return self.send_body(json.dumps(self.state.snapshot()).encode(), "application/json", head)
        with self.state.lock:
            banner, script, failed = self.state.overlay
            errors = bool(self.state.errors)
        translated = self.translate_path(self.path)
        if "\x00" in translated:  # no file has that name, and open() would raise
            return self.send_error(400, "bad path")
        path = Path(translated)
        is_dir, is_file, exists = path.is_dir(), path.is_file(), path.exists()
        if is_dir and not self.path.split("?")[0].endswith("/"):
            self.send_response(301)
            self.send_header("Location", self.path.split("?")[0] + "/")
            self.send_header("Content-Length", "0")
            return self.end_headers()
        if is_dir:
            path = path / "index.html"
            is_file = path.is_file()
        if path.suffix == ".html" and is_file:
            html = path.read_text(encoding="utf-8")
            body_open = html.find(">", html.find("<body")) + 1
            html = html[:body_open] + (banner if errors else "") + html[body_open:]
            html = html.replace("</body>", script + "</body>", 1)
            return self.send_body(html.encode(), "text/html; charset=utf-8", head)
        if errors and not exists:
            # No good build to fall back on yet: the errors are the page.
            return self.send_body(failed.encode(), "text/html; charset=utf-8", head)
        return super().do_HEAD() if head else super().do_GET()

    def send_body(self, body: bytes, content_type: str, head: bool = False) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if not head:
            self.wfile.write(body)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
    """A real listen backlog (the kernel caps it at net.core.somaxconn): a page asks for its CSS, JS
    and images at once, several tabs at a time, and a link checker or a load test asks for hundreds."""


def watch(ws: Workspace, events: "queue.Queue[set[str]]", stop: threading.Event) -> list[threading.Thread]:
    """Start watching the inputs: labs/, code/, templates/ recursively and site.yml; changed paths go to `events`."""
    import watchfiles

    def relay(paths: list[Path], recursive: bool, wanted) -> None:
        for changes in watchfiles.watch(*paths, stop_event=stop, step=SETTLE_MS, debounce=400, recursive=recursive, raise_interrupt=False, rust_timeout=500):
            changed = {path for _, path in changes if wanted(path)}
            if changed:
                events.put(changed)

    folders = [ws.root / name for name in WATCHED_FOLDERS if (ws.root / name).is_dir()]
    site_name = ws.site_file.name
    threads = [
        threading.Thread(target=relay, args=(folders, True, lambda path: True), daemon=True),
        threading.Thread(target=relay, args=([ws.root], False, lambda path: Path(path).name == site_name), daemon=True),
    ]
    for thread in threads:
        thread.start()
    return threads


def serve(site_path: Path, out_dir: Path, port: int, log, ready=None, stop: threading.Event | None = None, cache_dir: Path | None = None) -> None:
    """Build, serve and watch until `stop` is set (or forever)."""
    ws = Workspace.open(site_path, out_dir, cache_dir)
    session = Session(keep_state=True)
    state = BuildState()
    stop = stop or threading.Event()
    events: queue.Queue[set[str]] = queue.Queue()
    # Watching starts before the first build: an edit saved while it runs is then seen as a change.
    watchers = watch(ws, events, stop)
    rebuild(ws, session, state, log)
    out_dir.mkdir(parents=True, exist_ok=True)
    handler = partial(Handler, state=state, directory=str(out_dir.resolve()))
    server = Server(("127.0.0.1", port), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    if ready:
        ready(f"http://127.0.0.1:{server.server_address[1]}/")
    try:
        while not stop.is_set():
            try:
                events.get(timeout=0.5)
            except queue.Empty:
                continue
            while not events.empty():  # one rebuild for a burst of saves
                events.get_nowait()
            rebuild(ws, session, state, log)
    finally:
        stop.set()
        session.flush(ws)
        server.shutdown()
        server.server_close()
        for watcher in watchers:
            watcher.join(timeout=2)
