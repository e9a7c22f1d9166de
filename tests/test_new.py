"""`infralens new`: a contributor's first five minutes, run for real on a copy of the sample site."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import run_infralens

pytestmark = pytest.mark.cli


def test_new_lab_builds_and_checks_at_once(sample_site: Path) -> None:
    result = run_infralens("new", "lab-15-speculative-decoding", "--track", "basics", "--title", 'Speculative "draft" decoding', cwd=sample_site)
    assert result.returncode == 0, result.stderr
    manifest = sample_site / "labs/lab-15-speculative-decoding.yml"
    starter = sample_site / "code/lab-15-speculative-decoding/speculative_decoding.py"
    assert manifest.read_text().startswith("# yaml-language-server: $schema=../schema/lab.schema.json\n")
    assert "# region core" in starter.read_text()
    build = run_infralens("build", cwd=sample_site)
    assert build.returncode == 0, build.stderr
    page = (sample_site / "output/labs/lab-15-speculative-decoding/index.html").read_text()
    assert "<h1>Speculative &#34;draft&#34; decoding</h1>" in page
    check = run_infralens("check", "lab-15-speculative-decoding", cwd=sample_site)
    assert check.returncode == 0, check.stderr
    assert check.stdout.splitlines()[-1] == "1 passed, 0 failed"


def test_new_refuses_to_overwrite(sample_site: Path) -> None:
    assert run_infralens("new", "lab-15-x", "--track", "basics", "--title", "X", cwd=sample_site).returncode == 0
    manifest = sample_site / "labs/lab-15-x.yml"
    manifest.write_text(manifest.read_text() + "# edited\n")
    again = run_infralens("new", "lab-15-x", "--track", "basics", "--title", "X", cwd=sample_site)
    assert again.returncode == 1
    assert "labs/lab-15-x.yml:1:1: error: already exists; infralens new never overwrites" in again.stderr
    assert manifest.read_text().endswith("# edited\n")


@pytest.mark.parametrize(
    "args, message",
    [
        (["lab-3-x", "--track", "basics"], "lab-3-x:1:1: error: lab id must look like lab-NN-slug"),
        (["lab-16-x", "--track", "basic"], "site.yml:1:1: error: unknown track 'basic' (did you mean 'basics'?)"),
        (["lab-01-again", "--track", "basics"], "labs/lab-01-sample.yml:1:9: error: lab number 1 is already used by lab-01-sample"),
    ],
)
def test_new_rejects_bad_requests(sample_site: Path, args: list[str], message: str) -> None:
    result = run_infralens("new", *args, "--title", "T", cwd=sample_site)
    assert result.returncode == 1
    assert result.stderr.startswith(message)


def test_a_new_contributor_end_to_end(sample_site: Path) -> None:
    """new → edit → serve shows it → check passes it → build --strict passes."""
    import subprocess
    import sys
    import time
    import urllib.request

    assert run_infralens("new", "lab-20-draft", "--track", "reading", "--title", "Draft lab", cwd=sample_site).returncode == 0
    server = subprocess.Popen([sys.executable, "-m", "infralens", "serve", "--port", "0"], cwd=sample_site, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = server.stdout.readline().split()[1] + "labs/lab-20-draft/index.html"
        starter = sample_site / "code/lab-20-draft/draft.py"
        starter.write_text(starter.read_text().replace("--layers\", type=int, default=32", "--layers\", type=int, default=16"))
        manifest = sample_site / "labs/lab-20-draft.yml"
        manifest.write_text(manifest.read_text().replace(
            "summary: One line for the index, saying what this lab makes concrete.",
            "summary: KV bytes per token for a 16-layer model.",
        ).replace("- What to notice when reading the code.", "- With 16 layers the run prints 65,536 bytes per token."))
        deadline, page = time.monotonic() + 30, ""
        while "With 16 layers the run prints 65,536 bytes per token." not in page:
            assert time.monotonic() < deadline, page[:2000]
            time.sleep(0.2)
            page = urllib.request.urlopen(url, timeout=5).read().decode()
    finally:
        server.terminate()
        server.wait()
    check = run_infralens("check", "lab-20-draft", cwd=sample_site)
    assert check.returncode == 0, check.stderr
    assert run_infralens("build", "--strict", cwd=sample_site).returncode == 0
    assert "<span class=\"run-ok\">Passed</span>" in (sample_site / "output/labs/lab-20-draft/index.html").read_text()


@pytest.mark.parametrize("title", ['Say """three""" quotes', "Back\\slash \\ and \\n escapes", "Ünïcode — é: {braces} # not a comment"])
def test_any_title_new_accepts_builds_and_checks(sample_site: Path, title: str) -> None:
    result = run_infralens("new", "lab-16-odd-title", "--track", "basics", "--title", title, cwd=sample_site)
    assert result.returncode == 0, result.stderr
    build = run_infralens("build", cwd=sample_site)
    assert build.returncode == 0, build.stderr
    check = run_infralens("check", "lab-16-odd-title", cwd=sample_site)
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_title_with_a_control_character_is_refused(sample_site: Path) -> None:
    result = run_infralens("new", "lab-16-odd-title", "--track", "basics", "--title", "Bell\x07lab", cwd=sample_site)
    assert result.returncode == 1
    assert result.stderr.splitlines()[0] == "--title:1:1: error: title 'Bell\\x07lab' must be one line of visible text, without control characters"
    assert not (sample_site / "labs/lab-16-odd-title.yml").exists()
