"""Calculator expressions: a small, safe arithmetic language, evaluated in Python and compiled to
JavaScript so the page computes exactly what the build checked.

Pure. An expression is parsed with Python's own parser and then walked against a whitelist:
numbers, the names it is given, `+ - * / // % **`, unary minus, comparisons, `and`/`or`/`not`
between comparisons, `a if cond else b`, and the functions in FUNCTIONS. Nothing is ever eval'd.
Evaluation follows Python's rules (`//` floors, `%` takes the divisor's sign), which the compiled
JavaScript reproduces with the helpers of templates/static/calculator.js. Both refuse what a page must never show:
division by zero, a result that is not a finite number, a power too large to compute. An integer
beyond 2**53 becomes the nearest float in both, as a browser's numbers are: integers below it are
exact in both, larger values and fractions agree to the last bit for + - * and within a stated
tolerance for the rest.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass

from infralens.errors import did_you_mean

MAX_LENGTH = 1000
"""Longest expression, in characters."""
MAX_NODES = 200
"""Most syntax nodes an expression may have."""
EXACT = 2**53
"""Integers at or beyond this size are floats in a browser, and so in `evaluate`."""

FUNCTIONS: dict[str, tuple[int, int | None]] = {
    "min": (2, None),
    "max": (2, None),
    "ceil": (1, 1),
    "floor": (1, 1),
    "abs": (1, 1),
    "sqrt": (1, 1),
    "log2": (1, 1),
}
"""Functions an expression may call: name → (fewest, most) arguments (None: no limit)."""


class ExprError(Exception):
    """A problem with an expression: what is wrong, and at which character (0-based) it starts."""

    def __init__(self, message: str, offset: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.offset = offset


@dataclass(frozen=True)
class Expr:
    """A checked expression: its text, its tree, and the names it reads."""

    text: str
    tree: ast.expr
    names: frozenset[str]


Number = int | float

BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**"}
COMPARE = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}


def parse_expr(text: str, names: frozenset[str] | set[str]) -> Expr:
    """Check an expression against the whitelist and the names it may read; raise ExprError."""
    tree, lead = _syntax(text, "an expression")
    used: set[str] = set()
    _check(tree, frozenset(names), used, lead)
    return Expr(text, tree, frozenset(used))


def parse_condition(text: str, names: frozenset[str] | set[str]) -> Expr:
    """Check a condition (`seq_len <= max_seq_len`, `a > 0 and b > 0`) like `parse_expr`; raise ExprError."""
    tree, lead = _syntax(text, "a condition")
    used: set[str] = set()
    _check(tree, frozenset(names), used, lead, boolean=True)
    return Expr(text, tree, frozenset(used))


def _syntax(text: str, what: str) -> tuple[ast.expr, int]:
    """Parse text as one Python expression of bounded size: its tree, and where it starts in `text`."""
    if len(text) > MAX_LENGTH:
        raise ExprError(f"{what} is at most {MAX_LENGTH:,} characters, this one has {len(text):,}")
    source = text.strip()
    lead = len(text) - len(text.lstrip())
    if not source:
        raise ExprError(f"the {what.split()[-1]} is empty")
    try:
        tree = ast.parse(source, mode="eval").body
    except SyntaxError as exc:
        at = exc.offset - 1 if exc.offset and exc.offset > 0 else len(source)  # no place given: at its end
        raise ExprError(f"not {what}: {exc.msg}", lead + min(at, len(source))) from None
    except (ValueError, MemoryError, RecursionError):
        raise ExprError(f"not {what}: too deeply nested", lead) from None
    count = sum(1 for _ in ast.walk(tree))
    if count > MAX_NODES:
        raise ExprError(f"{what} has at most {MAX_NODES} parts, this one has {count}")
    return tree, lead


def holds(condition: Expr, values: dict[str, Number]) -> bool:
    """Whether a condition of `parse_condition` holds for these values; raise ExprError."""
    return bool(_eval(condition.tree, values))


def condition_js(condition: Expr, scope: str = "v") -> str:
    """Compile a condition to one JavaScript expression (true or false) over `scope`."""
    return _js(condition.tree, scope)


def _at(node: ast.AST, lead: int) -> int:
    return lead + getattr(node, "col_offset", 0)


def _check(node: ast.AST, names: frozenset[str], used: set[str], lead: int, boolean: bool = False) -> None:
    """Walk one node: a number-valued node unless `boolean`, where a truth value is expected."""
    if boolean:
        if isinstance(node, ast.Compare):
            if len(node.ops) != 1:
                raise ExprError("compare two values at a time (write `a < b and b < c`)", _at(node, lead))
            if type(node.ops[0]) not in COMPARE:
                raise ExprError(f"{type(node.ops[0]).__name__} is not a comparison a calculator can make", _at(node, lead))
            _check(node.left, names, used, lead)
            _check(node.comparators[0], names, used, lead)
            return
        if isinstance(node, ast.BoolOp):
            for value in node.values:
                _check(value, names, used, lead, boolean=True)
            return
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            _check(node.operand, names, used, lead, boolean=True)
            return
        raise ExprError("expected a condition (a comparison such as `batch > 1`)", _at(node, lead))
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise ExprError(f"only numbers may be written, not {node.value!r}", _at(node, lead))
        if not finite_constant(node.value):  # 1e999 is Python's inf, and `inf` in the page's script
            raise ExprError("only finite numbers may be written (a float holds at most 1.8e308)", _at(node, lead))
        return
    if isinstance(node, ast.Name):
        if node.id not in names:

            hint = did_you_mean(node.id, names) or f" (known: {', '.join(sorted(names)) or 'none'})"
            raise ExprError(f"unknown name {node.id!r}{hint}", _at(node, lead))
        used.add(node.id)
        return
    if isinstance(node, ast.BinOp):
        if type(node.op) not in BINARY:
            raise ExprError(f"operator {type(node.op).__name__} is not arithmetic a calculator does", _at(node, lead))
        _check(node.left, names, used, lead)
        _check(node.right, names, used, lead)
        return
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        _check(node.operand, names, used, lead)
        return
    if isinstance(node, ast.IfExp):
        _check(node.test, names, used, lead, boolean=True)
        _check(node.body, names, used, lead)
        _check(node.orelse, names, used, lead)
        return
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            offered = ", ".join(FUNCTIONS)
            raise ExprError(f"only these functions can be called: {offered}", _at(node, lead))
        if node.keywords:
            raise ExprError(f"{node.func.id}() takes no keyword arguments", _at(node.keywords[0].value, lead))
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise ExprError(f"{node.func.id}() takes plain arguments, not *{ast.unparse(arg.value)}", _at(arg, lead))
        fewest, most = FUNCTIONS[node.func.id]
        count = len(node.args)
        if count < fewest or (most is not None and count > most):
            wanted = f"{fewest}" if fewest == most else f"at least {fewest}"
            raise ExprError(f"{node.func.id}() takes {wanted} argument{'s' if fewest != 1 else ''}, got {count}", _at(node, lead))
        for arg in node.args:
            _check(arg, names, used, lead)
        return
    if isinstance(node, (ast.Compare, ast.BoolOp)) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
        raise ExprError("a condition is a number only inside `a if condition else b`", _at(node, lead))
    raise ExprError(f"{ast.unparse(node)!r} is not arithmetic a calculator does", _at(node, lead))


# ---------------------------------------------------------------- Python


def evaluate(expr: Expr, values: dict[str, Number]) -> Number:
    """Compute an expression for these values, with Python's rules; raise ExprError for what a
    page must not show (and the compiled JavaScript refuses alike)."""
    result = _eval(expr.tree, values)
    return _finite(result, expr.tree)


def _finite(value: Number, node: ast.AST) -> Number:
    if isinstance(value, bool):
        raise ExprError("a condition is not a number", getattr(node, "col_offset", 0))
    if isinstance(value, float) and not math.isfinite(value):
        raise ExprError("the result is not a finite number", getattr(node, "col_offset", 0))
    if isinstance(value, int) and abs(value) >= EXACT:  # a browser holds it as the nearest float: so do we
        try:
            return float(value)
        except OverflowError:
            raise ExprError("the result is not a finite number", getattr(node, "col_offset", 0)) from None
    return value


def _eval(node: ast.AST, values: dict[str, Number]):
    if isinstance(node, ast.Constant):
        return _finite(node.value, node)
    if isinstance(node, ast.Name):
        return _finite(values[node.id], node)
    if isinstance(node, ast.UnaryOp):
        operand = _eval(node.operand, values)
        return -operand if isinstance(node.op, ast.USub) else (not operand) if isinstance(node.op, ast.Not) else +operand
    if isinstance(node, ast.BinOp):
        left, right = _finite(_eval(node.left, values), node.left), _finite(_eval(node.right, values), node.right)
        return _finite(binary(BINARY[type(node.op)], left, right, getattr(node, "col_offset", 0)), node)
    if isinstance(node, ast.Compare):
        left, right = _eval(node.left, values), _eval(node.comparators[0], values)
        op = COMPARE[type(node.ops[0])]
        return {"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right, "==": left == right, "!=": left != right}[op]
    if isinstance(node, ast.BoolOp):
        truths = (_eval(value, values) for value in node.values)
        return all(truths) if isinstance(node.op, ast.And) else any(truths)
    if isinstance(node, ast.IfExp):
        return _eval(node.body, values) if _eval(node.test, values) else _eval(node.orelse, values)
    if isinstance(node, ast.Call):
        args = [_finite(_eval(arg, values), arg) for arg in node.args]
        return _finite(call(node.func.id, args, getattr(node, "col_offset", 0)), node)
    raise AssertionError(f"unchecked node {ast.dump(node)}")  # parse_expr let nothing else through


def binary(op: str, left: Number, right: Number, at: int = 0) -> Number:
    """One arithmetic step, refusing division by zero and powers too large to compute."""
    if op in ("/", "//", "%") and right == 0:
        raise ExprError("division by zero", at)
    if op == "**":
        if left == 0 and right < 0:
            raise ExprError("zero to a negative power", at)
        if left < 0 and isinstance(right, float) and not right.is_integer():
            raise ExprError("a negative number to a fractional power", at)
        if abs(left) > 1 and right * math.log2(abs(left)) > 1024:
            raise ExprError("a power too large to compute", at)
    return {
        "+": lambda: left + right,
        "-": lambda: left - right,
        "*": lambda: left * right,
        "/": lambda: left / right,
        # Floats floor the true quotient, as a browser does (Python's own 1 // 0.1 gives 9.0).
        "//": lambda: left // right if isinstance(left, int) and isinstance(right, int) else math.floor(left / right),
        "%": lambda: left % right,
        "**": lambda: left**right,
    }[op]()


def call(name: str, args: list[Number], at: int = 0) -> Number:
    """One function of FUNCTIONS, with the argument checks the page makes too."""
    if name == "sqrt" and args[0] < 0:
        raise ExprError("the square root of a negative number", at)
    if name == "log2" and args[0] <= 0:
        raise ExprError("the logarithm of a number that is not positive", at)
    return {
        "min": lambda: min(args),
        "max": lambda: max(args),
        "ceil": lambda: math.ceil(args[0]),
        "floor": lambda: math.floor(args[0]),
        "abs": lambda: abs(args[0]),
        "sqrt": lambda: math.sqrt(args[0]),
        "log2": lambda: math.log2(args[0]),
    }[name]()


# ---------------------------------------------------------------- JavaScript

JS_BINARY = {"+": "add", "-": "sub", "*": "mul", "/": "div", "//": "floordiv", "%": "mod", "**": "pow"}
JS_COMPARE = {"<": "<", "<=": "<=", ">": ">", ">=": ">=", "==": "===", "!=": "!=="}


def finite_constant(value: int | float) -> bool:
    """Say whether a number written in an expression is one both Python and JavaScript hold: not
    inf or nan, and no integer past the largest float (JavaScript reads it as Infinity)."""
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def to_js(expr: Expr, scope: str = "v") -> str:
    """Compile a checked expression to one JavaScript expression over `scope` (an object holding
    the input values by name), using the helpers of templates/static/calculator.js."""
    return f"X.num({_js(expr.tree, scope)})"


def _js(node: ast.AST, scope: str) -> str:
    if isinstance(node, ast.Constant):
        return repr(node.value) if isinstance(node.value, int) else float.__repr__(node.value)
    if isinstance(node, ast.Name):
        return f"{scope}[{node.id!r}]"
    if isinstance(node, ast.UnaryOp):
        operand = _js(node.operand, scope)
        return f"(-{operand})" if isinstance(node.op, ast.USub) else f"(!{operand})" if isinstance(node.op, ast.Not) else operand
    if isinstance(node, ast.BinOp):
        return f"X.{JS_BINARY[BINARY[type(node.op)]]}({_js(node.left, scope)}, {_js(node.right, scope)})"
    if isinstance(node, ast.Compare):
        return f"({_js(node.left, scope)} {JS_COMPARE[COMPARE[type(node.ops[0])]]} {_js(node.comparators[0], scope)})"
    if isinstance(node, ast.BoolOp):
        joint = " && " if isinstance(node.op, ast.And) else " || "
        return "(" + joint.join(_js(value, scope) for value in node.values) + ")"
    if isinstance(node, ast.IfExp):
        return f"({_js(node.test, scope)} ? {_js(node.body, scope)} : {_js(node.orelse, scope)})"
    if isinstance(node, ast.Call):
        return f"X.{node.func.id}(" + ", ".join(_js(arg, scope) for arg in node.args) + ")"
    raise AssertionError(f"unchecked node {ast.dump(node)}")


# ---------------------------------------------------------------- mirrors


def parse_call(text: str, names: frozenset[str] | set[str]) -> dict:
    """Check a `mirrors` call and return it as a request of the parity probe (infralens/child/probe.py).

    A call of a starter's function or class (a dotted name), whose arguments are the given names
    (sent as `{"input": name}`; `name.name` sends a choice's name, `{"input": name, "name": true}`),
    numbers, strings, booleans, None, lists of these, or calls;
    then `.attribute` and `[index]` steps into what it returns, kept as "path". Raise ExprError.
    """
    tree, lead = _syntax(text, "a call")
    path: list[str | int] = []
    while isinstance(tree, (ast.Attribute, ast.Subscript)):
        if isinstance(tree, ast.Attribute):
            path.append(tree.attr)
        elif isinstance(tree.slice, ast.Constant) and type(tree.slice.value) in (int, str):
            path.append(tree.slice.value)
        else:
            raise ExprError("an index must be a whole number or a quoted key", _at(tree.slice, lead))
        tree = tree.value
    if not isinstance(tree, ast.Call):
        raise ExprError("expected a call of a function of the starter, such as `kv_bytes(layers=layers)`", _at(tree, lead))
    request = _request(tree, frozenset(names), lead)
    if path:
        request["path"] = path[::-1]
    return request


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


def _request(node: ast.Call, names: frozenset[str], lead: int) -> dict:
    function = _dotted(node.func)
    if function is None:
        raise ExprError("call a function by its name (or dotted name), such as `estimate_memory`", _at(node.func, lead))
    if function in names:
        raise ExprError(f"{function!r} is an input, not a function of the starter", _at(node.func, lead))
    args = []
    for arg in node.args:
        if isinstance(arg, ast.Starred):
            raise ExprError("pass arguments one by one, not with *", _at(arg, lead))
        args.append(_argument(arg, names, lead))
    kwargs = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            raise ExprError("pass arguments one by one, not with **", _at(keyword.value, lead))
        kwargs[keyword.arg] = _argument(keyword.value, names, lead)
    return {"call": function, "args": args, "kwargs": kwargs}


def _argument(node: ast.AST, names: frozenset[str], lead: int):
    if isinstance(node, ast.Name):
        if node.id in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[node.id]
        if node.id not in names:

            hint = did_you_mean(node.id, names) or f" (inputs: {', '.join(sorted(names)) or 'none'})"
            raise ExprError(f"unknown input {node.id!r}{hint}", _at(node, lead))
        return {"input": node.id}
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in names and node.attr == "name":
        return {"input": node.value.id, "name": True}  # a choice input's name, where its number is not what the starter takes
    if isinstance(node, ast.Constant) and (node.value is None or type(node.value) in (bool, int, float, str)):
        if isinstance(node.value, float) and not math.isfinite(node.value):
            raise ExprError("only finite numbers may be written", _at(node, lead))
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) and type(node.operand.value) in (int, float):
        return -node.operand.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_argument(item, names, lead) for item in node.elts]
    if isinstance(node, ast.Call):
        return _request(node, names, lead)
    raise ExprError(f"an argument is an input, a number, a quoted text, a list or a call, not {ast.unparse(node)!r}", _at(node, lead))
