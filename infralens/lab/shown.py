"""Numbers and arithmetic as a calculator shows them: a value in its format and unit, and a result's
arithmetic with its inputs in place ("2 × 32 layers × 8 KV heads × 128 × 2 B").

Outputs are computed, so `show` rounds them; inputs are what the manifest or a run said, so
`exact` never does. Pure. templates/static/calculator.js repeats `show`, `exact` and `counted`
character for character (tested in Chromium)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from infralens.model.calculator import (
    CalcOutput,
    Calculator,
    Numeric,
)
from infralens.model.expr import (
    BINARY,
    COMPARE,
    Expr,
)

Piece = str | tuple[str]
"""A piece of an arithmetic line: text, or (name,) where the value of that input or output goes."""

UNSHOWN = 1e21
"""From here on a number is shown as "> 1e21": the page's number formatting stops being exact."""


TINY = 1e-6
"""Below this (and above 0) a number is shown as "< 1e-6"."""


GIVEN = 6
"""The significant digits `exact` keeps of a number that is not whole."""


def fixed(value: float, decimals: int) -> str:
    """The value rounded half away from zero to `decimals` places, as JavaScript's toFixed does
    (which writes -0 as 0)."""
    return str(Decimal(value if value != 0 else 0).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP))


def grouped(digits: str) -> str:
    """Put thousands separators into the whole part of a decimal string."""
    sign = "-" if digits.startswith("-") else ""
    whole, _, fraction = digits.lstrip("-").partition(".")
    parts = []
    while len(whole) > 3:
        parts.insert(0, whole[-3:])
        whole = whole[:-3]
    parts.insert(0, whole)
    return sign + ",".join(parts) + ("." + fraction if fraction else "")


def significant(value: Numeric, digits: int = 3) -> str:
    """`digits` significant digits below 1,000 (trailing zeros dropped), whole with separators above."""
    if value == 0:
        return "0"
    size = abs(value)
    if size >= UNSHOWN:
        return ("-" if value < 0 else "") + "> 1e21"
    if size < TINY:
        return ("-" if value < 0 else "") + "< 1e-6"
    if size >= 1000:
        return grouped(fixed(value, 0))
    decimals, scaled = 0, size
    while scaled < 10 ** (digits - 1):  # multiplied by ten, never a logarithm: the page does the same
        decimals, scaled = decimals + 1, scaled * 10
    text = fixed(value, decimals)
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "0") else grouped(text)


def exact(value: Numeric) -> str:
    """A number the manifest or a run gave, never cut to 3 digits: a whole number in full with
    separators (6,738,415,616 params stays that), anything else to GIVEN significant digits (whole
    from 10**GIVEN on),
    trailing zeros dropped (2.039 TB/s stays that; a computed 1/12 reads 0.0833333, not 17 digits
    of float). Beyond the shown range as `significant`."""
    if value == 0:
        return "0"
    size = abs(value)
    if size >= UNSHOWN or size < TINY:
        return significant(value)
    if float(value).is_integer() or size >= 10**GIVEN:
        return grouped(fixed(value, 0))
    # GIVEN digits half away from zero, as JavaScript's toPrecision; then the shortest decimal
    # that reads back as that float (repr), as its String(number) writes it.
    held = Decimal(float(value))
    rounded = float(held.quantize(Decimal(1).scaleb(held.adjusted() - GIVEN + 1), rounding=ROUND_HALF_UP))
    return grouped(fixed(rounded, 0) if rounded.is_integer() else format(Decimal(repr(rounded)), "f"))


def counted(number: str, unit: str | None) -> str:
    """A shown number and its unit, the unit's plural made singular after 1 ("1 layer", "1 KV head",
    but "1 B" and "1 FLOP/s"): a unit whose last word is a lowercase plural noun."""
    if not unit:
        return number
    if number.lstrip("-") == "1":
        unit = singular(unit)
    return f"{number} {unit}"


def singular(unit: str) -> str:
    """The unit with its last word made singular, if it is a lowercase plural ("KV heads" → "KV head")."""
    head, _, word = unit.rpartition(" ")
    if not re.fullmatch(r"[a-z]{2,}s", word) or word.endswith("ss"):
        return unit
    if word.endswith("ies"):
        word = word[:-3] + "y"
    elif re.search(r"(ch|sh|x|ss)es$", word):
        word = word[:-2]
    else:
        word = word[:-1]
    return f"{head} {word}" if head else word


SI = ("", "k", "M", "G", "T", "P", "E")


SI_BELOW_ONE = ("m", "µ", "n")
"""Prefixes of `si` values below 1, by powers of 1/1000: 0.0125 s shows as 12.5 ms."""


IEC = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def scaled(value: Numeric, base: int, prefixes: tuple[str, ...], digits: int = 3) -> tuple[str, str]:
    """The value in the largest unit it reaches (to `digits` significant digits) and that unit's prefix."""
    index, size = 0, abs(value)
    while index < len(prefixes) - 1 and size >= base ** (index + 1):
        index += 1
    return significant(value / base**index, digits), prefixes[index]


def scaled_si(value: Numeric, digits: int = 3) -> tuple[str, str]:
    """An `si` value and its prefix: up by thousands as `scaled`, and below 1 down to nano
    (multiplied by 1000**n, as the page's script does, so both round alike)."""
    size = abs(value)
    if 0 < size < 1:
        for power, prefix in enumerate(SI_BELOW_ONE, start=1):
            if size * 1000**power >= 1 or power == len(SI_BELOW_ONE):
                return significant(value * 1000**power, digits), prefix
    return scaled(value, 1000, SI, digits)


def show(value: Numeric, fmt: str, unit: str | None = None, labels: tuple[str, ...] | None = None, digits: int = 3) -> str:
    """The text a page shows for an output (see models.FORMATS), to `digits` significant digits."""
    after = f" {unit}" if unit else ""
    if fmt == "label" and labels and float(value).is_integer() and 0 <= value < len(labels):
        return labels[int(value)]
    if fmt == "int":
        return counted(grouped(fixed(value, 0)) if abs(value) < UNSHOWN else significant(value), unit)
    if fmt in ("bytes", "bytes-iec"):
        number, prefix = scaled(value, 1000 if fmt == "bytes" else 1024, SI if fmt == "bytes" else IEC, digits)
        if prefix and float(value).is_integer() and abs(value) < UNSHOWN:
            return f"{number} {prefix}B ({grouped(fixed(value, 0))} B){after}"
        return f"{number} {prefix}B{after}"
    if fmt == "si":
        number, prefix = scaled_si(value, digits)
        return f"{number} {prefix}{unit or ''}".rstrip()
    if fmt == "ratio":
        return f"{significant(value, digits)}×{after}"
    if fmt == "percent":
        return f"{significant(value * 100, digits)}%{after}"
    return counted(significant(value, digits), unit)


def shown(output: CalcOutput, value: Numeric) -> str:
    """An output's value as its format shows it."""
    return show(value, output.format, output.unit, output.labels, output.digits)


def show_input(calc: Calculator, name: str, value: Numeric | str, bare: bool = False) -> str:
    """An input's value as the table shows it: a choice's name, or the number, exactly as given
    (never rounded: it is what the manifest or the run said), with its unit unless `bare` (the
    row's heading says it)."""
    field = calc.input(name)
    unit = None if bare else field.unit
    if field.choices is not None:
        return f"{value} ({counted(exact(field.number(value)), unit)})"
    return counted(exact(value / field.scale), unit)


def headed(label: str, unit: str | None) -> str:
    """A table row's heading: the label, and the unit of its cells when they leave it out and the
    label does not already say it ("Layers", not "Layers (layers)")."""
    return f"{label} ({unit})" if unit and unit.lower() not in label.lower() else label


_SHOWN_BINARY = {"+": " + ", "-": " − ", "*": " × ", "/": " ÷ ", "%": " mod "}


_SHOWN_COMPARE = {"<": " < ", "<=": " ≤ ", ">": " > ", ">=": " ≥ ", "==": " = ", "!=": " ≠ "}


_PRECEDENCE = {"if": 0, "or": 1, "and": 2, "not": 3, "compare": 4, "+": 5, "-": 5, "*": 6, "/": 6, "//": 7, "%": 6, "unary": 8, "**": 9, "atom": 10}


def arithmetic(expr: Expr) -> tuple[Piece, ...]:
    """The expression as a reader writes it (× ÷ ⌈ ⌉ ⌊ ⌋ and powers as ^), with a slot per name."""
    pieces: list[Piece] = []
    _pieces(expr.tree, pieces)
    return _merged(pieces)


Branch = tuple[tuple[Piece, ...], tuple[Piece, ...] | None]
"""What a result's line says on one side of a choice: the condition that held, in words, and the
arithmetic of the branch taken (None when that branch is a bare number, as the 1 and 0 of a label)."""


def branches(expr: Expr) -> tuple[Branch, Branch] | None:
    """For an expression `a if test else b`, its lines when the test holds and when it does not
    ("1,000 FLOP/B ≥ 153 FLOP/B: compute-bound", never "1 if 1,000 FLOP/B < 153 FLOP/B else 0");
    None for any other expression."""
    tree = expr.tree
    if not isinstance(tree, ast.IfExp):
        return None

    def said(node: ast.AST) -> tuple[Piece, ...]:
        pieces: list[Piece] = []
        _pieces(node, pieces)
        return _merged(pieces)

    def taken(node: ast.AST) -> tuple[Piece, ...] | None:
        return None if isinstance(node, ast.Constant) else said(node)

    return (said(tree.test), taken(tree.body)), (said(_negated(tree.test)), taken(tree.orelse))


_NEGATED = {ast.Lt: ast.GtE, ast.LtE: ast.Gt, ast.Gt: ast.LtE, ast.GtE: ast.Lt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}


def _negated(node: ast.expr) -> ast.expr:
    """The condition that holds when this one does not, as a reader would say it (a < b: a ≥ b)."""
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        return ast.Compare(left=node.left, ops=[_NEGATED[type(node.ops[0])]()], comparators=node.comparators)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return node.operand
    if isinstance(node, ast.BoolOp):
        return ast.BoolOp(op=ast.Or() if isinstance(node.op, ast.And) else ast.And(), values=[_negated(value) for value in node.values])
    return ast.UnaryOp(op=ast.Not(), operand=node)


def _merged(pieces: list[Piece]) -> tuple[Piece, ...]:
    merged: list[Piece] = []
    for piece in pieces:
        if piece == "":
            continue
        if isinstance(piece, str) and merged and isinstance(merged[-1], str):
            merged[-1] += piece
        else:
            merged.append(piece)
    return tuple(merged)


def _level(node: ast.AST) -> int:
    if isinstance(node, ast.BinOp):
        return _PRECEDENCE[BINARY[type(node.op)]]
    if isinstance(node, ast.UnaryOp):
        return _PRECEDENCE["not" if isinstance(node.op, ast.Not) else "unary"]
    if isinstance(node, ast.BoolOp):
        return _PRECEDENCE["and" if isinstance(node.op, ast.And) else "or"]
    if isinstance(node, ast.Compare):
        return _PRECEDENCE["compare"]
    if isinstance(node, ast.IfExp):
        return _PRECEDENCE["if"]
    return _PRECEDENCE["atom"]


def _wrapped(node: ast.AST, pieces: list[Piece], above: int, strict: bool = False) -> None:
    level = _level(node)
    paren = level < above or (strict and level == above)
    pieces.append("(" if paren else "")
    _pieces(node, pieces)
    pieces.append(")" if paren else "")


def _pieces(node: ast.AST, pieces: list[Piece]) -> None:
    if isinstance(node, ast.Constant):
        pieces.append(significant(node.value) if isinstance(node.value, float) else grouped(str(node.value)))
    elif isinstance(node, ast.Name):
        pieces.append((node.id,))
    elif isinstance(node, ast.BinOp):
        op = BINARY[type(node.op)]
        if op == "//":  # floor division reads as the floor of a quotient
            pieces.append("⌊")
            _wrapped(node.left, pieces, _PRECEDENCE["/"])
            pieces.append(" ÷ ")
            _wrapped(node.right, pieces, _PRECEDENCE["/"], strict=True)
            pieces.append("⌋")
            return
        level = _PRECEDENCE[op]
        if op == "**":
            _wrapped(node.left, pieces, level, strict=True)
            pieces.append("^")
            _wrapped(node.right, pieces, level)
            return
        _wrapped(node.left, pieces, level)
        pieces.append(_SHOWN_BINARY[op])
        _wrapped(node.right, pieces, level, strict=op in ("-", "/", "%"))
    elif isinstance(node, ast.UnaryOp):
        if isinstance(node.op, ast.Not):
            pieces.append("not ")
            _wrapped(node.operand, pieces, _PRECEDENCE["not"])
        else:
            pieces.append("−" if isinstance(node.op, ast.USub) else "+")
            _wrapped(node.operand, pieces, _PRECEDENCE["unary"])
    elif isinstance(node, ast.Compare):
        _wrapped(node.left, pieces, _PRECEDENCE["compare"], strict=True)
        pieces.append(_SHOWN_COMPARE[COMPARE[type(node.ops[0])]])
        _wrapped(node.comparators[0], pieces, _PRECEDENCE["compare"], strict=True)
    elif isinstance(node, ast.BoolOp):
        word = " and " if isinstance(node.op, ast.And) else " or "
        for index, value in enumerate(node.values):
            pieces.append(word if index else "")
            _wrapped(value, pieces, _level(node), strict=True)
    elif isinstance(node, ast.IfExp):
        _wrapped(node.body, pieces, _PRECEDENCE["if"], strict=True)
        pieces.append(" if ")
        _wrapped(node.test, pieces, _PRECEDENCE["if"], strict=True)
        pieces.append(" else ")
        _wrapped(node.orelse, pieces, _PRECEDENCE["if"])
    elif isinstance(node, ast.Call):
        name = node.func.id
        if name in ("ceil", "floor", "abs"):
            left, right = {"ceil": ("⌈", "⌉"), "floor": ("⌊", "⌋"), "abs": ("|", "|")}[name]
            pieces.append(left)
            _pieces(node.args[0], pieces)
            pieces.append(right)
            return
        pieces.append({"sqrt": "√(", "log2": "log₂("}.get(name, f"{name}("))
        for index, arg in enumerate(node.args):
            pieces.append(", " if index else "")
            _pieces(arg, pieces)
        pieces.append(")")


@dataclass(frozen=True)
class Case:
    """One row of a calculator's table: the defaults or a preset, with what the outputs give."""

    label: str
    values: tuple[tuple[str, Numeric | str], ...]
    """Each input's value, a choice input by its name."""
    results: tuple[tuple[str, Numeric], ...]
    group: str = ""
    """The group of the preset it comes from ("" for the defaults)."""
