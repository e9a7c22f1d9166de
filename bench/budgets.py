"""Budgets: what each page of the built site costs a reader's browser, measured in real Chromium.

Builds the site into a scratch folder, serves it on 127.0.0.1 without compression, loads every
page in Debian's Chromium and counts the bytes of each response by kind, the requests that leave
the site and the console errors. Prints one row per page and exits 1 when a lab page is over its
budget: 60 KiB (61,440 bytes) of HTML+CSS+JS as loaded (a lab's page and its practice page each), zero off-site requests, zero console
errors. What a page fetches only on a reader's action (the search index, on first use of the
search box; a calculator's form, when it is first opened) is not part of its load; a row for each
shows that cost separately.

Run from the repository root:  python bench/budgets.py [--budget-kib 60]
"""

from __future__ import annotations

import argparse
import functools
import http.server
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from conftest import CHROMIUM_ARGS  # noqa: E402  (one list of flags for tests and benchmarks)

KINDS = {"document": "html", "stylesheet": "css", "script": "js"}


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def serve(folder: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def measure(browser, base: str, path: str, action=None) -> dict:
    """Load one page in a fresh context (empty cache) and count what it fetched."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    figures = {"html": 0, "css": 0, "js": 0, "other": 0, "external": [], "errors": []}

    def on_response(response) -> None:
        if not response.url.startswith(base):
            return
        try:
            size = len(response.body())
        except Exception:  # the page closed as its body arrived: the server's header says its size (no compression here)
            size = int(response.headers.get("content-length", 0))
        figures[KINDS.get(response.request.resource_type, "other")] += size

    page.on("request", lambda request: figures["external"].append(request.url) if not request.url.startswith((base, "data:", "about:", "blob:")) else None)
    page.on("response", on_response)
    page.on("console", lambda message: figures["errors"].append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: figures["errors"].append(str(error)))
    context.route(lambda url: not url.startswith(base), lambda route: route.abort())
    page.goto(base + path, wait_until="load")
    page.wait_for_load_state("networkidle")
    if action:
        before = {k: figures[k] for k in ("html", "css", "js", "other")}
        action(page)
        page.wait_for_load_state("networkidle")
        figures = {**figures, **{k: figures[k] - before[k] for k in before}}
    context.close()
    figures["total"] = figures["html"] + figures["css"] + figures["js"]
    return figures


def use_search(page) -> None:
    page.keyboard.press("/")
    page.keyboard.type("kv")
    page.wait_for_timeout(300)


def open_calculator(page) -> None:
    page.get_by_role("button", name="Open the calculator").first.click()
    page.wait_for_function("document.querySelector('[data-calc]').dataset.ready")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-kib", type=float, default=60)
    args = parser.parse_args()
    budget = int(args.budget_kib * 1024)

    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "output"
        subprocess.run([sys.executable, "-m", "infralens", "build", "--out", str(out)], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
        pages = ["index.html"] + sorted(str(p.relative_to(out)) for p in (out / "labs").glob("*/*.html"))
        pages += sorted(str(p.relative_to(out)) for p in (out / "code").rglob("*.html"))
        server, base = serve(out)
        failures = 0
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
                print(f"{'page':<58} {'html':>7} {'css':>7} {'js':>7} {'total':>8} {'other':>7}  off-site  errors  verdict")
                rows = [(path, measure(browser, base, path)) for path in pages]
                if (out / "search-index.js").exists():
                    rows.append(("(first use of search, on the index)", measure(browser, base, "index.html", use_search)))
                for path in pages:  # what opening a calculator fetches, once per page that has one
                    if path.endswith("/index.html") and path.startswith("labs/") and (out / path).with_name("calculators.js").exists():
                        rows.append((f"(first calculator opened, {path.split('/')[1]})", measure(browser, base, path, open_calculator)))
                browser.close()
        finally:
            server.shutdown()
            server.server_close()
        lab_totals = []
        for path, f in rows:
            is_lab = path.startswith("labs/")
            over = is_lab and f["total"] > budget
            bad = over or f["external"] or f["errors"]
            failures += bool(bad)
            if is_lab:
                lab_totals.append(f["total"])
            verdict = "OVER" if over else ("FAIL" if bad else ("ok" if is_lab else "-"))
            print(f"{path:<58} {f['html']:>7,} {f['css']:>7,} {f['js']:>7,} {f['total']:>8,} {f['other']:>7,}  {len(f['external']):>8}  {len(f['errors']):>6}  {verdict}")
            for problem in f["external"] + f["errors"]:
                print(f"    {problem}")
        print(
            f"lab and practice pages: {len(lab_totals)}, largest {max(lab_totals):,} bytes ({max(lab_totals) / 1024:.1f} KiB), "
            f"median {sorted(lab_totals)[len(lab_totals) // 2]:,} bytes; budget {budget:,} bytes ({args.budget_kib:g} KiB) of HTML+CSS+JS"
        )
        print(f"{failures} page(s) over budget or with off-site requests or console errors")
        return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
