"""`infralens serve` for real: start it, edit files, see the page change, break and fix, Ctrl-C."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import Tab


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read().decode()


def wait_for(url: str, text: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    page = ""
    while time.monotonic() < deadline:
        page = fetch(url)
        if text in page:
            return page
        time.sleep(0.2)
    raise AssertionError(f"{text!r} never appeared at {url}; last page:\n{page[:2000]}")


@pytest.fixture
def server(sample_site: Path):
    process = subprocess.Popen(
        [sys.executable, "-m", "infralens", "serve", "--port", "0"],
        cwd=sample_site,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()
        assert line.startswith("serving http://127.0.0.1:"), line + process.stderr.read()
        yield process, line.split()[1]
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


@pytest.mark.cli
def test_serve_rebuilds_on_change_shows_errors_and_recovers(server, sample_site: Path) -> None:
    process, base = server
    lab_url = base + "labs/lab-01-sample/index.html"
    page = wait_for(lab_url, "<h1>Sample KV bytes</h1>")
    assert "/__infralens/state" in page  # the reload script is served, not built
    assert "__infralens" not in (sample_site / "output/labs/lab-01-sample/index.html").read_text()

    manifest = sample_site / "labs/lab-01-sample.yml"
    original = manifest.read_text()
    manifest.write_text(original.replace("title: Sample KV bytes", "title: Edited KV bytes"))
    wait_for(lab_url, "<h1>Edited KV bytes</h1>")

    starter = sample_site / "code/lab-01-sample/kv.py"
    starter.write_text(starter.read_text().replace("# one K and one V vector per KV head", "# K and V, edited"))
    wait_for(base + "code/lab-01-sample/kv.py.html", "# K and V, edited")

    manifest.write_text(original.replace("region: formula", "region: formul"))
    page = wait_for(lab_url, "the last rebuild failed")
    assert "labs/lab-01-sample.yml:15:11: error: region &#39;formul&#39; not found" in page
    assert "<h1>Edited KV bytes</h1>" in page  # the last good page is still served

    manifest.write_text(original)
    page = wait_for(lab_url, "<h1>Sample KV bytes</h1>")
    assert "the last rebuild failed" not in page

    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=10) == 0
    assert process.stdout.read().strip() == "stopped"
    log = process.stderr.read()
    # The starter edit re-rendered only its lab (its lab page and source view, plus the raw file, its
    # notebook and the search index); the title edit re-rendered both labs, whose navigation names it.
    assert re.search(r"^rebuilt 1 of 2 labs \(2 pages, 3 other files\) in \d+ ms$", log, re.M), log
    assert re.search(r"^rebuilt 2 of 2 labs \(\d pages, \d+ other files\) in \d+ ms$", log, re.M), log


@pytest.mark.browser
def test_an_open_page_reloads_itself_after_a_change_in_real_chromium(server, sample_site: Path, chromium) -> None:
    process, base = server
    context = chromium.new_context()
    try:
        tab = Tab(context, base)
        page = tab.goto("labs/lab-01-sample/index.html")
        assert page.text_content("h1") == "Sample KV bytes"
        page.wait_for_timeout(600)  # let the reload script see the current version first
        manifest = sample_site / "labs/lab-01-sample.yml"
        manifest.write_text(manifest.read_text().replace("title: Sample KV bytes", "title: Reloaded KV bytes"))
        # No navigation from the test: only the page's own script can bring the new title.
        page.wait_for_function("document.querySelector('h1').textContent === 'Reloaded KV bytes'", timeout=20000)
        assert tab.errors == [] and tab.external == []
    finally:
        context.close()


@pytest.mark.cli
def test_an_edit_made_while_the_first_build_runs_is_not_missed(sample_site: Path) -> None:
    import threading

    from infralens.serve import serve

    manifest = sample_site / "labs/lab-01-sample.yml"
    lines: list[str] = []
    stop = threading.Event()

    def log(line: str) -> None:
        lines.append(line)
        if len(lines) == 1:  # still inside the first build: the contributor saves a file now
            manifest.write_text(manifest.read_text().replace("title: Sample KV bytes", "title: Saved during the build"))

    thread = threading.Thread(target=serve, args=(sample_site / "site.yml", sample_site / "output", 0, log), kwargs={"stop": stop})
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while len(lines) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        thread.join(timeout=10)
    assert len(lines) >= 2 and lines[1].startswith("rebuilt 2 of 2 labs"), lines
    assert "<h1>Saved during the build</h1>" in (sample_site / "output/labs/lab-01-sample/index.html").read_text()


def ask(base: str, method: str, path: str, host: str | None = None):
    """Send one request exactly as written (no client-side cleaning of the path); return (response, body)."""
    import http.client
    from urllib.parse import urlsplit

    port = urlsplit(base).port
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    connection.putheader("Host", host or f"127.0.0.1:{port}")
    connection.endheaders()
    response = connection.getresponse()
    body = response.read()
    connection.close()
    return response, body


def stop_and_read_stderr(process: subprocess.Popen) -> str:
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=10) == 0
    return process.stderr.read()


@pytest.mark.cli
def test_serve_refuses_foreign_hosts_and_bad_paths_redirects_folders_and_heads_like_get(server) -> None:
    from urllib.parse import urlsplit

    process, base = server
    wait_for(base, "<h1>")
    port = urlsplit(base).port

    assert ask(base, "GET", "/", host="attacker.example")[0].status == 421  # DNS rebinding
    assert ask(base, "GET", "/__infralens/state", host=f"evil.example:{port}")[0].status == 421
    assert ask(base, "GET", "/%00")[0].status == 400
    moved, _ = ask(base, "GET", "/labs/lab-01-sample")
    assert (moved.status, moved.getheader("Location")) == (301, "/labs/lab-01-sample/")
    got, body = ask(base, "GET", "/labs/lab-01-sample/index.html")
    head, empty = ask(base, "HEAD", "/labs/lab-01-sample/index.html")
    assert got.status == head.status == 200 and empty == b""
    assert head.getheader("Content-Length") == got.getheader("Content-Length") == str(len(body))
    assert ask(base, "GET", "/", host=f"localhost:{port}")[0].status == 200
    assert process.poll() is None  # still serving


@pytest.mark.cli
def test_paths_no_file_can_have_get_an_answer_not_a_dropped_connection(server) -> None:
    process, base = server
    wait_for(base, "<h1>")
    cannot_exist = [
        "/%ED%A0%80",  # a lone surrogate: no UTF-8 file name decodes to it
        "/" + "a" * 300,  # longer than a file name may be
        "/a" * 3000,  # longer than a path may be
        "/labs/" + "x" * 256 + "/",
        "/labs/lab-01-sample/index.html/",  # a file is not a folder
    ]
    for path in cannot_exist:
        for method in ("GET", "HEAD"):
            assert ask(base, method, path)[0].status == 404, (method, path[:60])
    assert ask(base, "GET", "/%00")[0].status == 400
    assert ask(base, "GET", "/labs/lab-01-sample/index.html")[0].status == 200  # still serving
    log = stop_and_read_stderr(process)
    assert "Traceback" not in log, log


@pytest.mark.cli
def test_a_folder_redirect_never_leaves_this_server(server) -> None:
    _, base = server
    wait_for(base, "<h1>")
    # Browsers read `/\` as `//`: a Location starting with either names another host.
    for path in (
        "/\\evil.example/%2e%2e/labs/lab-01-sample",
        "//evil.example/%2e%2e/labs/lab-01-sample",
        "/%5cevil.example/%2e%2e/labs/lab-01-sample",
        "/labs/./lab-01-sample",
    ):
        moved, _ = ask(base, "GET", path)
        assert (moved.status, moved.getheader("Location")) == (301, "/labs/lab-01-sample/"), path
    moved, _ = ask(base, "GET", "/labs/lab-01-sample?from=nav")
    assert (moved.status, moved.getheader("Location")) == (301, "/labs/lab-01-sample/?from=nav")
    assert ask(base, "GET", "/\\evil.example/%2e%2e/labs/no-such-lab")[0].status == 404


@pytest.mark.cli
def test_folders_are_not_listed_and_no_answer_is_sniffed(server) -> None:
    _, base = server
    wait_for(base, "<h1>")
    # No index.html: a static host answers 404, so the dev server does too (as mkdocs and hugo do).
    for folder in ("/code/", "/code/lab-01-sample/", "/static/", "/labs/"):
        response, body = ask(base, "GET", folder)
        assert response.status == 404 and b"kv.py" not in body, folder
    assert ask(base, "GET", "/code")[0].status == 404  # no redirect to a folder that has no page
    answers = [ask(base, "GET", path)[0] for path in ("/", "/labs/lab-01-sample", "/no-such-page", "/__infralens/state", "/search-index.js")]
    answers += [ask(base, "GET", "/", host="attacker.example")[0], ask(base, "GET", "/%00")[0]]
    assert [response.status for response in answers] == [200, 301, 404, 200, 200, 421, 400]
    assert all(response.getheader("X-Content-Type-Options") == "nosniff" for response in answers)


@pytest.fixture
def in_process_server(sample_site: Path, monkeypatch):
    """`serve` in a thread of this process, its stalled-client timeout cut to one second."""
    import threading

    from infralens import serve as serve_module

    assert 0 < serve_module.Handler.timeout <= 60  # the shipped value: a stalled client is dropped, in time
    monkeypatch.setattr(serve_module.Handler, "timeout", 1)
    stop = threading.Event()
    ready: list[str] = []
    thread = threading.Thread(
        target=serve_module.serve,
        args=(sample_site / "site.yml", sample_site / "output", 0, lambda line: None),
        kwargs={"stop": stop, "ready": ready.append},
    )
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not ready and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready, "serve did not start"
        yield ready[0]
    finally:
        stop.set()
        thread.join(timeout=10)


@pytest.mark.cli
def test_a_stalled_client_neither_blocks_others_nor_keeps_its_connection(in_process_server: str) -> None:
    import socket
    from urllib.parse import urlsplit

    port = urlsplit(in_process_server).port
    stalled = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
    stalled[0].sendall(b"GET / HTTP/1.1\r\nHo")  # half a request, then nothing
    try:
        assert "<h1>" in fetch(in_process_server)  # answered while twenty clients say nothing
        for sock in stalled:
            sock.settimeout(10)
            assert sock.recv(1) == b""  # the server closed it after its timeout, not after ours
    finally:
        for sock in stalled:
            sock.close()


@pytest.mark.cli
def test_five_hundred_requests_at_once_are_all_answered(server) -> None:
    import selectors
    import socket
    from urllib.parse import urlsplit

    if int(Path("/proc/sys/net/core/somaxconn").read_text()) < 1024:
        pytest.skip("this kernel caps every listen backlog below 1024 (net.core.somaxconn)")
    process, base = server
    wait_for(base, "<h1>")
    port = urlsplit(base).port
    overflows = listen_overflows()
    # Open every connection first, then send every request: all 500 wait on the server at once.
    sockets = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(500)]
    request = f"GET /labs/lab-01-sample/index.html HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    for sock in sockets:
        sock.sendall(request)
        sock.setblocking(False)
    selector = selectors.DefaultSelector()
    answers = {sock: b"" for sock in sockets}
    for sock in sockets:
        selector.register(sock, selectors.EVENT_READ)
    deadline = time.monotonic() + 60
    open_count = len(sockets)
    while open_count and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=1):
            chunk = key.fileobj.recv(65536)
            answers[key.fileobj] += chunk
            if not chunk:
                selector.unregister(key.fileobj)
                open_count -= 1
    for sock in sockets:
        sock.close()
    statuses = [answer.split(b"\r\n", 1)[0] for answer in answers.values()]
    assert statuses.count(b"HTTP/1.0 200 OK") == 500, sorted(set(statuses))
    # The kernel counts connections it dropped because the accept queue was full; a client retries
    # them a second or more later, which a browser loading a page sees as a stall or a failure.
    assert listen_overflows() == overflows, "connections were dropped: the listen backlog is too short"
    assert process.poll() is None


def listen_overflows() -> int:
    """The kernel's count of connections dropped for a full accept queue (TcpExt ListenOverflows)."""
    lines = Path("/proc/net/netstat").read_text().splitlines()
    header, values = next((lines[i].split(), lines[i + 1].split()) for i in range(0, len(lines), 2) if lines[i].startswith("TcpExt:"))
    return int(dict(zip(header, values))["ListenOverflows"])


MEMORY_PROBE = """
import gc, sys, tracemalloc
from pathlib import Path
from infralens.build import Session
from infralens.serve import LastBuild, rebuild
from infralens.project.workspace import Workspace

root = Path(sys.argv[1])
ws = Workspace.open(root / "site.yml", root / "output")
session, state = Session(keep_state=True), LastBuild()
starter = root / "code/lab-01-sample/kv.py"
original = starter.read_text()

def edits(count, start):
    for number in range(start, start + count):
        starter.write_text(original + f"\\n# edit {number}\\n")
        rebuild(ws, session, state, lambda line: None)
        assert not state.errors, state.errors

tracemalloc.start()
edits(40, 0)  # caches warm up and the in-memory cache fills to its cap (8 entries a lab + 64)
gc.collect()
warm = tracemalloc.get_traced_memory()[0]
edits(60, 40)
gc.collect()
print(tracemalloc.get_traced_memory()[0] - warm)
"""


@pytest.mark.cli
def test_serve_keeps_no_more_memory_however_many_rebuilds(sample_site: Path) -> None:
    """What a long `serve` session holds between edits stays flat: rebuilds as serve makes them,
    traced in a process of their own (this one has other tests' threads)."""
    probe = subprocess.run([sys.executable, "-c", MEMORY_PROBE, str(sample_site)], capture_output=True, text=True, timeout=300)
    assert probe.returncode == 0, probe.stderr
    grown = int(probe.stdout.split()[-1])
    assert grown < 200_000, f"{grown:,} bytes more after 60 more rebuilds"  # v1 kept about 1.1 MB per rebuild


@pytest.mark.cli
def test_a_client_dribbling_its_request_is_dropped_at_the_deadline(in_process_server: str) -> None:
    """One byte every 0.3 s beats a 1 s timeout per read; the whole request line and headers still
    have only 1 s, so the server hangs up long before the dribble could finish."""
    import socket
    from urllib.parse import urlsplit

    port = urlsplit(in_process_server).port
    request = f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode() + b"X-Slow: " + b"a" * 100
    dribbler = socket.create_connection(("127.0.0.1", port))
    dribbler.settimeout(0.3)
    answered = dropped = False
    try:
        for sent, byte in enumerate(request[:40]):  # 12 s worth of bytes
            try:
                dribbler.sendall(bytes([byte]))
                dropped = dribbler.recv(1) == b""
            except TimeoutError:
                pass
            except ConnectionError:
                dropped = True
            if sent == 1:
                assert "<h1>" in fetch(in_process_server)  # others are answered meanwhile
                answered = True
            if dropped:
                break
    finally:
        dribbler.close()
    assert answered and dropped, f"still connected after {sent + 1} bytes, {(sent + 1) * 0.3:.0f} s"
