"""The package's families import only downward: the rule infralens/__init__.py draws, held.

Every import of the package's own modules is read from the source (function-local ones and those
under `if TYPE_CHECKING:` included), so an arrow against the order fails here before it can grow
into a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import infralens

pytestmark = pytest.mark.unit

PACKAGE = Path(infralens.__file__).parent

LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "urls", "child"),
    ("text",),
    ("model",),
    ("lab", "project"),
    ("check",),
    ("build",),
    ("scaffold", "serve"),
    ("cli",),
    ("__main__",),
)
"""From the ground up: a unit (a family or a top-level module) imports only units on lower rows.
Units on one row are siblings and do not import each other."""

RANK = {unit: rank for rank, row in enumerate(LAYERS) for unit in row}

PROGRAMS = "child"
"""The family of programs `check` starts by path: they import nothing of the package."""


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "theme" not in p.relative_to(PACKAGE).parts)


def unit_of(module: str) -> str | None:
    """`infralens.model.lab` → `model`; `infralens.cli` → `cli`; `infralens` → None (the face)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def dotted(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def own_imports(path: Path) -> list[tuple[ast.stmt, str, bool]]:
    """Every import of the package's own modules in a file: (node, module, inside a function)."""
    package = dotted(path) if path.name == "__init__.py" else dotted(path).rpartition(".")[0]
    return imports_in(path.read_text(encoding="utf-8"), package)


def imports_in(text: str, package: str) -> list[tuple[ast.stmt, str, bool]]:
    """Every import of infralens modules in a module's text, read as a module of `package`."""
    tree = ast.parse(text)
    local: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            local.update(id(child) for child in ast.walk(node) if child is not node)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from infralens import model` imports the module infralens.model
            targets = [f"{base}.{alias.name}" if base == "infralens" and alias.name != "__version__" else base for alias in node.names]
        else:
            continue
        for target in dict.fromkeys(targets):
            if target == "infralens" or target.startswith("infralens."):
                found.append((node, target, id(node) in local))
    return found


def test_every_module_belongs_to_a_placed_unit() -> None:
    unplaced = {dotted(p) for p in modules() if unit_of(dotted(p)) is not None and unit_of(dotted(p)) not in RANK}
    assert not unplaced, f"place these in LAYERS (and in infralens/__init__.py's drawing): {sorted(unplaced)}"


def against_the_order(source: str, into: str | None) -> bool:
    """Whether unit `source` importing unit `into` (None: the package's face) breaks the rule."""
    return into is not None and into != source and RANK[into] >= RANK[source]


def test_the_rule_refuses_upward_and_sideways_imports() -> None:
    assert not against_the_order("build", "model") and not against_the_order("model", "model")
    assert not against_the_order("cli", None)  # the face's __version__
    assert against_the_order("model", "build")  # upward
    assert against_the_order("lab", "project") and against_the_order("project", "lab")  # siblings
    assert against_the_order("errors", "child")


def test_imports_run_only_downward() -> None:
    wrong = []
    for path in modules():
        source = unit_of(dotted(path))
        if source is None:
            assert not own_imports(path), "the package's face imports nothing of its own"
            continue
        for node, target, _ in own_imports(path):
            into = unit_of(target)
            if against_the_order(source, into):
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {source} (row {RANK[source]}) imports {target} (row {RANK[into]})")
    assert not wrong, "imports against the order:\n" + "\n".join(wrong)


def test_the_programs_check_starts_import_nothing_of_the_package() -> None:
    leaks = [
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {target}"
        for path in (PACKAGE / PROGRAMS).glob("*.py")
        for node, target, _ in own_imports(path)
    ]
    assert not leaks


def test_a_function_local_import_says_why() -> None:
    """An import inside a function carries a one-line reason: a comment on its line, or above it or
    above the run of imports it belongs to."""
    silent = []
    for path in modules():
        lines = path.read_text(encoding="utf-8").split("\n")
        for node, target, local in own_imports(path):
            if not local:
                continue
            first = node.lineno
            while first > 1 and lines[first - 2].strip().startswith(("from ", "import ")):
                first -= 1  # a run of imports shares the reason above its first line
            above = lines[first - 2].strip() if first > 1 else ""
            if "#" not in lines[node.lineno - 1] and not above.startswith("#"):
                silent.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {target}")
    assert not silent, "function-local imports without a reason:\n" + "\n".join(silent)


def test_the_reader_sees_every_shape_of_import() -> None:
    """Top-level, function-local, `from infralens import x` and relative imports are all read,
    so the checks above can fail."""
    text = (
        "from infralens.build.pipeline import build\n"
        "from . import schema\n"
        "from .starter import Starter\n"
        "def f():\n"
        "    import infralens.check.runner\n"
        "    from infralens import cli, __version__\n"
    )
    assert [(target, local) for _, target, local in imports_in(text, "infralens.model")] == [
        ("infralens.build.pipeline", False),
        ("infralens.model", False),
        ("infralens.model.starter", False),
        ("infralens.check.runner", True),
        ("infralens.cli", True),
        ("infralens", True),
    ]
