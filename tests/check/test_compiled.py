"""Starters in C++ and CUDA: a lab written outside this repository, built with the symbol and region
it names, compiled and run by `check`; a one-character break fails at the starter's line; a CUDA
starter on a machine with nvcc and no GPU is compiled and reported "compiled", never passed; a new
compiler version runs it again. The pure parts (definitions by tree-sitter, reading a compiler's
first error, the run spec's defaults) are tested on their own.
"""

from __future__ import annotations

import json
import os
import shutil
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import run_infralens

from infralens.check.compile import first_error, nvcc_column, version_in
from infralens.model.parse import parse_lab
from infralens.text.clike import definitions, matching

GPP = shutil.which("g++")
NVCC = shutil.which("nvcc")
GPU = shutil.which("nvidia-smi")

QUEUE = """\
#include <cstdio>
#include <vector>

namespace rt {
// region ring
template <class T>
class Ring {
 public:
  explicit Ring(int n) : items_(n) {}
  bool push(T x) {
    items_[0] = x;
    return true;
  }
  bool push(T x, int times);

 private:
  std::vector<T> items_;
};
// endregion

template <class T>
bool Ring<T>::push(T x, int times) {
  for (int i = 0; i < times; ++i) push(x);
  return true;
}
}  // namespace rt

int main() {
  rt::Ring<int> r(4);
  std::printf("pushed %d, 1.25 per tick\\n", r.push(3, 2) ? 2 : 0);
  return 0;
}
"""

KERNEL = """\
#include <cstdio>

// region kernel
template <int TILE>
__global__ void copy_tile(float* out, const float* in) {
  __shared__ float tile[TILE][TILE + 1];  // +1: no bank conflicts
  tile[threadIdx.y][threadIdx.x] = in[threadIdx.y * TILE + threadIdx.x];
  __syncthreads();
  out[threadIdx.y * TILE + threadIdx.x] = tile[threadIdx.y][threadIdx.x];
}
// endregion

int main() {
  float *in = nullptr, *out = nullptr;
  cudaMalloc(&in, 32 * 32 * sizeof(float));
  cudaMalloc(&out, 32 * 32 * sizeof(float));
  copy_tile<32><<<1, dim3(32, 32)>>>(out, in);
  std::printf("copied: %s\\n", cudaGetErrorString(cudaDeviceSynchronize()));
  return 0;
}
"""


def site_with(tmp_path: Path, starter: str, code: str, preview: str, key_line: str, run: str = "{}", prose: str = "Goal.") -> Path:
    """A one-lab site whose starter is `code/lab-01-c/<starter>`."""
    site = tmp_path / "site"
    (site / "labs").mkdir(parents=True)
    (site / "code/lab-01-c").mkdir(parents=True)
    (site / "site.yml").write_text("title: C\ntagline: t\ntracks:\n  - id: systems\n    title: Systems\n")
    (site / "code/lab-01-c" / starter).write_text(code)
    (site / "labs/lab-01-c.yml").write_text(textwrap.dedent(f"""\
        number: 1
        title: Compiled
        track: systems
        summary: A compiled starter.
        concept_goal: {prose}
        mechanism: [One.]
        starters:
          - path: code/lab-01-c/{starter}
            role: The code.
            run: {run}
        preview:
          starter: code/lab-01-c/{starter}
          {preview}
        key_blocks:
          - name: the line
            lines: "{key_line}"
            note: Why.
        checkpoints: [One.]
        misunderstandings: [One.]
        interview: Say it.
        intuition: [One.]
        further_reading:
          - {{kind: official, title: cppreference, url: "https://en.cppreference.com/"}}
        """))
    return site


@pytest.mark.unit
def test_definitions_are_found_with_their_templates_scopes_and_overloads() -> None:
    found = {(d.name, d.kind, d.first, d.last) for d in definitions(QUEUE, "cpp")}
    assert ("rt", "namespace", 4, 26) in found
    assert ("rt::Ring", "class", 6, 18) in found  # its template line included
    assert ("rt::Ring::push", "function", 10, 13) in found
    assert ("rt::Ring::push", "function", 21, 25) in found  # out of the class: `Ring<T>::push` with its template
    assert ("main", "function", 28, 32) in found
    assert [d.first for d in matching(definitions(QUEUE, "cpp"), "push")] == [10, 21]
    assert [d.name for d in matching(definitions(QUEUE, "cpp"), "Ring<int>")] == ["rt::Ring"]
    kernel = matching(definitions(KERNEL, "cuda"), "copy_tile")
    assert [(d.kind, d.first, d.last) for d in kernel] == [("kernel", 4, 10)]
    operators = "struct S {\n  void* operator new(unsigned long n) { return ::operator new(n); }\n  bool operator < (const S&) const { return true; }\n};\n"
    assert [d.name for d in definitions(operators, "cpp")] == ["S", "S::operator new", "S::operator<"]
    assert [d.first for d in matching(definitions(operators, "cpp"), "operator <")] == [3]


@pytest.mark.unit
def test_a_compilers_first_error_is_read_back_to_the_starters_line() -> None:
    gcc = "/w/q.cpp: In function 'int main()':\n/w/q.cpp:3:12: error: expected ';' before 'return'\n/w/q.cpp:4:1: error: second\n"
    assert first_error(gcc, "/w", "code/lab", {}) == first_error(gcc, "/w/", "code/lab", {})
    error = first_error(gcc, "/w", "code/lab", {})
    assert (error.path, error.line, error.column, error.message) == ("code/lab/q.cpp", 3, 12, "expected ';' before 'return'")
    header = "In file included from /w/q.cpp:1:\n/w/util/q.hpp:2:5: error: 'x' was not declared\n"
    assert first_error(header, "/w", "code/lab", {}).path == "code/lab/util/q.hpp"
    assert first_error("/usr/include/c++/12/vector:9:1: error: system\n", "/w", "code/lab", {}) is None  # not the starter's
    written = "__global__ void k(float* x) { int i = threadIdx.x x[i] = i; }"
    echo = "  __attribute__((global)) void k(float* x) { int i = threadIdx.x x[i] = i; }"  # nvcc echoes the line rewritten
    nvcc = f'/w/k.cu(1): error: expected a ";"\n{echo}\n' + " " * echo.index("x[i]") + "^\n"
    error = first_error(nvcc, "/w", "code/lab", {"code/lab/k.cu": written})
    assert (error.line, error.column, error.message) == (1, written.index("x[i]") + 1, 'expected a ";"')
    assert nvcc_column("\n  echo\n  no caret here\n", "echo") == 1
    assert version_in("nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\n") == "13.0.88"
    assert version_in("g++ (Debian 12.2.0-14+deb12u1) 12.2.0\nCopyright\n") == "12.2.0"


@pytest.mark.unit
def test_a_cuda_starter_runs_on_cuda_and_a_compiler_is_for_compiled_starters_only() -> None:
    def lab(path: str, run: str):
        text = f"number: 1\ntitle: T\ntrack: t\nsummary: S.\nconcept_goal: G.\nmechanism: [M.]\nstarters:\n  - path: {path}\n    role: R.\n    run: {run}\n"
        return parse_lab("labs/lab-01-t.yml", "lab-01-t", text + "preview: {starter: " + path + ", lines: 1-2}\nkey_blocks: [{name: k, lines: 1-1, note: N.}]\ncheckpoints: [C.]\nmisunderstandings: [M.]\ninterview: I.\nintuition: [I.]\nfurther_reading: [{kind: paper, title: P, url: 'https://example.org'}]\n")

    assert lab("code/lab-01-t/k.cu", "{args: ['4']}").starters[0].run.device == "cuda"
    assert lab("code/lab-01-t/q.cpp", "{compiler: clang++, flags: [-std=c++20]}").starters[0].run.compiler == "clang++"
    with pytest.raises(Exception, match=r"a CUDA program runs on cuda: remove `device: cpu`"):
        lab("code/lab-01-t/k.cu", "{device: cpu}")
    with pytest.raises(Exception, match=r"compiler is for a compiled starter \(\.cpp \.cc \.cxx \.cu\); code/lab-01-t/t\.py runs as it is"):
        lab("code/lab-01-t/t.py", "{compiler: g++}")


@pytest.mark.cli
@pytest.mark.skipif(GPP is None, reason="needs g++ (scripts/install-compilers installs it)")
def test_a_cpp_lab_builds_checks_and_fails_at_the_broken_line(tmp_path: Path) -> None:
    site = site_with(tmp_path, "queue.cpp", QUEUE, "symbol: Ring", "items_[0] = x;", run="{expect: ['pushed 2']}", prose="It serves 1.25 per tick.")
    built = run_infralens("build", cwd=site)
    assert built.returncode == 0, built.stderr
    page = (site / "output/labs/lab-01-c/index.html").read_text()
    assert '<span id=L6>' in page and '<span id=L18>' in page and '<span id=L19>' not in page  # the class and its template line, no more
    assert "No line-end values: execution state is recorded for Python starters only, and this is C++" in page
    assert "g++ -std=c++20 -O2 -Wall -Wextra -Werror code/lab-01-c/queue.cpp -o queue &amp;&amp; ./queue" in page
    checked = run_infralens("check", "--json", str(tmp_path / "r.json"), cwd=site)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.splitlines()[-1] == "1 passed, 0 failed"
    record = json.loads((tmp_path / "r.json").read_text())["results"][0]
    assert record["status"] == "passed" and record["built"].startswith("g++ ") and record["built"].endswith(" -std=c++20 -O2 -Wall -Wextra -Werror")
    assert "torch" not in record["hardware"]
    assert run_infralens("build", cwd=site).returncode == 0
    page = (site / "output/labs/lab-01-c/index.html").read_text()
    assert f"Built with <code>{record['built']}</code>" in page

    region = site_with(tmp_path / "r", "queue.cpp", QUEUE, "region: ring", "items_[0] = x;")
    assert run_infralens("build", cwd=region).returncode == 0

    (site / "code/lab-01-c/queue.cpp").write_text(QUEUE.replace("items_[0] = x;", "items_[0] = x"))
    broken = run_infralens("check", cwd=site)
    assert broken.returncode == 1
    errors = [line for line in broken.stderr.splitlines() if ": error: " in line and not line.startswith("  |")]
    assert errors[0].startswith("labs/lab-01-c.yml:8:11: error: code/lab-01-c/queue.cpp: does not compile with g++ ")
    assert ": code/lab-01-c/queue.cpp:12:5: expected " in errors[0] and errors[0].endswith(" before ‘return’")
    assert errors[1].startswith("code/lab-01-c/queue.cpp:12:5: error: ")


@pytest.mark.cli
@pytest.mark.skipif(GPP is None, reason="needs g++ (scripts/install-compilers installs it)")
def test_another_compiler_version_runs_a_stored_compiled_starter_again(tmp_path: Path) -> None:
    site = site_with(tmp_path, "queue.cpp", QUEUE, "symbol: Ring", "items_[0] = x;")
    assert run_infralens("check", cwd=site).returncode == 0
    assert "(stored result)" in run_infralens("check", cwd=site).stdout
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "g++").write_text(f'#!/bin/sh\nif [ "$1" = --version ]; then echo "g++ (Shim) 99.1.0"; exit 0; fi\nexec {GPP} "$@"\n')
    (shim / "g++").chmod(0o755)
    again = run_infralens("check", "--json", str(tmp_path / "r.json"), cwd=site, env={"PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"})
    assert again.returncode == 0, again.stderr
    assert "(stored result)" not in again.stdout
    assert json.loads((tmp_path / "r.json").read_text())["results"][0]["built"].startswith("g++ 99.1.0 ")


@pytest.mark.cli
@pytest.mark.skipif(NVCC is None or GPU is not None, reason="needs nvcc and no GPU: with a GPU the kernel runs")
def test_a_cuda_starter_without_a_gpu_is_compiled_and_never_passed(tmp_path: Path) -> None:
    site = site_with(tmp_path, "copy.cu", KERNEL, "symbol: copy_tile", "__syncthreads();", run="{expect: ['copied: no error']}")
    checked = run_infralens("check", "--json", str(tmp_path / "r.json"), "--junit", str(tmp_path / "r.xml"), cwd=site)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.splitlines()[-1] == "0 passed, 0 failed, 1 compiled (not run)"
    assert "compiled    " in checked.stdout and "needs cuda: this machine has no NVIDIA GPU" in checked.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    assert (report["passed"], report["failed"], report["compiled"], report["results"][0]["status"]) == (0, 0, 1, "compiled")
    case = ET.parse(tmp_path / "r.xml").getroot().find("testcase")
    assert case.find("skipped").get("type") == "compiled" and case.find("skipped").get("message").startswith("compiled, not run: needs cuda")
    assert run_infralens("build", cwd=site).returncode == 0
    page = (site / "output/labs/lab-01-c/index.html").read_text()
    assert "Last run on cuda: <strong>compiled, not run</strong>" in page
    assert "nvcc -std=c++20 -O2 -arch=sm_80 -Werror all-warnings code/lab-01-c/copy.cu -o copy" in page

    (site / "code/lab-01-c/copy.cu").write_text(KERNEL.replace("__syncthreads();", "__syncthreads()"))
    broken = run_infralens("check", cwd=site)
    assert broken.returncode == 1
    errors = [line for line in broken.stderr.splitlines() if ": error: " in line and not line.startswith("  |")]
    assert errors[1].startswith("code/lab-01-c/copy.cu:9:")  # nvcc names the line after the missing ';'


@pytest.mark.unit
def test_a_runs_env_is_set_for_it_and_shown_in_its_command() -> None:
    from infralens.check.process import clean_env
    from infralens.model.starter import RunSpec, command_line

    spec = RunSpec(env=(("TRITON_INTERPRET", "1"),), args=("--n", "2"))
    assert command_line("code/lab-24-t/t.py", spec) == "TRITON_INTERPRET=1 python code/lab-24-t/t.py --n 2"
    assert command_line("code/lab-22-q/q.cpp", spec).endswith(" -o q && TRITON_INTERPRET=1 ./q --n 2")
    env = clean_env("/home/x", "cpu", spec.env)
    assert env["TRITON_INTERPRET"] == "1" and env["HOME"] == "/home/x"
    # What check sets for every run is what a run spec may not: the model's list follows process.py's.
    from infralens.model.starter import RESERVED_ENV

    assert set(clean_env("/home/x", "cpu")) - {"SYSTEMROOT", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"} <= RESERVED_ENV


@pytest.mark.cli
def test_a_runs_env_reaches_the_starter_and_a_reserved_name_is_refused(tmp_path: Path) -> None:
    code = "import os\nprint('interpret', os.environ.get('TRITON_INTERPRET'))\nprint('home set', bool(os.environ.get('HOME')))\n"
    site = site_with(tmp_path, "env.py", code, "lines: 1-2", "print('interpret'", run="{env: {TRITON_INTERPRET: '1'}, expect: ['interpret 1']}")
    checked = run_infralens("check", cwd=site)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    manifest = site / "labs/lab-01-c.yml"
    manifest.write_text(manifest.read_text().replace("{env: {TRITON_INTERPRET: '1'}", "{env: {HOME: /tmp}"))
    refused = run_infralens("build", cwd=site)
    assert refused.returncode == 1
    assert refused.stderr == "labs/lab-01-c.yml:10:17: error: HOME is set by check for every run; a run's env cannot set it\n1 error\n"


@pytest.mark.cli
@pytest.mark.skipif(GPP is None, reason="needs g++ (scripts/install-compilers installs it)")
def test_a_cpp_starter_compiles_and_runs_inside_the_sandbox(tmp_path: Path) -> None:
    from infralens.check.sandbox import SandboxUnavailable, open_sandbox

    try:
        open_sandbox()
    except SandboxUnavailable as exc:
        pytest.skip(str(exc))
    site = site_with(tmp_path, "queue.cpp", QUEUE, "symbol: Ring", "items_[0] = x;", run="{expect: ['pushed 2']}")
    checked = run_infralens("check", "--sandbox", cwd=site)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.splitlines()[-1] == "1 passed, 0 failed"
