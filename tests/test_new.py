"""`infralens new`: a contributor's first five minutes, run for real on a copy of the sample site."""

from __future__ import annotations

import shutil
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


@pytest.mark.parametrize(
    ("lang", "files", "last"),
    [
        ("cpp", ["x_lab.cpp"], "1 passed, 0 failed"),
        ("cuda", ["x_lab.py", "x_lab.cu"], "1 passed, 0 failed, 1 compiled (not run)"),
        ("triton", ["x_lab.py"], "1 passed, 0 failed, 1 skipped"),
    ],
)
def test_new_in_another_language_builds_and_checks_at_once(sample_site: Path, lang: str, files: list[str], last: str) -> None:
    if lang in ("cpp", "cuda") and shutil.which("g++") is None:
        pytest.skip("needs g++ (scripts/install-compilers installs it)")
    if lang == "cuda" and (shutil.which("nvcc") is None or shutil.which("nvidia-smi") is not None):
        pytest.skip("the count is of a machine with nvcc and no GPU")
    result = run_infralens("new", "lab-16-x-lab", "--track", "basics", "--title", f"A {lang} lab: 50% off */", "--lang", lang, cwd=sample_site)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (sample_site / "code/lab-16-x-lab").iterdir()) == sorted(files)
    assert result.stdout.splitlines()[1:-1] == [f"wrote code/lab-16-x-lab/{name}" for name in files]
    build = run_infralens("build", cwd=sample_site)
    assert build.returncode == 0, build.stderr
    check = run_infralens("check", "lab-16-x-lab", cwd=sample_site)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.splitlines()[-1] == last
    build = run_infralens("build", cwd=sample_site)  # its questions are answered from the run
    assert build.returncode == 0, build.stderr
    page = (sample_site / "output/labs/lab-16-x-lab/practice.html").read_text()
    assert "bytes per token: 131,072" in page


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
        (["lab-3-x", "--track", "basics"], "lab-3-x:1:1: error: lab id 'lab-3-x' must look like lab-NN-slug"),
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


def refused(result, first_line: str) -> None:
    """Assert `new` refused with `first_line` as its first error: one line per problem, no traceback."""
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == first_line, result.stderr
    assert lines[-1] in ("1 error", f"{len(lines) - 1} errors"), result.stderr
    assert "Traceback" not in result.stderr


def tree(site: Path) -> set[str]:
    """Every path under the site but the cache, to show a refused `new` left nothing behind."""
    return {str(path.relative_to(site)) for path in site.rglob("*") if ".infralens" not in path.parts}


@pytest.mark.parametrize("lab_id", ["lab-00-zero", "lab-000-zero"])
def test_new_refuses_lab_number_zero(sample_site: Path, lab_id: str) -> None:
    before = tree(sample_site)
    result = run_infralens("new", lab_id, "--track", "basics", "--title", "Zero", cwd=sample_site)
    refused(result, f"{lab_id}:1:1: error: lab number 0 is not allowed: lab numbers start at 01")
    assert tree(sample_site) == before


@pytest.mark.parametrize("lab_id", ["lab-٠٥-digits", "lab-𝟗𝟗-bold", "lab-１５-wide", "lab-15-ſlug"])
def test_new_takes_only_ascii_digits_and_letters(sample_site: Path, lab_id: str) -> None:
    before = tree(sample_site)
    result = run_infralens("new", lab_id, "--track", "basics", "--title", "Digits", cwd=sample_site)
    refused(result, f"{lab_id}:1:1: error: lab id {lab_id!r} must look like lab-NN-slug: two or three digits 0-9, "
            "then lowercase letters a-z, digits and single '-', e.g. lab-15-speculative-decoding")
    assert tree(sample_site) == before


def test_new_names_a_starter_so_it_shadows_no_module_it_imports(sample_site: Path) -> None:
    """argparse.py beside the starter would be what `import argparse` finds: the starter gets another name."""
    made = {
        "lab-15-argparse": "argparse_lab.py",
        "lab-17-gettext": "gettext_lab.py",
        "lab-18-locale": "locale_lab.py",
        "lab-19-torch": "torch_lab.py",
        "lab-20-numpy": "numpy_lab.py",
        "lab-21-class": "class_lab.py",
        "lab-22-3d": "lab_3d.py",
        "lab-23-arg-parse": "arg_parse.py",
        "lab-24-" + "x" * 57: "x" * 57 + ".py",  # 64 characters, the longest id
    }
    for lab_id, name in made.items():
        result = run_infralens("new", lab_id, "--track", "basics", "--title", lab_id, cwd=sample_site)
        assert result.returncode == 0, result.stderr
        assert (sample_site / "code" / lab_id / name).is_file()
        assert f"path: code/{lab_id}/{name}\n" in (sample_site / f"labs/{lab_id}.yml").read_text()
    build = run_infralens("build", cwd=sample_site)
    assert build.returncode == 0, build.stderr
    check = run_infralens("check", *made, cwd=sample_site)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.splitlines()[-1] == f"{len(made)} passed, 0 failed"


def test_new_refuses_an_id_too_long_for_a_file_name(sample_site: Path) -> None:
    lab_id = "lab-15-" + "a" * 248
    before = tree(sample_site)
    result = run_infralens("new", lab_id, "--track", "basics", "--title", "Long", cwd=sample_site)
    refused(result, f"{lab_id}:1:1: error: lab id is 255 characters long; at most 64")
    assert tree(sample_site) == before


@pytest.mark.parametrize("lab_id, shown", [("lab-15-x\n", "lab-15-x\\n"), ("lab-15-\u2028x", "lab-15-\\u2028x"), ("lab-15-\udcffx", "lab-15-\\udcffx")])
def test_new_escapes_an_id_it_refuses(sample_site: Path, lab_id: str, shown: str) -> None:
    result = run_infralens("new", lab_id, "--track", "basics", "--title", "X", cwd=sample_site)
    refused(result, f"{shown}:1:1: error: lab id '{shown}' must look like lab-NN-slug: two or three digits 0-9, "
            "then lowercase letters a-z, digits and single '-', e.g. lab-15-speculative-decoding")
    assert len(result.stderr.splitlines()) == 2


def test_new_sees_a_manifest_with_the_yaml_suffix(sample_site: Path) -> None:
    assert run_infralens("new", "lab-16-other", "--track", "basics", "--title", "Other", cwd=sample_site).returncode == 0
    (sample_site / "labs/lab-16-other.yml").rename(sample_site / "labs/lab-15-twin.yaml")
    assert run_infralens("build", cwd=sample_site).returncode == 0
    result = run_infralens("new", "lab-15-twin", "--track", "basics", "--title", "Twin", cwd=sample_site)
    refused(result, "labs/lab-15-twin.yaml:1:1: error: already exists; infralens new never overwrites")
    assert not (sample_site / "labs/lab-15-twin.yml").exists()
    assert not (sample_site / "code/lab-15-twin").exists()


@pytest.mark.parametrize(
    "title, char",
    [("bad \ufffe title", "'\\ufffe' (U+FFFE)"), ("bad \uffff title", "'\\uffff' (U+FFFF)"), ("bad \udcff\udcfe title", "'\\udcff' (U+DCFF)")],
)
def test_new_refuses_a_title_yaml_cannot_hold(sample_site: Path, title: str, char: str) -> None:
    """\\udcff is how Python hands over a byte 0xff of a command line that is not UTF-8."""
    before = tree(sample_site)
    result = run_infralens("new", "lab-16-odd-title", "--track", "basics", "--title", title, cwd=sample_site)
    refused(result, f"--title:1:1: error: title {title!r} has {char}, which a YAML manifest cannot hold")
    assert tree(sample_site) == before


@pytest.mark.parametrize("title", ["two\nlines", "two\u2028lines", "right\u200fto left", "next\x85line"])
def test_new_refuses_a_title_of_more_than_one_line_or_with_invisible_characters(sample_site: Path, title: str) -> None:
    result = run_infralens("new", "lab-16-odd-title", "--track", "basics", "--title", title, cwd=sample_site)
    refused(result, f"--title:1:1: error: title {title!r} must be one line of visible text, without control characters")


@pytest.mark.parametrize(
    "where, message",
    [
        ("code/lab-15-dangle", "already exists; infralens new never overwrites"),
        ("labs/lab-15-dangle.yml", "file not found: labs/lab-15-dangle.yml"),  # what the build says of it
        ("labs/lab-15-dangle.yaml", "file not found: labs/lab-15-dangle.yaml"),
    ],
)
def test_new_refuses_a_dangling_symlink_in_its_way(sample_site: Path, tmp_path: Path, where: str, message: str) -> None:
    """A link to nowhere is in the way too: writing through it would create a file outside the site."""
    (sample_site / where).symlink_to(tmp_path / "nowhere")
    result = run_infralens("new", "lab-15-dangle", "--track", "basics", "--title", "Dangle", cwd=sample_site)
    refused(result, f"{where}:1:1: error: {message}")
    assert not (tmp_path / "nowhere").exists()
    assert not (sample_site / "code/lab-15-dangle").exists() or where == "code/lab-15-dangle"


def run_unprivileged(*args: str, cwd: Path):
    """Run infralens so that file modes bind it: as root, without the capabilities that ignore them."""
    import os
    import shutil
    import subprocess
    import sys

    if os.geteuid() != 0:
        return run_infralens(*args, cwd=cwd)
    if not shutil.which("capsh"):
        pytest.skip("running as root without capsh: file modes cannot bind")
    drop = "--drop=cap_dac_override,cap_dac_read_search,cap_fowner"
    command = ["capsh", drop, "--", "-c", 'exec "$0" "$@"', sys.executable, "-m", "infralens", *args]
    return subprocess.run(command, check=False, cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("folder", ["labs", "code"])
def test_new_leaves_nothing_behind_when_it_cannot_write(sample_site: Path, folder: str) -> None:
    before = tree(sample_site)
    (sample_site / folder).chmod(0o555)
    try:
        result = run_unprivileged("new", "lab-15-locked", "--track", "basics", "--title", "Locked", cwd=sample_site)
    finally:
        (sample_site / folder).chmod(0o755)
    path = {"labs": "labs/lab-15-locked.yml", "code": "code/lab-15-locked"}[folder]
    refused(result, f"{path}:1:1: error: cannot write {path}: Permission denied")
    assert tree(sample_site) == before


def test_two_new_at_once_take_a_number_once(sample_site: Path) -> None:
    import subprocess
    import sys

    runs = [
        subprocess.Popen([sys.executable, "-m", "infralens", "new", f"lab-20-{name}", "--track", "basics", "--title", name], cwd=sample_site, stderr=subprocess.PIPE, text=True)
        for name in "abcdef"
    ]
    errors = [run.communicate(timeout=120)[1] for run in runs]
    assert [run.returncode for run in runs].count(0) == 1, errors
    assert all("error: lab number 20 is already used by lab-20-" in error for run, error in zip(runs, errors) if run.returncode)
    assert run_infralens("build", cwd=sample_site).returncode == 0


def test_titles_yaml_python_jinja_or_html_would_misread_build_and_check(sample_site: Path) -> None:
    titles = [
        "{{ title }} {% raw %}", "</script><script>alert(1)</script>", "a: b", "# not a comment", "&anchor", "*alias", "!tag",
        "- item", "null", "it's", "%(prog)s 100%", "שלום עולם", "\U0010ffff \ufdd0", "x" * 10_000,
    ]
    ids = [f"lab-{30 + i}-title" for i in range(len(titles))]
    for lab_id, title in zip(ids, titles):
        result = run_infralens("new", lab_id, "--track", "basics", "--title", title, cwd=sample_site)
        assert result.returncode == 0, result.stderr
    build = run_infralens("build", "--strict", cwd=sample_site)
    assert build.returncode == 0, build.stderr
    page = (sample_site / "output/labs/lab-31-title/index.html").read_text()
    assert "<h1>&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;</h1>" in page
    check = run_infralens("check", *ids, cwd=sample_site)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.splitlines()[-1] == f"{len(ids)} passed, 0 failed"
