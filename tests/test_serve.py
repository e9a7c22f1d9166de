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
    # The starter edit re-rendered only its lab (its lab page and source view, plus the raw file and
    # the search index); the title edit re-rendered both labs, whose navigation names it.
    assert re.search(r"^rebuilt 1 of 2 labs \(2 pages, 2 other files\) in \d+ ms$", log, re.M), log
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


@pytest.mark.cli
def test_serve_refuses_foreign_hosts_and_bad_paths_redirects_folders_and_heads_like_get(server) -> None:
    import http.client
    from urllib.parse import urlsplit

    process, base = server
    wait_for(base, "<h1>")
    port = urlsplit(base).port

    def ask(method: str, path: str, host: str = f"127.0.0.1:{port}"):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.putrequest(method, path, skip_host=True)
        connection.putheader("Host", host)
        connection.endheaders()
        response = connection.getresponse()
        body = response.read()
        connection.close()
        return response, body

    assert ask("GET", "/", host="attacker.example")[0].status == 421  # DNS rebinding
    assert ask("GET", "/__infralens/state", host=f"evil.example:{port}")[0].status == 421
    assert ask("GET", "/%00")[0].status == 400
    moved, _ = ask("GET", "/labs/lab-01-sample")
    assert (moved.status, moved.getheader("Location")) == (301, "/labs/lab-01-sample/")
    got, body = ask("GET", "/labs/lab-01-sample/index.html")
    head, empty = ask("HEAD", "/labs/lab-01-sample/index.html")
    assert got.status == head.status == 200 and empty == b""
    assert head.getheader("Content-Length") == got.getheader("Content-Length") == str(len(body))
    assert ask("GET", "/", host=f"localhost:{port}")[0].status == 200
    assert process.poll() is None  # still serving
