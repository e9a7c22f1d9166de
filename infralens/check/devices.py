"""The machine `check` runs on: its CPU, its NVIDIA GPUs, its torch build, and what a run needs of them.

`detect_machine` is the only function here that reads the machine (`/proc/cpuinfo`, `nvidia-smi`,
the installed torch's `version.py`, never importing torch); the rest is pure, so a run's device
needs and the hardware line it records can be tested with any machine described by hand.
"""

from __future__ import annotations

import csv
import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass
from importlib import metadata, util
from pathlib import Path

from infralens.model.starter import RunSpec

NVIDIA_SMI_QUERY = "index,uuid,name,memory.total,driver_version"
"""The columns `detect_machine` asks nvidia-smi for, in order (memory in MiB, with nounits)."""

MOST_GPUS = 1024
"""More GPU indices than one machine has: an index past it is not one nvidia-smi means."""
MOST_MIB = 2**24
"""More memory than one GPU has (16 TiB), in MiB."""
_OUTSIDE_NUMBER = re.compile(r"[0-9]{1,12}(?:\.[0-9]{1,6})?")


@dataclass(kw_only=True, frozen=True)
class Gpu:
    """One NVIDIA GPU as nvidia-smi lists it."""

    index: int
    uuid: str
    name: str
    memory: int
    """Bytes of memory the board has."""
    driver: str


@dataclass(kw_only=True, frozen=True)
class Machine:
    """What a run can use on the machine checking it."""

    cpu: str
    """The CPU's model name, with its count of logical cores."""
    python: str
    torch: str
    """The installed torch's version, with its build tag (2.13.0+cpu), or 'none'."""
    cuda: str | None
    """The CUDA version torch was built with; None for a CPU build (or no torch)."""
    gpus: tuple[Gpu, ...] = ()
    """The GPUs a starter may use: those CUDA_VISIBLE_DEVICES lets it see."""
    hidden: bool = False
    """True when there are GPUs but CUDA_VISIBLE_DEVICES hides every one of them."""
    unread: tuple[str, ...] = ()
    """What was read from nvidia-smi or the environment and refused, each saying why: the GPU it
    described is left out, and a run that needs one says so."""

    def missing(self, run: RunSpec, torch: bool = True) -> str | None:
        """Why a run cannot run here ('needs cuda: …'), or None when it can. A cuda run of a Python
        starter needs a CUDA build of torch too; a compiled CUDA program (`torch=False`) does not."""
        if run.device == "cpu":
            return None
        if not self.gpus:
            why = "CUDA_VISIBLE_DEVICES hides every GPU" if self.hidden else "this machine has no NVIDIA GPU (nvidia-smi lists none)"
            unread = f" ({'; '.join(self.unread)})" if self.unread else ""
            return f"needs cuda: {why}{unread}"
        if self.cuda is None and torch:
            return f"needs cuda: torch {self.torch} is not a CUDA build"
        largest = max(self.gpus, key=lambda gpu: gpu.memory)
        if largest.memory < run.gpu_bytes:
            return f"needs cuda with {run.gpu_memory} of GPU memory: the largest GPU here has {gib(largest.memory)} ({largest.name})"
        return None

    def hardware(self, device: str, python: bool = True) -> str:
        """The hardware line a run on `device` records: what a reader needs to compare its figures.
        A compiled program's (`python=False`) names no torch or Python: its compiler is on its own line."""
        software = f"; torch {self.torch}, Python {self.python}" if python else ""
        if device == "cpu" or not self.gpus:
            return f"CPU {self.cpu}{software}"
        gpu = self.gpus[0]
        more = f" (and {len(self.gpus) - 1} more)" if len(self.gpus) > 1 else ""
        cuda = f", CUDA {self.cuda}" if self.cuda and python else ""
        return f"{gpu.name}, {gib(gpu.memory)}{more}; driver {gpu.driver}{cuda}{software}; CPU {self.cpu}"


def gib(size: int) -> str:
    return f"{size / 2**30:.1f} GiB"


def outside_number(text: str, most: float) -> float | None:
    """Read a number that comes from outside (nvidia-smi, the environment), or None.

    ASCII digits with an optional fraction, from 0 to `most`: `inf`, `1e400`, `²` or 400 digits,
    which float() and int() take or choke on, are not numbers a tool prints.
    """
    text = text.strip()
    if not _OUTSIDE_NUMBER.fullmatch(text):
        return None
    value = float(text)
    return value if value <= most else None


def shown(text: str) -> str:
    """An outside value as a message quotes it: cut to 40 characters."""
    return repr(text if len(text) <= 40 else text[:40] + "…")


def read_gpus(listing: str) -> tuple[tuple[Gpu, ...], tuple[str, ...]]:
    """Read `nvidia-smi --query-gpu=NVIDIA_SMI_QUERY --format=csv,noheader,nounits` output: the
    GPUs, and why each row that looks like a GPU but whose numbers cannot be read is left out."""
    gpus, refused = [], []
    for number, row in enumerate(csv.reader(listing.splitlines(), skipinitialspace=True), start=1):
        if len(row) != 5 or not row[0].strip().isdigit():  # a message, not a row
            continue
        index, uuid, name, memory, driver = (cell.strip() for cell in row)
        at = outside_number(index, MOST_GPUS)
        size = 0.0 if memory == "[N/A]" else outside_number(memory, MOST_MIB)  # "[N/A]" on some boards: memory unknown
        if at is None or at != int(at):
            refused.append(f"nvidia-smi row {number}: index {shown(index)} is not a GPU index")
        elif size is None:
            refused.append(f"nvidia-smi row {number}: memory {shown(memory)} is not a number of MiB")
        else:
            gpus.append(Gpu(index=int(at), uuid=uuid, name=name, memory=round(size * 2**20), driver=driver))
    return tuple(gpus), tuple(refused)


def visible(gpus: tuple[Gpu, ...], setting: str | None) -> tuple[Gpu, ...]:
    """The GPUs CUDA_VISIBLE_DEVICES lets a process see, in its order.

    CUDA reads the list up to its first entry that names no GPU; an entry is an index (ASCII
    digits) or a (prefix of a) UUID. Unset: every GPU.
    """
    if setting is None:
        return gpus
    chosen: list[Gpu] = []
    for entry in (part.strip() for part in setting.split(",")):
        index = outside_number(entry, MOST_GPUS) if "." not in entry else None
        match = [gpu for gpu in gpus if (index is not None and gpu.index == index) or (entry.startswith("GPU-") and gpu.uuid.startswith(entry))]
        if len(match) != 1 or match[0] in chosen:
            break
        chosen.append(match[0])
    return tuple(chosen)


def unread_setting(setting: str | None) -> tuple[str, ...]:
    """Why CUDA_VISIBLE_DEVICES's entries that look like numbers (`²`, `１`) are not GPU indices."""
    entries = (part.strip() for part in (setting or "").split(","))
    return tuple(f"CUDA_VISIBLE_DEVICES: {shown(entry)} is not a GPU index" for entry in entries if entry.isdigit() and outside_number(entry, MOST_GPUS) is None)


def torch_cuda(version_py: str) -> str | None:
    """The CUDA version in the text of torch's version.py (`cuda: Optional[str] = '12.8'`), or None."""
    found = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", version_py, re.MULTILINE)
    return found.group(1) if found else None


def cpu_name(cpuinfo: str, fallback: str, cores: int) -> str:
    """The CPU's model name from /proc/cpuinfo's text (or the fallback), with its logical cores."""
    found = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
    name = re.sub(r"\s+", " ", found.group(1).strip()) if found else fallback or "unknown CPU"
    return f"{name} ({cores} core{'s' if cores != 1 else ''})"


def detect_machine(environ: dict[str, str] | None = None, gpus: bool = True) -> Machine:
    """Describe this machine. nvidia-smi is asked only when it is on PATH, for 10 s at most, and
    only with `gpus` (a check with no run on a GPU leaves them out: a CPU run's line names none)."""
    environ = dict(os.environ) if environ is None else environ
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        cpuinfo = ""
    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = "none"
    cuda = None
    spec = util.find_spec("torch") if torch != "none" else None
    if spec is not None and spec.submodule_search_locations:
        try:
            cuda = torch_cuda(Path(list(spec.submodule_search_locations)[0], "version.py").read_text(encoding="utf-8"))
        except OSError:
            cuda = None
    every: tuple[Gpu, ...] = ()
    refused: tuple[str, ...] = ()
    smi = shutil.which("nvidia-smi", path=environ.get("PATH")) if gpus else None
    if smi is not None:
        try:
            listed = subprocess.run([smi, f"--query-gpu={NVIDIA_SMI_QUERY}", "--format=csv,noheader,nounits"], capture_output=True, timeout=10)
            # bytes, decoded here: a board's name in another encoding is no reason to stop check
            every, refused = read_gpus(listed.stdout.decode("utf-8", errors="replace")) if listed.returncode == 0 else ((), ())
        except (OSError, subprocess.TimeoutExpired):
            every = ()
    setting = environ.get("CUDA_VISIBLE_DEVICES")
    chosen = visible(every, setting)
    return Machine(
        cpu=cpu_name(cpuinfo, platform.processor(), os.cpu_count() or 1),
        python=platform.python_version(),
        torch=torch,
        cuda=cuda,
        gpus=chosen,
        hidden=bool(every) and not chosen,
        unread=refused + (unread_setting(setting) if gpus else ()),
    )


def device_files(device: str) -> tuple[str, ...]:
    """The files under /dev a run on `device` must reach inside the sandbox, whose /dev has none
    of them: NVIDIA's control, per-GPU and unified-memory devices."""
    if device != "cuda":
        return ()
    return tuple(sorted(str(path) for path in Path("/dev").glob("nvidia*")))
