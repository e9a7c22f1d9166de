"""The command-line edge: turns InputError into `path:line:col: error: message` lines and exit codes."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import NoReturn

import click

from infralens import __version__
from infralens.errors import InputError, Mark, Problem, did_you_mean, one_line
from infralens.model.devices import DEVICES
from infralens.project.unchanged import CACHE_ENV, cache_folder, unchanged_labs

# The commands import what they use when they run: `infralens --help` and `infralens build` on an
# unchanged site take about a tenth of a second; importing every module up front added 0.3 s.

CACHE_OPTION = click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help=f"Folder for caches and stored run results (default: ${CACHE_ENV}, else .infralens beside site.yml).",
)


def report(exc: InputError) -> None:
    """Print every problem, gcc style, then a count."""
    for problem in exc.problems:
        click.echo(str(problem), err=True)
    count = len(exc.problems)
    click.echo(f"{count} error{'s' if count != 1 else ''}", err=True)


def refuse(message: str, status: int = 1) -> NoReturn:
    """Stop the command with one `error:` line: what cannot be done, said before anything else is."""
    click.echo(f"error: {message}", err=True)
    sys.exit(status)


def stopped_by_signal(signum, frame) -> None:
    """Turn SIGTERM into KeyboardInterrupt, so that it stops a command the way Ctrl-C does."""
    raise KeyboardInterrupt


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="infralens")
def main() -> None:
    """Build and check InfraLens: annotated, runnable code-reading labs."""


@main.command()
@click.option("--site", "site_path", default="site.yml", show_default=True, type=click.Path(path_type=Path), help="The site's configuration file; labs/, code/ and templates/ sit beside it.")
@click.option("--out", "out_dir", default="output", show_default=True, type=click.Path(path_type=Path), help="Folder to write the site into; left as it was unless the build succeeds.")
@click.option("--strict", is_flag=True, help="Fail on any broken internal link or anchor, or external link that is not http(s).")
@click.option("--full", is_flag=True, help="Render every lab again, even those whose inputs did not change.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), help="Processes for a cold build (default: the number of cores).")
@CACHE_OPTION
def build(site_path: Path, out_dir: Path, strict: bool, full: bool, jobs: int | None, cache_dir: Path | None) -> None:
    """Build the static site from site.yml, labs/ and code/; only labs whose inputs changed are rendered again."""
    started = time.perf_counter()
    if not full:  # every file the last build read and wrote as it left them: nothing to do
        labs = unchanged_labs(site_path, out_dir, cache_folder(site_path, cache_dir), strict)
        if labs is not None:
            said(labs, 0, 0, 0, out_dir, 0, time.perf_counter() - started)
            return
    # loaded when this command runs (see the note at the top)
    from infralens.build import STOP, Session
    from infralens.build import build as build_site
    from infralens.project.workspace import Workspace

    def stop_build(signum, frame) -> None:
        STOP.set()
        raise KeyboardInterrupt

    # Ctrl-C or SIGTERM: the build stops before its commit, or undoes the commit it is in.
    signal.signal(signal.SIGINT, stop_build)
    signal.signal(signal.SIGTERM, stop_build)
    try:
        summary = build_site(Workspace.open(site_path, out_dir, cache_dir), strict=strict, full=full, session=Session(jobs=jobs))
    except InputError as exc:
        report(exc)
        sys.exit(1)
    except BaseException:
        if not STOP.is_set():
            raise
        click.echo(f"stopped: {out_dir} is as it was", err=True)
        sys.exit(130)
    said(summary.labs, summary.rendered, summary.pages, summary.files, out_dir, summary.removed, time.perf_counter() - started)


def said(labs: int, rendered: int, pages: int, files: int, out_dir: Path, removed: int, seconds: float) -> None:
    """Print what a build did, in one line."""
    gone = f", removed {removed} files" if removed else ""
    click.echo(f"built {labs} lab{'s' if labs != 1 else ''} ({rendered} rendered): wrote {pages} pages and {files} files into {out_dir}{gone} in {seconds:.2f} s")


@main.command()
@click.argument("lab_ids", nargs=-1)
@click.option("--site", "site_path", default="site.yml", show_default=True, type=click.Path(path_type=Path), help="The site's configuration file.")
@click.option("--jobs", "-j", default=os.cpu_count() or 1, show_default="number of cores", type=click.IntRange(min=1), help="Starters to run at once.")
@click.option("--no-cache", is_flag=True, help="Run every starter even if this exact version already has a stored result.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), help="Also write the results as JSON to this file.")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False, path_type=Path), help="Also write the results as JUnit XML to this file.")
@click.option("--sandbox", is_flag=True, help="Run each starter under bubblewrap: no writes outside its scratch folder, no network (for contributions from strangers; see the README).")
@click.option("--no-state", is_flag=True, help="Skip the second, traced run that records the excerpt's execution state: faster, and the pages show no state until a check records it.")
@click.option("--results-dir", "results_dir", type=click.Path(file_okay=False, path_type=Path), help="Also write this check's results to DIR: its stored records (runs/), results.json and junit.xml, for `infralens results merge` on another machine.")
@click.option("--device", "device", type=click.Choice(DEVICES), help="Make only the runs on this device (a GPU runner's job: --device cuda); the figures, calculators and questions, judged across every starter's first run, are then not checked.")
@click.option("--shard", "shard", metavar="K/N", callback=lambda ctx, param, value: shard_option(value), help="Check only the K-th of N disjoint shares of the labs, balanced by their recorded run times (for N CI jobs; each must see the same result store, or none).")
@CACHE_OPTION
def check(
    lab_ids: tuple[str, ...],
    site_path: Path,
    jobs: int,
    no_cache: bool,
    json_path: Path | None,
    junit_path: Path | None,
    sandbox: bool,
    no_state: bool,
    results_dir: Path | None,
    device: str | None,
    shard: tuple[int, int] | None,
    cache_dir: Path | None,
) -> None:
    """Run every starter (or those of LAB_IDS) and confirm each still runs and says what its page claims."""
    # loaded when this command runs (see the note at the top)
    from infralens.build import load_project
    from infralens.check.process import become_subreaper
    from infralens.check.results import ResultStore, StoreError, export_results, run_key
    from infralens.check.runner import run_labs, runs_of
    from infralens.model.run import RunResult, run_name
    from infralens.project.workspace import Workspace

    try:
        project = load_project(site_path, cache_dir)
    except InputError as exc:
        report(exc)
        sys.exit(1)
    store = ResultStore(Workspace.open(site_path, cache_dir=cache_dir).runs_folder())
    labs = chosen_labs(project, lab_ids, store, shard)
    every = runs_of(labs, device)
    width = max((len(run_name(starter.path, run.device)) for _, starter, run in every), default=10)
    lab_width = max((len(lab.id) for lab, _, _ in every), default=10)

    def show(result: RunResult) -> None:
        said = "  (stored result)" if result.cached else f"  {result.reason}" if not result.ran else ""
        said += f"  note: {one_line(result.note)}" if result.note else ""
        click.echo(f"{result.lab:<{lab_width}}  {result.name:<{width}}  {result.status:<8}  {result.seconds:6.2f} s{said}")

    for path in (json_path, junit_path):
        if path and not path.absolute().parent.is_dir():  # said now, not after every starter has run
            refuse(f"cannot write {path}: folder {path.parent} does not exist", 2)
    jail = opened_sandbox() if sandbox else None
    signal.signal(signal.SIGTERM, stopped_by_signal)  # SIGTERM stops the starters as Ctrl-C does
    try:
        results = run_labs(labs, project.root, jobs, texts=project.texts, manifests=project.manifests, store=store, use_cache=not no_cache, on_result=show, sandbox=jail, reaper=become_subreaper(), state=not no_state, device=device)
    except KeyboardInterrupt:
        click.echo("stopped: every running starter was killed", err=True)
        sys.exit(130)
    except StoreError as exc:  # every running starter was killed on the way out (see run_labs)
        store_refused(exc)
    if results_dir is not None:
        json_path, junit_path = json_path or results_dir / "results.json", junit_path or results_dir / "junit.xml"
        keys = {(starter.path, run.device): run_key(project.root, starter, run) for _, starter, run in every}
        try:
            results_dir.mkdir(parents=True, exist_ok=True)
            export_results(store, [keys[r.starter, r.device] for r in results], results_dir)
        except OSError as exc:
            refuse(f"cannot write the results to {results_dir}: {exc.strerror or exc}")
    write_reports(results, json_path, junit_path)
    sys.exit(summarize(results))


def chosen_labs(project, lab_ids: tuple[str, ...], store, shard: tuple[int, int] | None) -> tuple:
    """The labs a check runs: those named (each must exist), or all; then the shard's share of them."""
    known = [lab.id for lab in project.labs]
    unknown = [lab_id for lab_id in lab_ids if lab_id not in known]
    for lab_id in unknown:
        click.echo(f"error: unknown lab {lab_id!r}{did_you_mean(lab_id, known)}", err=True)
    if unknown:
        sys.exit(2)
    labs = tuple(lab for lab in project.labs if not lab_ids or lab.id in lab_ids)
    return shard_labs(labs, project.root, store, *shard) if shard is not None else labs


def opened_sandbox():
    """The sandbox of `check --sandbox`, or a refusal saying why this machine cannot make one."""
    # loaded when this command runs (see the note at the top)
    from infralens.check.sandbox import SandboxUnavailable, open_sandbox

    try:
        return open_sandbox()
    except SandboxUnavailable as exc:
        refuse(str(exc), 2)


def write_reports(results: list, json_path: Path | None, junit_path: Path | None) -> None:
    """Write the JSON and JUnit reports asked for."""
    # loaded when this command runs (see the note at the top)
    from infralens.check.reports import results_json, results_junit

    for path, make in ((json_path, results_json), (junit_path, results_junit)):
        if path:
            try:
                path.write_text(make(results), encoding="utf-8")
            except OSError as exc:
                refuse(f"cannot write {path}: {exc.strerror}")


def summarize(results: list) -> int:
    """Print each failure at its manifest line with the tail of its output, then the count; return the exit status."""
    failed = [r for r in results if r.ran and not r.passed]
    for result in failed:
        click.echo(f"\n{result.mark}: error: {result.name}: {result.reason}", err=True)
        for mark, reason in result.also:
            click.echo(f"{mark}: error: {result.name}: {reason}", err=True)
        tail = result.tail()
        if tail:  # escaped: a starter's output must not send commands to the terminal (ESC sequences)
            click.echo("  | " + "\n  | ".join(one_line(line) for line in tail.split("\n")), err=True)
    skipped, compiled = sum(r.skipped for r in results), sum(r.compiled for r in results)
    passed = sum(r.passed for r in results)
    click.echo(f"{passed} passed, {len(failed)} failed" + (f", {compiled} compiled (not run)" if compiled else "") + (f", {skipped} skipped" if skipped else ""))
    return 1 if failed else 0


@main.group()
def results() -> None:
    """Results of checks run elsewhere (a CI matrix's shards)."""


@results.command("merge")
@click.argument("folders", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--site", "site_path", default="site.yml", show_default=True, type=click.Path(path_type=Path), help="The site's configuration file.")
@CACHE_OPTION
def merge(folders: tuple[Path, ...], site_path: Path, cache_dir: Path | None) -> None:
    """Take the results FOLDERS of `check --results-dir` into this site's store, so a build shows
    every lab as if one machine had checked them all. A record of another version of its starter is
    refused; records of one starter that disagree are reported. Exit 1 if any was refused or disagreed."""
    # loaded when this command runs (see the note at the top)
    from infralens.build import load_project
    from infralens.check.results import ResultStore, StoreError, merge_results, run_key
    from infralens.check.runner import runs_of
    from infralens.project.workspace import Workspace

    try:
        project = load_project(site_path, cache_dir)
    except InputError as exc:
        report(exc)
        sys.exit(1)
    current = {run_key(project.root, starter, run): starter.path for _, starter, run in runs_of(project.labs)}
    store = ResultStore(Workspace.open(site_path, cache_dir=cache_dir).runs_folder())
    try:
        done = merge_results(store, list(folders), current)
    except StoreError as exc:
        store_refused(exc)
    for line in done.merged:
        click.echo(f"merged: {one_line(line)}")
    for problem in done.invalid:
        click.echo(str(problem), err=True)
    for line in done.refused:
        click.echo(f"refused: {one_line(line)}", err=True)
    for line in done.conflicts:
        click.echo(f"conflict: {one_line(line)}", err=True)
    refused = len(done.refused) + len(done.invalid)
    click.echo(f"{len(done.merged)} merged, {refused} refused, {len(done.conflicts)} conflicting")
    sys.exit(1 if refused or done.conflicts else 0)


def store_refused(exc) -> NoReturn:
    """Stop the command: the result store's folder cannot be written (read-only, full)."""
    click.echo(f"{one_line(str(exc.folder))}: error: cannot store run results: {exc.reason}", err=True)
    sys.exit(1)


def shard_option(value: str | None) -> tuple[int, int] | None:
    """`--shard K/N` read, or a usage error that says what it must look like."""
    from infralens.check.shards import parse_shard  # loaded when this command runs (see the note at the top)

    if value is None:
        return None
    parsed = parse_shard(value)
    if parsed is None:
        raise click.BadParameter(f"{value!r} is not K/N with 1 <= K <= N, such as 2/4")
    return parsed


def shard_labs(labs: tuple, root: Path, store, k: int, n: int) -> tuple:
    """The labs of shard K of N, balanced by each lab's recorded run time (its runnable starters'
    stored results for their current versions), with a line on stderr saying which."""
    # loaded when this command runs (see the note at the top)
    from infralens.check.results import run_key
    from infralens.check.shards import split

    def stored(key: str):
        try:
            return store.load(key)
        except InputError:  # a broken record is no recorded time; the check will replace it
            return None

    durations = []
    for lab in labs:
        runs = [stored(run_key(root, starter, run)) for starter in lab.starters for run in starter.runs]
        durations.append((lab.id, None if None in runs else sum(run.seconds for run in runs)))
    chosen = set(split(durations, n)[k - 1])
    picked = tuple(lab for lab in labs if lab.id in chosen)
    recorded = sum(seconds or 0 for lab_id, seconds in durations if lab_id in chosen)
    click.echo(f"shard {k}/{n}: {len(picked)} of {len(labs)} labs ({recorded:.0f} s of recorded runs)", err=True)
    return picked


@main.command()
@click.option("--out", "out_dir", default="schema", show_default=True, type=click.Path(file_okay=False, path_type=Path), help="Folder to write the schemas into.")
def schema(out_dir: Path) -> None:
    """Write the JSON Schemas of lab manifests and site.yml for editors, and the Markdown reference."""
    from infralens.model.parse import json_schemas, reference_markdown  # loaded when this command runs (see the note at the top)

    out_dir.mkdir(parents=True, exist_ok=True)
    for name, document in json_schemas().items():
        (out_dir / name).write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        click.echo(f"wrote {out_dir / name}")
    (out_dir / "reference.md").write_text(reference_markdown(), encoding="utf-8")
    click.echo(f"wrote {out_dir / 'reference.md'}")


@main.command()
@click.argument("lab_id")
@click.option("--track", required=True, help="A track id from site.yml.")
@click.option("--title", required=True, help="The lab's title.")
@click.option("--lang", default="python", show_default=True, type=click.Choice(["python", "cpp", "cuda", "triton"]), help="The starter's language: a CUDA lab also gets a Python reference that runs on the CPU.")
@click.option("--site", "site_path", default="site.yml", show_default=True, type=click.Path(path_type=Path), help="The site's configuration file.")
def new(lab_id: str, track: str, title: str, lang: str, site_path: Path) -> None:
    """Start a lab: write labs/LAB_ID.yml and its starters under code/LAB_ID/ that build and check pass."""
    # loaded when this command runs (see the note at the top)
    from infralens.scaffold import new_lab

    try:
        made = new_lab(site_path, lab_id, track, title, lang)
    except InputError as exc:
        report(exc)
        sys.exit(1)
    click.echo("\n".join(f"wrote {path}" for path in (made.manifest, *made.starters)))
    click.echo(f"next: edit {'both' if len(made.starters) == 1 else 'them'}, then `infralens build` and `infralens check {lab_id}`")


@main.command()
@click.option("--site", "site_path", default="site.yml", show_default=True, type=click.Path(path_type=Path), help="The site's configuration file.")
@click.option("--external", is_flag=True, help="Also list the external links (they are checked for http(s), never fetched).")
@CACHE_OPTION
def links(site_path: Path, external: bool, cache_dir: Path | None) -> None:
    """Report every link of the built site: broken internal links and anchors first."""
    # loaded when this command runs (see the note at the top)
    from infralens.build.links import check_links
    from infralens.build.memory import render_in_memory

    try:
        pages, files = render_in_memory(site_path, cache_dir)
        found = check_links(pages, files)
    except InputError as exc:
        report(exc)
        sys.exit(1)
    broken = [link for link in found if link.problem]
    for link in broken:
        click.echo(str(Problem(Mark(f"output/{link.page}", link.line, link.col), link.problem)), err=True)
    if external:
        for target in sorted({link.target for link in found if link.external and not link.problem}):
            click.echo(target)
    internal = sum(not link.external for link in found)
    click.echo(f"{len(found)} links ({internal} internal, {len(found) - internal} external): {len(broken)} broken")
    sys.exit(1 if broken else 0)


@main.command()
@click.option("--site", "site_path", default="site.yml", show_default=True, type=click.Path(path_type=Path), help="The site's configuration file.")
@click.option("--out", "out_dir", default="output", show_default=True, type=click.Path(path_type=Path), help="Folder to build into.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="Port on 127.0.0.1 (0 picks a free one).")
@CACHE_OPTION
def serve(site_path: Path, out_dir: Path, port: int, cache_dir: Path | None) -> None:
    """Build, serve the site on 127.0.0.1, rebuild on every change and reload open pages."""
    # loaded when this command runs (see the note at the top)
    from infralens.serve import serve as run_server

    def log(line: str) -> None:
        click.echo(line, err=True)

    def ready(url: str) -> None:
        click.echo(f"serving {url} (Ctrl-C stops)")
        sys.stdout.flush()

    try:
        run_server(site_path, out_dir, port, log, ready, cache_dir=cache_dir)
    except KeyboardInterrupt:
        click.echo("stopped")
    except OSError as exc:
        refuse(f"cannot serve on 127.0.0.1:{port}: {exc.strerror}")
