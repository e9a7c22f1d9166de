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

import io
import json
import os
import queue
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

from infralens.build import Session, build, renderer_for
from infralens.errors import InputError
from infralens.project.workspace import Workspace

STATE_PATH = "/__infralens/state"
WATCHED_FOLDERS = ("labs", "code", "templates")
SETTLE_MS = 20
"""How long to wait for more events once one arrived: an editor's save is often several events."""


@dataclass(kw_only=True)
class LastBuild:
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


def rebuild(ws: Workspace, session: Session, state: LastBuild, log) -> None:
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


class RequestReader(io.RawIOBase):
    """A connection's incoming bytes, each read given only what is left of the request's deadline.

    The socket's own timeout is per read, so a client sending one byte just inside it would hold its
    connection (and a thread) for good; a deadline for the whole request line and headers does not.
    """

    def __init__(self, connection: socket.socket, timeout: float) -> None:
        self.connection = connection
        self.timeout = timeout
        self.deadline: float | None = None
        """When the request being read must be in (time.monotonic()); None once its headers are."""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.deadline is None:
            self.connection.settimeout(self.timeout)
        else:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the request line and headers took longer than the timeout")
            self.connection.settimeout(left)
        return self.connection.recv_into(buffer)


class Handler(SimpleHTTPRequestHandler):
    """Serves output/, the state endpoint, and HTML with the reload script and any error banner.

    A development server on loopback, made safe for what a browser can be tricked into sending it:
    a Host header other than the loopback one is refused (DNS rebinding), a path that cannot name a
    file gets an answer (400 for a NUL byte, 404 for a name too long or not UTF-8) instead of a
    dropped connection, a folder with a page and without its trailing slash is redirected to its
    own path on this server so the page's relative links work, a folder without a page is not
    listed (404, as on a static host), HEAD answers as GET would, no answer may be MIME-sniffed, and
    a client must send its request line and headers within `timeout` seconds (each read as well)
    instead of holding a thread for good.
    """

    timeout = 30

    def __init__(self, *args, state: LastBuild, directory: str, **kwargs) -> None:
        self.state = state
        super().__init__(*args, directory=directory, **kwargs)

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the base class's reader, replaced by one that keeps the deadline
        self.reader = RequestReader(self.connection, self.timeout)
        self.rfile = io.BufferedReader(self.reader)

    def handle_one_request(self) -> None:
        # Keep-alive: each request gets its own deadline, counted from when the server waits for it.
        self.reader.deadline = time.monotonic() + self.timeout
        super().handle_one_request()

    def parse_request(self) -> bool:
        try:
            return super().parse_request()
        finally:
            self.reader.deadline = None

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        pass  # the terminal shows rebuilds, not every request

    def end_headers(self) -> None:
        self.send_header("X-Content-Type-Options", "nosniff")
        super().end_headers()

    def do_GET(self) -> None:
        self.answer(head=False)

    def do_HEAD(self) -> None:
        self.answer(head=True)

    def answer(self, head: bool) -> None:
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0].strip("[]").lower()
        if host not in ("127.0.0.1", "localhost", "::1"):
            return self.send_error(421, "infralens serve answers only requests for 127.0.0.1 or localhost")
        url_path, _, query = self.path.partition("?")
        if url_path == STATE_PATH:
            return self.send_body(json.dumps(self.state.snapshot()).encode(), "application/json", head)
        with self.state.lock:
            banner, script, failed = self.state.overlay
            errors = bool(self.state.errors)
        translated = self.translate_path(self.path)
        if "\x00" in translated:  # no file has that name, and open() would raise
            return self.send_error(400, "bad path")
        path = Path(translated)
        try:
            folder = path.is_dir()
            if folder:
                path = path / "index.html"
                if path.is_file() and not url_path.endswith("/"):
                    return self.redirect_to_folder(path.parent, query)
            # A file named with a trailing slash is not found, though Path drops the slash.
            found = path.is_file() and (folder or not url_path.endswith("/"))
            html = path.read_bytes() if found and path.suffix == ".html" else None
        except (OSError, ValueError):
            # A name no file can have (too long, or a lone surrogate), or one a rebuild just removed.
            html, found = None, False
        if html is not None:
            # Undecodable bytes pass through unchanged: the page is served as built, plus the overlay.
            text = html.decode("utf-8", "surrogateescape")
            body_open = text.find(">", text.find("<body")) + 1
            text = text[:body_open] + (banner if errors else "") + text[body_open:]
            text = text.replace("</body>", script + "</body>", 1)
            return self.send_body(text.encode("utf-8", "surrogateescape"), "text/html; charset=utf-8", head)
        if not found and errors:
            # No good build to fall back on yet: the errors are the page.
            return self.send_body(failed.encode(), "text/html; charset=utf-8", head)
        if not found:
            return self.send_error(404, "File not found")
        return super().do_HEAD() if head else super().do_GET()

    def redirect_to_folder(self, folder: Path, query: str) -> None:
        """Send a 301 to `folder`'s own path on this server, with its trailing slash.

        The path is rebuilt from the folder's name on disk rather than from the request, so it has
        one leading slash and no backslash: `//host/` or `/\\host/` would send the browser elsewhere.
        """
        names = folder.relative_to(self.directory).parts
        location = "/" + "".join(quote(os.fsencode(name)) + "/" for name in names)
        self.send_response(301)
        self.send_header("Location", location + ("?" + query if query else ""))
        self.send_header("Content-Length", "0")
        self.end_headers()

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

    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # the client left mid-answer (a closed tab): nothing to tell it, nothing to fix here
        super().handle_error(request, client_address)


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
    state = LastBuild()
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
