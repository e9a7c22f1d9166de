"""The definitions in a C++ or CUDA starter, found by tree-sitter: what a `symbol:` selects there.

Pure: a text and its grammar ('cpp' or 'cuda') → its named definitions, each with its qualified
name (`BoundedQueue::push`, `kernels::transpose`) and its real lines, a template's `template <…>`
line included. A definition is a function, method, constructor, operator, class, struct, union,
enum or namespace that has a body; a declaration alone (`void f();`, `struct S;`) is none.

tree-sitter (with the tree-sitter-cpp and tree-sitter-cuda grammars) reads code as written: macros
are not expanded, and a line it cannot parse becomes an error node while the definitions around it
are still found, so a starter with a typo still has its excerpt (its compile then fails in check).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Literal

SymbolKind = Literal["function", "kernel", "class", "struct", "union", "enum", "namespace"]

_SCOPES = {"class_specifier": "class", "struct_specifier": "struct", "union_specifier": "union", "enum_specifier": "enum"}
_NAMES = ("identifier", "field_identifier", "qualified_identifier", "destructor_name", "operator_name", "template_function", "type_identifier", "namespace_identifier")
_DECLARATORS = ("function_declarator", "pointer_declarator", "reference_declarator", "attributed_declarator", "parenthesized_declarator")


@dataclass(frozen=True)
class Definition:
    """One named definition of a C++ or CUDA file."""

    name: str
    """Its qualified name, template arguments left out: `Queue::push`, `Queue::~Queue`, `operator<`."""
    kind: SymbolKind
    first: int
    """Its first line (1-based): the `template <…>` line of a template."""
    last: int


@functools.cache
def _parser(grammar: str):
    """A tree-sitter parser for the grammar, made once per process (loading a grammar is ~1 ms)."""
    import tree_sitter  # deferred: only a C++ or CUDA `symbol:` needs tree-sitter and its grammars

    if grammar == "cuda":
        import tree_sitter_cuda as language
    else:
        import tree_sitter_cpp as language
    return tree_sitter.Parser(tree_sitter.Language(language.language()))


@functools.lru_cache(maxsize=16)
def definitions(text: str, grammar: str) -> tuple[Definition, ...]:
    """Every named definition of the text, in the order it appears (an outer one before those inside it)."""
    tree = _parser(grammar).parse(text.encode("utf-8"))
    found: list[Definition] = []
    _walk(tree.root_node, "", None, found)
    return tuple(found)


def _walk(node, scope: str, template, found: list[Definition]) -> None:
    for child in node.named_children:
        kind = child.type
        if kind == "template_declaration":
            _walk(child, scope, template or child, found)
            continue
        start = (template or child).start_point[0] + 1
        if kind == "function_definition":
            name = _function_name(child)
            if name:
                header = child.text[: child.child_by_field_name("declarator").start_byte - child.start_byte]
                found.append(Definition(_qualified(scope, name), "kernel" if b"__global__" in header else "function", start, child.end_point[0] + 1))
        elif kind in _SCOPES and child.child_by_field_name("body") is not None:
            name_node = child.child_by_field_name("name")
            if name_node is not None:
                name = _qualified(scope, _plain(name_node.text.decode("utf-8", "replace")))
                found.append(Definition(name, _SCOPES[kind], start, child.end_point[0] + 1))  # type: ignore[arg-type]
                _walk(child.child_by_field_name("body"), name + "::", None, found)
        elif kind == "namespace_definition":
            name_node = child.child_by_field_name("name")
            inner = _qualified(scope, name_node.text.decode("utf-8", "replace")) if name_node is not None else scope.rstrip(":")
            if name_node is not None:
                found.append(Definition(inner, "namespace", start, child.end_point[0] + 1))
            body = child.child_by_field_name("body")
            if body is not None:
                _walk(body, inner + "::" if inner else "", None, found)
        elif kind in ("declaration_list", "field_declaration_list", "linkage_specification", "preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif"):
            _walk(child, scope, None, found)


def _function_name(node) -> str:
    """The name a function definition declares, through pointer and reference declarators."""
    declarator = node.child_by_field_name("declarator")
    while declarator is not None and declarator.type in _DECLARATORS:
        inner = declarator.child_by_field_name("declarator")
        if inner is None:
            inner = next((c for c in declarator.named_children if c.type in _NAMES or c.type in _DECLARATORS), None)
        declarator = inner
    if declarator is None or declarator.type not in _NAMES:
        return ""
    return _plain(declarator.text.decode("utf-8", "replace"))


def _plain(name: str) -> str:
    """A name as a manifest writes it: no template arguments, and a space only between two words
    (`Q<T>::pop` → `Q::pop`, `operator <` → `operator<`, `operator new` stays). An operator's own
    symbols (`operator<`, `operator<=>`) are not template arguments."""
    at = re.search(r"\boperator\b", name)
    head, tail = (name[: at.start()], name[at.start() :]) if at else (name, "")
    while (shorter := re.sub(r"<[^<>]*>", "", head)) != head:
        head = shorter
    return re.sub(r"(?<!\w) | (?!\w)", "", re.sub(r"\s+", " ", (head + tail).strip()))


def _qualified(scope: str, name: str) -> str:
    return scope + name


def matching(found: tuple[Definition, ...], name: str) -> list[Definition]:
    """The definitions a manifest's `symbol: NAME` can mean: its qualified name, or one that ends in
    `::NAME` (`push` is `BoundedQueue::push` when no other definition has that last part); a
    class's name means the class, not its constructors."""
    wanted = _plain(name)
    exact = [d for d in found if d.name == wanted]
    hits = exact or [d for d in found if d.name.endswith("::" + wanted)]
    last = wanted.rsplit("::", 1)[-1]
    # A class's name is also its constructors' (`Ring` and `Ring::Ring`): the name means the class.
    return [d for d in hits if not any(d.name == other.name + "::" + last for other in hits)]
