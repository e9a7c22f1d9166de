"""What the last build read, by file stamp (workspace.Seen): a manifest or starter whose stamp is the
same is not read again; any change of the stamp (an edit that kept size and mtime included), a
file too young to trust and a full build all read it again, and the pages show every edit."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from infralens.build import build
from infralens.project import workspace
from infralens.project.workspace import Workspace

STARTER = "code/lab-01-sample/kv.py"
MANIFEST = "labs/lab-01-sample.yml"


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The project files the workspace reads, by path relative to the site, in order."""
    seen: list[str] = []
    original = Workspace.read_text

    def read_text(self: Workspace, path: Path, *args, **kwargs):
        seen.append(os.path.relpath(os.path.realpath(path), os.path.realpath(self.root)))
        return original(self, path, *args, **kwargs)

    monkeypatch.setattr(Workspace, "read_text", read_text)
    return seen


@pytest.fixture
def trusted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files just written count as old enough to trust their stamps (the tests would wait 2 s each otherwise)."""
    monkeypatch.setattr(workspace, "RACY_NS", -10**12)


@pytest.fixture
def site(sample_site: Path, tmp_path: Path) -> Workspace:
    return Workspace.open(sample_site / "site.yml", tmp_path / "out", tmp_path / "cache")


@pytest.mark.cli
def test_a_file_as_the_last_build_read_it_is_not_read_again(site: Workspace, reads: list[str], trusted: None) -> None:
    build(site)
    first = set(reads)
    reads.clear()
    starter = site.root / STARTER
    starter.write_text(starter.read_text().replace("# one K and one V vector per KV head", "# K and V, edited"))
    assert build(site).rendered == 1
    assert STARTER in first and MANIFEST in first
    # site.yml is read on every build; of the labs' files, only the edited starter and the manifest
    # of its lab (parsed again to render it)
    assert set(reads) == {"site.yml", STARTER, MANIFEST}
    assert "# K and V, edited" in (site.out / f"{STARTER}.html").read_text()
    assert "# K and V, edited" in (site.out / STARTER).read_text()


@pytest.mark.cli
def test_files_too_young_to_trust_are_read_again(site: Workspace, reads: list[str]) -> None:
    build(site)  # the sample site was just written: every stamp is within RACY_NS of the build
    first = set(reads)
    reads.clear()
    assert build(site).rendered == 0
    assert set(reads) == first and STARTER in first


@pytest.mark.cli
def test_an_edit_that_keeps_size_and_mtime_is_read(site: Workspace, reads: list[str], trusted: None) -> None:
    build(site)
    starter = site.root / STARTER
    before = starter.stat()
    text = starter.read_text()
    edited = text.replace("# one K and one V vector per KV head", "# one K and one V vector per KV HEAD")
    assert len(edited) == len(text) and edited != text
    time.sleep(0.01)
    starter.write_text(edited)
    os.utime(starter, ns=(before.st_atime_ns, before.st_mtime_ns))  # the ctime still moves
    reads.clear()
    assert build(site).rendered == 1
    assert STARTER in reads
    assert "vector per KV HEAD" in (site.out / f"{STARTER}.html").read_text()


@pytest.mark.cli
def test_a_manifest_edit_is_read_and_shown(site: Workspace, reads: list[str], trusted: None) -> None:
    build(site)
    manifest = site.root / MANIFEST
    manifest.write_text(manifest.read_text().replace("title: Sample KV bytes", "title: Renamed KV bytes"))
    reads.clear()
    build(site)
    assert MANIFEST in reads and "labs/lab-02-notes.yml" in reads  # lab 02's pager names lab 01: rendered again
    assert "Renamed KV bytes" in (site.out / "labs/lab-02-notes/index.html").read_text()


@pytest.mark.cli
def test_a_full_build_reads_everything(site: Workspace, reads: list[str], trusted: None) -> None:
    build(site)
    first = set(reads)
    reads.clear()
    build(site, full=True)
    assert set(reads) == first


@pytest.mark.unit
@pytest.mark.parametrize("parts", [(), ("",), ("ab", "c"), ("a", "bc"), ("é\u2028x", "\0"), ("a", b"b\xff"), (b"",), ("x" * 70000, "y")])
def test_a_digest_hashes_each_part_followed_by_a_nul(parts: tuple) -> None:
    import hashlib

    from infralens.project.workspace import digest

    hasher = hashlib.blake2b(digest_size=16)
    for part in parts:
        hasher.update((part.encode() if isinstance(part, str) else part) + b"\0")
    assert digest(*parts) == hasher.hexdigest()
    assert digest("ab", "c") != digest("a", "bc")
