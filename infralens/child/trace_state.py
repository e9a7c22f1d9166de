"""Run a Python starter and record what the lines of its excerpt hold: the execution state.

Usage: python trace_state.py STARTER SPEC.json [ARG ...]. SPEC names the line ranges to record
and the file to write the state into; the starter runs as `__main__` with ARG as its arguments,
exactly as `python STARTER ARG ...` would run it, and prints what it would print. A Markdown
starter's SPEC also lists its python blocks ([first line, code], as run_markdown.py takes them):
they run in order in one namespace, each compiled at its real lines of the .md file.

What is recorded, for each statement that starts inside a range:
- the names it binds or mutates (assignment targets, `for` and `with` targets, augmented
  assignments, the base of a subscript or attribute it assigns to), each as a short summary taken
  right after the statement ran;
- for an expression statement that is a call, what it was called on or handed: the receiver of a
  method (`x.add_(y)` → x, `cache.append(k)` → cache), else its plain arguments
  (`dist.all_reduce(total)` → total); modules, functions and classes are left out;
- for `return EXPR`, the value returned ("return"), from the frame's return event;
- for `if`, `elif` and `while`, the branch taken ("branch": true when the next line the frame ran
  is in the body), and how often each way ("taken": [true, false]);
- for a function whose `def` is inside a range: its parameters at entry and its return value.
- for each loop (`for`, `async for`, `while`) whose header or body touches a range, its iterations
  ("loops", by header line; "end": the body's last line), each with the loop's indices and those of
  the loops around it (the targets of their `for`s), briefly summarized.
Every record says when its run started ("t", a count of the line events traced) and, inside loops,
which iteration of each loop around it (outermost first; a header's own iteration last) it ran in
("l", iterations numbered over all calls of the function): the page shows one moment at a time.
A `for` header's last run, which finds its iterator exhausted, is neither a run nor an iteration.
A statement run many times keeps its first SAMPLES runs and its last, with the total count, and
each line says how many calls its function had ("calls"). A frame that has traced LINE_BUDGET
lines stops being traced: its counts then say "at least" ("exact": false), and when it returns,
each name is summarized once more and kept as the last sample of the statement that bound it
last while traced ("at": "return"): a line in a hot loop shows its final value, not the one it had
when tracing stopped. A call left untraced (past the first SAMPLES calls and not a power of two,
or over budget) gets a tracer of its return alone, while RETURNS lasts per function, which keeps
its return value, and its names' values at return as above: the page can show the last call.

Only frames of the starter's own file whose lines touch a range are traced; every other frame
runs at full speed. What the tracer does must not show in what the starter measures: a tensor's
values are read with the starter's torch function and dispatch modes off and never while a
profiler records, and torch.compile is told to leave the tracer's frames alone. The state is capped at MAX_BYTES of JSON ("truncated": true when cut).

This file is run as a script by path and imports nothing of InfraLens (the starter's interpreter
may not have it on its path); tests import it as `infralens.trace_state`.
"""

from __future__ import annotations

import ast
import atexit
import dataclasses
import itertools
import json
import math
import os
import runpy
import sys
import threading
import time
import types
from opcode import opmap

# The tracer's own handles on what it writes the state with, taken before the starter runs: a
# starter that replaces open, json.dump or os._exit changes its own, not these.
_open, _dump, _exit, _fsync = open, json.dump, os._exit, os.fsync

RETURN_VALUE, YIELD_VALUE = opmap["RETURN_VALUE"], opmap["YIELD_VALUE"]

SAMPLES = 3
"""Runs of a statement (or calls of a function) kept from the start; the last one is kept too."""
LINE_BUDGET = 20_000
"""Line events the frames of one function may trace in all, before it runs untraced (a hot loop or
a function called a million times would otherwise crawl)."""
RETURNS = 2_000
"""Untraced calls of one function whose return is still recorded (a summary each): past them, the
page shows the last call that was, and says which."""
RETURN_SECONDS = 0.2
"""Time the summaries at those calls and returns may take, per function, before its calls run untraced
(a method that holds a large tensor would otherwise pay for its min and max on every call)."""
MAX_BYTES = 64 * 1024
"""Largest state a run may record, as JSON."""
TEXT = 80
"""Longest string shown inside a summary."""
ITEMS = 4
"""Elements of a container or values of a tensor shown in a summary."""


# ---------------------------------------------------------------- summaries


def summarize(value, depth: int = 2) -> str:
    """Return a short, plain description of a value, the way a reader wants to see it on a line.

    Runs none of the value's own code (see "Reading a value without running it" below): a
    subclass of int, float or str is shown through its base type's methods, a container only when
    its class reads as its base type does, any other object of the starter's as `<ClassName>`.
    Always text a page can be written in: a lone surrogate is shown as its escape, `\\udc80`.
    """
    try:
        text = _summarize(value, depth)
    except Exception as error:  # a value that cannot describe itself must not stop the starter
        text = f"<{class_name(type(value))}: unreadable ({class_name(type(error))})>"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def number(value, digits: int = 6) -> str:
    """An int with separators, a float with 6 significant digits, as a starter would print them
    (elements of a tensor or array with 4, about as torch prints them)."""
    if type(value) is bool or value is None:
        return repr(value)
    if type(value) is int:
        return f"{value:,}"
    if type(value) is float:
        if math.isnan(value) or math.isinf(value):
            return repr(value)
        return f"{value:,.{digits}g}" if abs(value) >= 1e-4 or value == 0 else f"{value:.{digits}g}"
    return repr(value)


# Reading a value without running it. The tracer runs in the starter's process, between its
# lines: a method of the starter's classes run there (a property getter, __format__, __len__,
# __iter__, __repr__, __getattribute__, even isinstance's look at __class__) could change what the
# starter then computes and prints, or record what it never held. So a value is read through its
# type alone: type() and issubclass on the real class, the C methods of the built-in base types,
# and class dictionaries read as data.

_TYPE_NAME = type.__dict__["__name__"]
_TYPE_MODULE = type.__dict__["__module__"]
_TYPE_MRO = type.__dict__["__mro__"]
_TYPE_DICT = type.__dict__["__dict__"]
_MISSING = object()

CONTAINER_READS = {
    list: ("__iter__", "__len__", "__getitem__"),
    tuple: ("__iter__", "__len__", "__getitem__"),
    set: ("__iter__", "__len__"),
    frozenset: ("__iter__", "__len__"),
    dict: ("__iter__", "__len__", "__getitem__", "items", "keys", "values"),
}
"""What a reader of each built-in container uses: a subclass that defines one of these itself is
not shown as a container (its own methods might say something else than its contents)."""
TENSOR_READS = ("shape", "dtype", "device", "layout", "dim", "numel", "element_size", "is_contiguous", "is_quantized", "is_meta", "is_complex", "detach", "reshape", "tolist", "min", "max", "__getitem__")
"""The tensor attributes _tensor reads: a tensor subclass must take them all from torch."""
LIBRARIES = frozenset({"builtins", "collections", "torch", "numpy"})
"""Packages whose classes' methods are no starter's code: an OrderedDict or a torch.Size reads as
the container it is, a Parameter as a tensor."""


def class_name(kind: type) -> str:
    """A class's own name, read without its metaclass (which could compute one)."""
    name = _TYPE_NAME.__get__(kind)
    return name if type(name) is str else "object"


def class_module(kind: type) -> str:
    """The module a class says it comes from, read without its metaclass; "" when not a string."""
    module = _TYPE_MODULE.__get__(kind)
    return module if type(module) is str else ""


def resolved(kind: type, name: str) -> tuple[object, type | None]:
    """What `name` is on a class, found as the interpreter would (the first class of its MRO whose
    dictionary has it), read as data; with the class that holds it (None when none does)."""
    for owner in _TYPE_MRO.__get__(kind):
        found = _TYPE_DICT.__get__(owner).get(name, _MISSING)
        if found is not _MISSING:
            return found, owner
    return _MISSING, None


def reads_as(kind: type, names: tuple[str, ...]) -> bool:
    """Whether each of `names` on a class comes from a class of one of the LIBRARIES: reading the
    value through them runs none of the starter's code."""
    for name in names:
        _, owner = resolved(kind, name)
        if owner is not None and class_module(owner).split(".")[0] not in LIBRARIES:
            return False
    return True


def static_attribute(value, name: str) -> tuple[bool, object]:
    """What `value.name` holds, read without running code of the value's class: an entry of the
    instance's own dictionary, a slot, a class attribute that is plain data or a function, a torch
    module's parameter, buffer or submodule. A property (or any other descriptor) is not read:
    (False, None)."""
    kind = type(value)
    if issubclass(kind, type):  # a class attribute: Config.layers
        found, _ = resolved(value, name)
        if found is _MISSING or (type(found) is not types.FunctionType and resolved(type(found), "__get__")[0] is not _MISSING):
            return False, None
        return True, found
    on_class, _ = resolved(kind, name)
    descriptor = type(on_class)
    if descriptor is types.MemberDescriptorType:  # a __slots__ slot: read by C code
        try:
            return True, on_class.__get__(value, kind)
        except AttributeError:
            return False, None
    if on_class is not _MISSING and (resolved(descriptor, "__set__")[0] is not _MISSING or resolved(descriptor, "__delete__")[0] is not _MISSING):
        return False, None  # a data descriptor (a property): reading it runs its getter
    own = resolved(kind, "__dict__")[0]
    if type(own) is types.GetSetDescriptorType:
        attributes = own.__get__(value, kind)
        if type(attributes) is dict and name in attributes:
            return True, attributes[name]
    if on_class is not _MISSING:
        if descriptor is types.FunctionType or resolved(descriptor, "__get__")[0] is _MISSING:
            return True, on_class  # plain data, or a method (shown as its function)
        return False, None
    torch = sys.modules.get("torch")
    module = getattr(getattr(torch, "nn", None), "Module", None)
    if module is not None and issubclass(kind, module) and resolved(kind, "__getattr__")[0] is resolved(module, "__getattr__")[0]:
        for group in ("_parameters", "_buffers", "_modules"):  # where nn.Module.__getattr__ looks
            found, held = static_attribute(value, group)
            if found and type(held) is dict and name in held:
                return True, held[name]
    return False, None


def _summarize(value, depth: int) -> str:
    kind = type(value)
    if value is None or kind is bool:
        return repr(value)
    if issubclass(kind, int):
        return number(int.__int__(value))
    if issubclass(kind, float):
        return number(float.__float__(value))
    if issubclass(kind, complex):
        return complex.__repr__(value)
    if issubclass(kind, str):
        text = str.__str__(value)
        limit = TEXT if depth >= 2 else TEXT // 3  # a string inside a container or dataclass: shorter
        return repr(text) if len(text) <= limit else repr(text[:limit]) + f"… ({len(text):,} chars)"
    for base in (bytes, bytearray):
        if issubclass(kind, base):
            return f"{class_name(kind)} of {base.__len__(value):,} bytes"
    name, module = class_name(kind), class_module(kind)
    torch = sys.modules.get("torch")
    if torch is not None and issubclass(kind, torch.Tensor):
        if not reads_as(kind, TENSOR_READS):
            return f"<{name}>"
        return _tensor(value)
    if module.split(".")[0] == "numpy" and resolved(kind, "shape")[1] is not None and resolved(kind, "dtype")[1] is not None:
        return _array(value)
    if module.split(".")[0] == "torch" and name == "dtype":
        return str(value)
    if issubclass(kind, type):
        return f"class {class_name(value)}"
    fields = resolved(kind, "__dataclass_fields__")[0]
    if type(fields) is dict:
        if depth <= 0:
            return f"{name}(…)"
        shown = []
        for field in [f for f in fields.values() if type(f) is dataclasses.Field and f._field_type is dataclasses._FIELD][:ITEMS * 2 + 1]:
            found, held = static_attribute(value, field.name)
            shown.append(f"{field.name}={_summarize(held, depth - 1) if found else '…'}")
        more = len(shown) > ITEMS * 2
        return f"{name}({', '.join(shown[:ITEMS * 2])}{', …' if more else ''})"
    for base, names in CONTAINER_READS.items():
        if issubclass(kind, base):
            if not reads_as(kind, names):
                return f"<{name}>"
            return _container(value, base, depth)
    if kind is range:
        return repr(value)
    if kind is types.FunctionType or kind is types.BuiltinFunctionType:
        return f"{name} {value.__name__}"
    if kind is types.MethodType:
        function = value.__func__
        return f"{name} {function.__name__}" if type(function) in (types.FunctionType, types.BuiltinFunctionType) else name
    return f"<{name}>"


def _container(value, base: type, depth: int) -> str:
    """A list, tuple, set, frozenset or dict (or a subclass that reads as one), read by `base`'s own methods."""
    size = base.__len__(value)
    label = class_name(type(value))
    if depth <= 0:
        return f"{label} of {size:,}"
    if base is dict:
        pairs = itertools.islice(dict.items(value), ITEMS)
        shown = ", ".join(f"{_summarize(k, 0)}: {_summarize(v, depth - 1)}" for k, v in pairs)
        return "{" + shown + (f", … {size:,} items" if size > ITEMS else "") + "}"
    if base in (list, tuple):
        shown = ", ".join(_summarize(item, depth - 1) for item in itertools.islice(base.__iter__(value), ITEMS))
    else:  # a set has no order of its own: its items sorted as they are shown
        shown = ", ".join(sorted(_summarize(item, depth - 1) for item in base.__iter__(value))[:ITEMS])
    opening, closing = "[]" if base is list else "()" if base is tuple else "{}"
    more = f", … {size:,} items" if size > ITEMS else ("," if base is tuple and size == 1 else "")
    return f"{opening}{shown}{more}{closing}"


VALUES = 3
"""Leading elements of a tensor or array shown in its summary (beside its min and max)."""


def _values(flat: list) -> str:
    shown = ", ".join(number(v, 4) for v in flat[:VALUES])
    return f"[{shown}{', …' if len(flat) > VALUES else ''}]"


def quiet_torch():
    """A context in which reading a tensor's values runs no torch function or dispatch mode of the
    starter's: its mode would otherwise see, count or time the tracer's own `min()` and `max()`.
    None when this torch has no way to say so (its values are then not read)."""
    import contextlib

    import torch

    try:
        stack = contextlib.ExitStack()
        stack.enter_context(torch._C.DisableTorchFunction())
        from torch.utils._python_dispatch import _disable_current_modes

        stack.enter_context(_disable_current_modes())
        return stack
    except (AttributeError, ImportError, RuntimeError):
        return None


def own_code() -> list:
    """Every code object of this file's functions and methods, nested ones (comprehensions) included."""
    found, todo = [], []
    for value in list(globals().values()):
        members = vars(value).values() if isinstance(value, type) and value.__module__ == __name__ else [value]
        for member in members:
            member = getattr(member, "fget", member)
            code = getattr(member, "__code__", None)
            if code is not None and code.co_filename == __file__:
                todo.append(code)
    while todo:
        code = todo.pop()
        found.append(code)
        todo.extend(c for c in code.co_consts if hasattr(c, "co_code"))
    return found


def profiling(torch) -> bool:
    """Whether the autograd profiler (torch.profiler too) is recording on this thread now."""
    enabled = getattr(getattr(getattr(torch, "_C", None), "_autograd", None), "_profiler_enabled", None)
    return bool(enabled()) if enabled is not None else False


def _tensor(t) -> str:
    import torch

    quiet = quiet_torch()
    if quiet is None:  # even reading its shape would run the starter's modes
        return "Tensor"
    with quiet:
        shape = "(" + ", ".join(str(d) for d in t.shape) + ("," if t.dim() == 1 else "") + ")"
        dtype = str(t.dtype).replace("torch.", "")
        size = t.numel() * t.element_size()
        text = f"Tensor {shape} {dtype} {t.device.type} {size:,} B"
        if t.device.type != "cpu" or str(t.layout) != "torch.strided" or t.numel() == 0 or t.is_quantized or t.is_meta:
            return text
        if not t.is_contiguous() and t.numel() > 1 << 22:
            return text  # reading it in order would copy it whole
        if profiling(torch):
            return text  # the starter's profiler would record the ops that read the values
        flat = t.detach().reshape(-1)
        text += " " + _values(flat[:VALUES + 1].tolist())
        if t.numel() > 1 and not t.is_complex() and str(t.dtype) != "torch.bool":
            text += f" min {number(flat.min().item(), 4)} max {number(flat.max().item(), 4)}"
    return text


def _array(a) -> str:
    shape = "(" + ", ".join(str(d) for d in a.shape) + ("," if a.ndim == 1 else "") + ")"
    text = f"ndarray {shape} {a.dtype} {a.nbytes:,} B"
    if a.size == 0 or a.dtype.kind not in "biuf":
        return text
    flat = a.reshape(-1)
    text += " " + _values(flat[:VALUES + 1].tolist())
    if a.size > 1:
        text += f" min {number(flat.min().item(), 4)} max {number(flat.max().item(), 4)}"
    return text


# ---------------------------------------------------------------- what each statement binds


def _targets(node: ast.AST) -> list[str]:
    """The names an assignment target binds or mutates: `a`, `self.x`, the `a` of `a[i]`."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, (ast.Tuple, ast.List)):
        return [name for element in node.elts for name in _targets(element)]
    if isinstance(node, ast.Starred):
        return _targets(node.value)
    if isinstance(node, ast.Attribute):
        base = dotted(node)
        return [base] if base else []
    if isinstance(node, ast.Subscript):
        return _targets(node.value)
    return []


def dotted(node: ast.AST) -> str | None:
    """`a.b.c` for a chain of attributes on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def statement_names(source: str) -> tuple[dict[int, list[str]], dict[int, int]]:
    """Return what each statement binds, by the line it starts on, and each function's `def` line
    by the line its code starts on (the first decorator's line, as the interpreter numbers it)."""
    names: dict[int, list[str]] = {}
    functions: dict[int, int] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            functions[first] = node.lineno
            continue
        if not isinstance(node, ast.stmt):
            continue
        bound: list[str] = []
        if isinstance(node, ast.Assign):
            bound = [name for target in node.targets for name in _targets(target)]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor)):
            bound = _targets(node.target)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            bound = [name for item in node.items if item.optional_vars is not None for name in _targets(item.optional_vars)]
        for inner in ast.walk(node) if not isinstance(node, (ast.For, ast.AsyncFor, ast.While, ast.If, ast.With, ast.AsyncWith, ast.Try)) else ():
            if isinstance(inner, ast.NamedExpr):
                bound.append(inner.target.id)
        names[node.lineno] = list(dict.fromkeys(bound))
    return names, functions


def statement_shapes(source: str) -> tuple[dict[int, tuple[int, int, int]], set[int], dict[int, tuple[str | None, list[str]]]]:
    """Return, by the line each starts on: the conditions (`if`, `elif`, `while`) as (last line of
    the test, first and last line of the body), the `return EXPR` statements, and the expression
    statements that are calls as (the receiver of a method, or None; the plain names handed)."""
    branches: dict[int, tuple[int, int, int]] = {}
    returns: set[int] = set()
    effects: dict[int, tuple[str | None, list[str]]] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.If, ast.While)):
            branches[node.lineno] = (node.test.end_lineno or node.lineno, node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno)
        elif isinstance(node, ast.Return) and node.value is not None:
            returns.add(node.lineno)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            call = node.value
            receiver = dotted(call.func.value) if isinstance(call.func, ast.Attribute) else None
            handed = [dotted(a) for a in (*call.args, *(k.value for k in call.keywords)) if isinstance(a, (ast.Name, ast.Attribute))]
            effects[node.lineno] = (receiver, [name for name in dict.fromkeys(handed) if name and name != receiver])
    return branches, returns, effects


def statement_loops(source: str) -> tuple[dict[int, tuple[int, int]], dict[int, tuple[int, ...]], set[int]]:
    """Return the loops (`for`, `async for`, `while`) by their header's line, each as the first and
    last line of its body; for every statement, by the line it starts on, the headers of the loops
    whose body holds it in the same frame (outermost first: a nested function's body starts anew);
    and the headers of the `for` loops."""
    loops: dict[int, tuple[int, int]] = {}
    chains: dict[int, tuple[int, ...]] = {}
    fors: set[int] = set()

    def visit(node: ast.AST, chain: tuple[int, ...]) -> None:
        if isinstance(node, ast.stmt):
            chains.setdefault(node.lineno, chain)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            chain = ()  # its body runs in a frame of its own
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            first = node.body[0]
            starts = [first.lineno, *(d.lineno for d in getattr(first, "decorator_list", ()))]
            loops[node.lineno] = (min(starts), node.body[-1].end_lineno or node.body[-1].lineno)
            if not isinstance(node, ast.While):
                fors.add(node.lineno)
            for field, value in ast.iter_fields(node):
                inner = chain + (node.lineno,) if field == "body" else chain
                for child in value if isinstance(value, list) else [value]:
                    if isinstance(child, ast.AST):
                        visit(child, inner)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, chain)

    visit(ast.parse(source), ())
    return loops, chains, fors


def inert(value) -> bool:
    """Whether a value says nothing as what a call was handed: a module, a function or a class."""
    return issubclass(type(value), (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, types.MethodType))  # not isinstance: it may ask the value for __class__


# ---------------------------------------------------------------- the tracer


class Samples:
    """The first SAMPLES records and the last one of something that happens many times."""

    def __init__(self) -> None:
        self.count = 0
        self.kept: list[dict] = []
        self.exact = True
        self.taken: list[int] | None = None
        """For a condition: how often it was true, and false."""
        self.tail = False
        """Whether the last record kept is a later one set by set_last, to be replaced by the next."""

    def add(self, record: dict) -> None:
        self.count += 1
        record["n"] = self.count
        if len(self.kept) < SAMPLES + 1:
            self.kept.append(record)
        else:
            self.kept[-1] = record
        self.tail = False

    def set_last(self, record: dict) -> None:
        """Keep a record of a later run (its "n" set) as the last one."""
        if self.tail or len(self.kept) > SAMPLES:
            self.kept[-1] = record
        else:
            self.kept.append(record)
        self.tail = True

    def as_json(self) -> dict:
        entry = {"count": self.count, "exact": self.exact, "samples": self.kept}
        if self.taken is not None:
            entry["taken"] = self.taken
        return entry


class Tracer:
    """Record the state of the statements of one file that start inside some line ranges."""

    def __init__(self, filename: str, source: str, ranges: list[tuple[int, int]]) -> None:
        self.filename = filename
        self.ranges = ranges
        self.names, self.functions = statement_names(source)
        self.branches, self.returns, self.effects = statement_shapes(source)
        for line, (receiver, handed) in self.effects.items():
            self.names[line] = list(dict.fromkeys([*self.names.get(line, ()), *([receiver] if receiver else ()), *handed]))
        self.settled: set[int] = set()
        """Call statements whose names are known to hold values (not modules, functions, classes)."""
        self.mutators: set[int] = set()
        """Call statements that call a method of a value: they own that name as an assignment does."""
        self.lines: dict[int, Samples] = {}
        self.calls: dict[int, Samples] = {}
        self.spans: dict[object, bool] = {}
        self.spent: dict[object, int] = {}
        """Line events traced so far, per code object."""
        self.called: dict[object, int] = {}
        """Calls so far, per code object, traced or not."""
        self.skipped: set[object] = set()
        """Code objects with calls or lines left untraced: their statements' counts are lower bounds."""
        self.line_code: dict[int, object] = {}
        self.call_samples: dict[object, Samples] = {}
        self.binders: dict[object, dict[str, int]] = {}
        """Per code object, each name → the statement that bound it last in its last traced call."""
        self.return_time: dict[object, float] = {}
        """Per code object, the seconds its untraced calls' summaries took (RETURN_SECONDS)."""
        self.returns_left: dict[object, int] = {}
        """Per code object, how many more untraced calls may have their return recorded (RETURNS)."""
        self.live: dict[int, tuple] = {}
        """Frames being traced now, so a state taken before they return (at os._exit) has their last runs."""
        loops, chains, fors = statement_loops(source)
        self.loops = {h: body for h, body in loops.items() if any(first <= body[1] and h <= last for first, last in ranges)}
        """The loops whose header or body touches a range, by header: the first and last line of the body."""
        self.chains = {line: tuple(h for h in chain if h in self.loops) for line, chain in chains.items()}
        """Each statement → the headers of those loops around it, outermost first."""
        self.fors = fors & set(self.loops)
        self.loop_samples: dict[int, Samples] = {}
        """Per loop, its iterations: the first SAMPLES and the last, each with the loop indices then."""
        self.loop_code: dict[int, object] = {}
        self.tick = 0
        """Line events traced so far, in every frame: the order of the records ("t")."""

    def inside(self, line: int) -> bool:
        return any(first <= line <= last for first, last in self.ranges)

    def wanted(self, code) -> bool:
        """Whether a code object of the file has a line in a range (decided once per code object)."""
        known = self.spans.get(code)
        if known is None:
            numbers = [line for _, _, line in code.co_lines() if line is not None] or [code.co_firstlineno]
            known = self.spans[code] = any(first <= max(numbers) and min(numbers) <= last for first, last in self.ranges)
        return known

    def __call__(self, frame, event, arg):
        if not self.guarded and hasattr(sys.modules.get("torch._dynamo"), "optimize"):  # fully imported
            self.guard()
        if event != "call" or frame.f_code.co_filename != self.filename or not self.wanted(frame.f_code):
            return None
        code = frame.f_code
        calls = self.called[code] = self.called.get(code, 0) + 1
        if (calls > SAMPLES and calls & (calls - 1)) or self.spent.get(code, 0) >= LINE_BUDGET:
            self.skipped.add(code)  # not one of the first calls nor a power of two, or over budget
            left = self.returns_left.get(code, RETURNS)
            if left <= 0 or self.return_time.get(code, 0.0) > RETURN_SECONDS or not (code in self.binders or code in self.call_samples) or code.co_name.startswith("<"):
                return None
            self.returns_left[code] = left - 1
            # Its lines run untraced; its return is still seen, which may be the function's last.
            started = time.perf_counter()
            frame.f_trace_lines = False
            tracer = FrameTracer(self, frame, calls, lines=False)
            self.return_time[code] = self.return_time.get(code, 0.0) + time.perf_counter() - started
            return tracer.trace
        return FrameTracer(self, frame, calls).trace

    guarded = False

    def guard(self) -> None:
        """Once torch.compile is loaded, have it run the tracer's own frames as they are.

        While a compiled function runs, torch.compile evaluates every Python frame that starts,
        the tracer's callbacks included: it would compile them (and graph-break on their reads of
        tensors), changing the graphs the starter counts. Marking the tracer's code objects as
        skipped (torch._dynamo's own way to exempt its helpers) runs them as plain Python.
        """
        self.guarded = True
        skip = getattr(sys.modules.get("torch._dynamo.eval_frame"), "skip_code", None)
        if skip is not None:
            for code in own_code():
                skip(code)

    def samples(self, line: int, code) -> Samples:
        """The samples of a line, made on its first run."""
        samples = self.lines.get(line)
        if samples is None:
            samples = self.lines[line] = Samples()
            self.line_code[line] = code
        return samples

    def result(self) -> dict:
        for frame_tracer, frame in list(self.live.values()):
            frame_tracer.finish(frame)
            frame_tracer.flush(frame)
        lines = {}
        for line, samples in sorted(self.lines.items()):
            code = self.line_code[line]
            samples.exact = code not in self.skipped
            lines[str(line)] = {**samples.as_json(), "calls": self.called.get(code, 1) if code.co_name != "<module>" else 0}
        for code, samples in self.call_samples.items():
            samples.count = self.called[code]  # every call counted, traced or not
        loops = {}
        for header, samples in sorted(self.loop_samples.items()):
            code = self.loop_code[header]
            samples.exact = code not in self.skipped
            calls = self.called.get(code, 1) if code.co_name != "<module>" else 0
            loops[str(header)] = {**samples.as_json(), "end": self.loops[header][1], "calls": calls}
        state = {
            "version": 1,
            "truncated": False,
            "lines": lines,
            "calls": {str(line): samples.as_json() for line, samples in sorted(self.calls.items())},
            "loops": loops,
        }
        return state


class FrameTracer:
    """Trace one frame: finish each statement when the next one starts, or when the frame returns.

    A statement's first SAMPLES runs are summarized as they happen; a later run is only counted,
    and its values are summarized once, when the frame returns (or stops being traced), for the
    names no statement of the frame has rebound since. A loop body run 65,536 times thus costs a
    count per run, not a summary: what the tracer adds to a timed loop stays small. A frame whose
    lines stop being traced (over budget, or never traced: `lines=False`) summarizes at its return
    each name the statement that bound it last while traced: its value as the call returned.

    Every record says when its run started ("t", the tracer's count of line events then) and, for a
    statement inside loops, which iteration of each it ran in ("l", outermost first, each loop's
    iterations counted over all its calls): a page can show lines of one moment side by side. An
    iteration starts when a loop's header runs and the next line is in its body; a `for` header's
    last run, which finds the iterator exhausted, is no run of it (it binds nothing).
    """

    def __init__(self, tracer: Tracer, frame, index: int, lines: bool = True) -> None:
        self.tracer = tracer
        self.pending: int | None = None
        self.branch: int | None = None
        """A condition whose branch the next line run tells."""
        self.call = None
        self.unsummarized: dict[int, int] = {}
        """Statements whose last run is not summarized yet → that run's number."""
        code = frame.f_code
        self.stopped = self.untraced = not lines
        """Whether this frame's lines are no longer traced (values are then summarized at return)."""
        self.binder: dict[str, int] = {} if lines else dict(tracer.binders.get(code, {}))
        """Each name → the statement that bound it last in this frame (an untraced frame: in the last traced one)."""
        self.observed: dict[int, list[tuple[str, int | None]]] = {}
        """Each call statement → its names, each with the statement that had bound it when the call last ran."""
        self.pending_tick = self.branch_tick = self.header_tick = 0
        self.header: int | None = None
        """A loop header just run: the next line tells whether it starts an iteration."""
        self.started: int | None = None
        """The loop whose iteration the current line event started, if any."""
        self.current: dict[int, int] = {}
        """Each loop → the number of its iteration running now (replaced, never changed: records keep it)."""
        self.later_loops: dict[int, tuple[int, int, dict[int, int]]] = {}
        """Loops whose last iteration is not summarized yet → (its number, its tick, the iterations then)."""
        self.stop_line: int | None = None
        self.index = index if code.co_name != "<module>" else 0
        definition = tracer.functions.get(code.co_firstlineno)
        if definition is not None and tracer.inside(definition) and self.index:
            count = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 4) + bool(code.co_flags & 8)
            inputs = {name: summarize(frame.f_locals[name]) for name in code.co_varnames[:count] if name in frame.f_locals}
            self.call = {"call": index, "inputs": inputs}
            self.samples = tracer.calls.setdefault(definition, Samples())
            tracer.call_samples[code] = self.samples
            self.samples.add(self.call)  # kept from its start: a call that never returns (os._exit) still shows its inputs
        tracer.live[id(self)] = (self, frame)

    def trace(self, frame, event, arg):
        if event == "line":
            line = frame.f_lineno
            tick = self.tracer.tick = self.tracer.tick + 1
            self.started = None
            if self.header is not None:
                self.iterate(frame, line)
            if self.branch is not None and not self.branch < line <= self.tracer.branches[self.branch][0]:
                self.decide(frame, line)
            self.finish(frame)
            if line in self.tracer.loops:
                self.header, self.header_tick = line, tick
            if self.tracer.inside(line):
                if self.tracer.names.get(line):  # a statement that binds something
                    self.pending, self.pending_tick = line, tick
                elif line in self.tracer.branches and self.tracer.branches[line][1] != line:
                    self.branch, self.branch_tick = line, tick
            code = frame.f_code
            spent = self.tracer.spent[code] = self.tracer.spent.get(code, 0) + 1
            if spent >= LINE_BUDGET:  # a hot loop or a hot function: stop tracing its lines
                self.branch = self.header = None
                self.stop_line = line
                self.finish(frame)
                self.flush(frame)
                frame.f_trace_lines = False
                self.stopped = True
                self.tracer.skipped.add(code)
        elif event == "return":
            self.returned(frame, arg)
        elif event == "exception":
            self.branch = None  # the next line run is a handler's, not a branch
        return self.trace

    def iterate(self, frame, line: int) -> None:
        """Count an iteration of the loop whose header ran last, if this line is in its body."""
        header, self.header = self.header, None
        first, last = self.tracer.loops[header]
        if not first <= line <= last:  # the loop is over (or never started)
            later = self.later_loops.pop(header, None)
            if later is not None:  # its indices are still the last iteration's: a later loop may rebind them
                self.end_loop(frame, header, later)
            return
        samples = self.tracer.loop_samples.get(header)
        if samples is None:
            samples = self.tracer.loop_samples[header] = Samples()
            self.tracer.loop_code[header] = frame.f_code
        self.started = header
        if len(samples.kept) < SAMPLES:
            record = {"values": self.indices(frame, header)}
            if self.index:
                record["call"] = self.index
            samples.add(record)
            self.current = {**self.current, header: samples.count}
            self.mark(record, self.header_tick, header, self.current, own=True)
        else:
            samples.count += 1
            self.current = {**self.current, header: samples.count}
            self.later_loops[header] = (samples.count, self.header_tick, self.current)

    def indices(self, frame, header: int) -> dict:
        """What the targets of a loop and of the loops around it hold, briefly: its indices."""
        values = {}
        for loop in (*self.tracer.chains.get(header, ()), header):
            for name in self.tracer.names.get(loop, ()):
                found, value = lookup(frame, name)
                if found:
                    values[name] = summarize(value, 0)
        return values

    def mark(self, record: dict, tick: int, line: int, current: dict[int, int], own: bool = False) -> None:
        """Say when a record's run started, and in which iteration of each loop around it (and of
        the loop it heads, when `own`: an iteration it started)."""
        record["t"] = tick
        chain = self.tracer.chains.get(line, ())
        if own:
            chain = (*chain, line)
        iterations = []
        for header in chain:
            if header not in current:
                break
            iterations.append(current[header])
        if iterations:
            record["l"] = iterations

    def returned(self, frame, arg) -> None:
        """Finish the frame: its last statement, its values at return, what it returned; an
        untraced call's summaries are timed against RETURN_SECONDS."""
        if self.untraced:
            started = time.perf_counter()
            self.finish_call(frame, arg)
            code = frame.f_code
            self.tracer.return_time[code] = self.tracer.return_time.get(code, 0.0) + time.perf_counter() - started
        else:
            self.finish_call(frame, arg)

    def finish_call(self, frame, arg) -> None:
        self.started = self.header = None
        if self.branch is not None:
            self.decide(frame, None)
        self.finish(frame)
        if self.stopped:
            self.at_return(frame)
        else:
            self.flush(frame)
        self.tracer.binders[frame.f_code] = self.binder
        self.tracer.live.pop(id(self), None)
        code = frame.f_code
        left_by = code.co_code[frame.f_lasti]
        if left_by == RETURN_VALUE:
            summary = None
            if self.call is not None:
                summary = self.call["return"] = summarize(arg)
            line = frame.f_lineno
            own = not code.co_name.startswith("<") or code.co_name == "<module>"  # not a comprehension's or lambda's return
            if own and line in self.tracer.returns and self.tracer.inside(line):
                samples = self.tracer.samples(line, code)
                record = {"values": {}, "return": summary if summary is not None else summarize(arg)}
                if self.index:
                    record["call"] = self.index
                self.mark(record, self.tracer.tick, line, self.current)
                samples.add(record)
        elif left_by != YIELD_VALUE and self.call is not None:  # left by an exception, not a return
            self.call["raised"] = True

    def decide(self, frame, line: int | None) -> None:
        """Record which way the pending condition went, now that the next line (or None: the
        frame's return) is known."""
        at, self.branch = self.branch, None
        _, first, last = self.tracer.branches[at]
        taken = line is not None and first <= line <= last
        samples = self.tracer.samples(at, frame.f_code)
        if samples.taken is None:
            samples.taken = [0, 0]
        samples.taken[0 if taken else 1] += 1
        record: dict = {"values": {}, "branch": taken}
        if self.index:
            record["call"] = self.index
        self.mark(record, self.branch_tick, at, self.current, own=self.started == at)
        if len(samples.kept) < SAMPLES:
            samples.add(record)
        else:
            samples.count += 1
            record["n"] = samples.count
            samples.set_last(record)

    def finish(self, frame) -> None:
        """Record what the pending statement bound, now that it has run."""
        line, self.pending = self.pending, None
        if line is None:
            return
        if line in self.tracer.fors and self.started != line:
            return  # the iterator was exhausted: the header bound nothing
        samples = self.tracer.samples(line, frame.f_code)
        if len(samples.kept) < SAMPLES:
            record = self.record(frame, self.tracer.names[line], line)
            self.mark(record, self.pending_tick, line, self.current, own=line in self.tracer.fors)
            samples.add(record)
            self.unsummarized.pop(line, None)
        else:
            samples.count += 1
            self.unsummarized[line] = (samples.count, self.pending_tick, self.current)
        if line in self.tracer.effects and line not in self.tracer.mutators:  # a call that reads its names: their binder still owns them
            self.observed[line] = [(name, self.binder.get(name)) for name in self.tracer.names[line]]
        else:
            for name in self.tracer.names[line]:
                self.binder[name] = line

    def flush(self, frame) -> None:
        """Summarize the last run of each statement that ran since its last summary, as far as the
        frame still holds what that run bound."""
        for line, (run, tick, current) in self.unsummarized.items():
            names = self.owned(line)
            if names:
                record = self.record(frame, names, line)
                record["n"] = run
                self.mark(record, tick, line, current, own=line in self.tracer.fors)
                self.tracer.lines[line].set_last(record)
        self.unsummarized.clear()
        for header, later in self.later_loops.items():
            self.end_loop(frame, header, later)
        self.later_loops.clear()

    def end_loop(self, frame, header: int, later: tuple[int, int, dict[int, int]]) -> None:
        """Keep a loop's last iteration (its number, tick and the iterations around it) as its last
        sample, with its indices as the frame holds them now."""
        run, tick, current = later
        record = {"values": self.indices(frame, header), "n": run}
        if self.index:
            record["call"] = self.index
        self.mark(record, tick, header, current, own=True)
        self.tracer.loop_samples[header].set_last(record)

    def owned(self, line: int) -> list[str]:
        """The names a statement's last run left as they are now: those no statement rebound since
        (for a call statement: those whose binding it saw is still the last)."""
        observed = self.observed.get(line)
        if observed is not None:
            return [name for name, binder in observed if self.binder.get(name) == binder]
        return [name for name in self.tracer.names[line] if self.binder.get(name) == line]

    def at_return(self, frame) -> None:
        """Summarize, as the frame returns, each name as the last sample of the statement that
        bound it last while traced: what a line in an untraced stretch holds at the end."""
        by_line: dict[int, list[str]] = {line: self.owned(line) for line in self.observed}
        for name, line in self.binder.items():
            by_line.setdefault(line, []).append(name)
        for line, names in sorted(by_line.items()):
            samples = self.tracer.lines.get(line)
            if samples is None:
                continue
            record = self.record(frame, names, line)
            last = samples.kept[-1] if samples.kept else {}
            if record["values"] and (samples.tail or record["values"] != last.get("values") or last.get("call") != record.get("call")):
                # (the same values as a run summarized as it ran, in the same call: that sample says it already)
                record["n"] = samples.count
                record["at"] = "return"
                record["t"] = self.tracer.tick
                samples.set_last(record)
        self.unsummarized.clear()
        # The loops still running when tracing stopped end as the call returned; of a call never
        # traced, the loops whose indices no recorded statement bound after their header (in its
        # last traced call): a later loop over the same `i` does not lend its value to this one.
        names = self.tracer.names
        if self.untraced:
            running = [h for h, code in self.tracer.loop_code.items() if code is frame.f_code and names.get(h) and all(self.binder.get(n, h) == h for n in names[h])]
        else:
            line = self.stop_line
            running = [*self.tracer.chains.get(line, ()), *((line,) if line in self.tracer.loops else ())] if line is not None else []
        for header in running:
            samples = self.tracer.loop_samples.get(header)
            if samples is None:
                continue
            record = {"values": self.indices(frame, header), "n": samples.count, "at": "return", "t": self.tracer.tick}
            if self.index:
                record["call"] = self.index
            samples.set_last(record)
        self.later_loops.clear()

    def record(self, frame, names: list[str], line: int) -> dict:
        values = {}
        effect = self.tracer.effects.get(line)
        if effect is not None and line not in self.tracer.settled:
            names = self.settle(frame, line, effect)
        for name in names:
            found, value = lookup(frame, name)
            if found:
                values[name] = summarize(value)
        record: dict = {"values": values}
        if self.index:
            record["call"] = self.index
        return record

    def settle(self, frame, line: int, effect: tuple[str | None, list[str]]) -> list[str]:
        """Decide once what a call statement shows: the receiver of its method when that is a
        value (`x.add_(y)` → x), else the values it was handed (`dist.all_reduce(total)` → total)."""
        receiver, handed = effect
        def value(name: str) -> bool:
            found, held = lookup(frame, name)
            return found and not inert(held)
        if receiver and value(receiver):
            names = [receiver]
            self.tracer.mutators.add(line)  # a method changes what it is called on, as an assignment would
        else:
            names = [name for name in handed if not name.startswith("__") and value(name)]
        self.tracer.names[line] = names
        self.tracer.settled.add(line)
        return names


def lookup(frame, name: str):
    """Find `a` or `a.b.c` in a frame, each attribute read as static_attribute does (no getter runs)."""
    head, *rest = name.split(".")
    scope = frame.f_locals
    if head in scope:
        value = scope[head]
    elif head in frame.f_globals:
        value = frame.f_globals[head]
    else:
        return False, None
    for attr in rest:
        try:
            found, value = static_attribute(value, attr)
        except Exception:
            return False, None
        if not found:
            return False, None
    return True, value


def capped(state: dict, limit: int = MAX_BYTES) -> dict:
    """Cut a state to at most `limit` bytes of JSON: first the repeated samples, then whole lines."""
    if len(json.dumps(state)) <= limit:
        return state
    state = {**state, "truncated": True}
    for group in ("lines", "calls", "loops"):
        for entry in state.get(group, {}).values():
            entry["samples"] = entry["samples"][:1]
    for group in ("loops", "calls", "lines"):
        while len(json.dumps(state)) > limit and state.get(group):
            state[group].pop(next(reversed(state[group])))
    return state


def python_of(source: str, blocks: list) -> str:
    """The Python a Markdown starter runs, each block at its real lines and the prose blank, so
    statements are found at the line numbers the .md file gives them."""
    lines = [""] * (source.count("\n") + 1)
    for first, code in blocks:
        for offset, text in enumerate(code.split("\n")):
            if first - 1 + offset < len(lines):
                lines[first - 1 + offset] = text
    return "\n".join(lines)


def run_blocks(path: str, blocks: list) -> None:
    """Run a Markdown starter's python blocks as run_markdown.py does."""
    namespace = {"__name__": "__main__", "__file__": path}
    for line, code in blocks:
        exec(compile("\n" * (line - 1) + code, path, "exec"), namespace)


CHILD_SPEC = "INFRALENS_TRACE_STATE"
"""Environment variable through which a traced run hands its spec to the processes it spawns."""
CHILD_RUN_NAME = "infralens_trace_child"


def trace_spawned_children(spec: dict) -> None:
    """Make every process the starter starts with multiprocessing's "spawn" (a rank of a
    distributed lab, say) trace itself too, before it imports the starter.

    The child's command line runs this file first (as CHILD_RUN_NAME), which installs a tracer
    from the spec in the environment and writes the child's state beside the parent's, where the
    parent merges it when the starter ends.
    """
    import multiprocessing.spawn as spawn

    os.environ[CHILD_SPEC] = json.dumps(spec)
    original = spawn.get_command_line

    def command_line(**kwds):
        line = original(**kwds)
        if "-c" in line:
            at = line.index("-c") + 1
            line[at] = f"import runpy; runpy.run_path({os.path.abspath(__file__)!r}, run_name={CHILD_RUN_NAME!r}); " + line[at]
        return line

    spawn.get_command_line = command_line


def child() -> None:
    """In a spawned process: trace the starter's code as the parent does; write the state on exit."""
    import atexit

    spec = json.loads(os.environ[CHILD_SPEC])
    with open(spec["source"], encoding="utf-8-sig") as handle:  # -sig: a starter may begin with a byte-order mark
        source = handle.read()
    if spec.get("blocks") is not None:
        source = python_of(source, spec["blocks"])
    tracer = Tracer(spec["source"], source, [tuple(r) for r in spec["ranges"]])
    written = []

    def write() -> None:
        if written:
            return
        written.append(True)
        sys.settrace(None)
        import multiprocessing

        state = tracer.result()
        state["process"] = multiprocessing.current_process().name
        try:
            with open(f"{spec['output']}.{os.getpid()}", "w", encoding="utf-8") as handle:
                json.dump(state, handle)
        except OSError:
            pass

    real_exit = os._exit

    def exit_after_writing(code):  # a rank may end with os._exit, which runs no atexit handler
        write()
        real_exit(code)

    os._exit = exit_after_writing
    atexit.register(write)
    sys.settrace(tracer)


def merged(state: dict, output: str) -> dict:
    """Add to a run's state what its spawned processes recorded, for the lines the run itself did
    not reach: from the first process, by name (rank 0 before rank 1), that recorded each."""
    folder, stem = os.path.split(output)
    children = []
    for name in os.listdir(folder or "."):
        if name.startswith(stem + "."):
            try:
                with open(os.path.join(folder, name), encoding="utf-8") as handle:
                    children.append(json.load(handle))
            except (OSError, ValueError):
                continue
    for other in sorted(children, key=lambda c: str(c.get("process", ""))):
        for group in ("lines", "calls", "loops"):
            for line, entry in other.get(group, {}).items():
                if line not in state.setdefault(group, {}):
                    state[group][line] = {**entry, "process": other.get("process", "")}
    return state


def main() -> None:
    source_path, spec_path, *args = sys.argv[1:]
    with open(spec_path, encoding="utf-8") as handle:
        spec = json.load(handle)
    try:
        os.remove(spec_path)  # its token now lives only in this process's memory
    except OSError:
        pass
    with open(source_path, encoding="utf-8-sig") as handle:
        source = handle.read()
    blocks = spec.get("blocks")
    if blocks is not None:
        source = python_of(source, blocks)
    tracer = Tracer(source_path, source, [tuple(r) for r in spec["ranges"]])
    trace_spawned_children({**spec, "source": source_path})
    sys.argv = [source_path, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(source_path))  # as `python STARTER` would have it
    code: object = 0
    sys.settrace(tracer)
    try:
        if blocks is None:
            runpy.run_path(source_path, run_name="__main__")
        else:
            if not blocks:
                sys.exit(f"{source_path}: no python blocks to run")
            run_blocks(source_path, blocks)
    except SystemExit as stop:
        code = stop.code
    except BaseException:  # as Python would: the traceback on stderr, status 1
        sys.settrace(None)
        sys.excepthook(*sys.exc_info())
        code = 1
    sys.settrace(None)
    leave(tracer, spec, code)


def leave(tracer: Tracer, spec: dict, code: object) -> None:
    """End the process as Python would after the starter's code, but write the state last: the
    starter's threads are waited for and its exit hooks run first (its spawned ranks joined with
    them), then the state is written, stamped with the token `check` handed over in the spec, and
    the process ends at once. Nothing of the starter runs after the state is written, so an exit
    hook or a thread cannot rewrite it, and a state file the starter wrote itself lacks the token."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    try:
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001 - Python prints an exit hook's error and goes on
        pass
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code & 0xFF
    else:
        print(code, file=sys.stderr)
        status = 1
    try:
        state = capped(merged(tracer.result(), spec["output"]))
        state["token"] = spec.get("token", "")
        with _open(spec["output"], "w", encoding="utf-8") as handle:
            _dump(state, handle)
            handle.flush()
            _fsync(handle.fileno())
    except OSError as error:  # the run's result stands; the page just shows no state
        print(f"trace_state: could not write the state: {error}", file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    _exit(status)


if __name__ == "__main__":
    main()
elif __name__ == CHILD_RUN_NAME:
    child()
