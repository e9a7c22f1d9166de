/* InfraLens calculators' arithmetic: the helpers expressions compiled by infralens/expr.py call
   (`X.add(a, b)`, `X.floordiv(a, b)`, ...). They follow Python's rules where the page must agree
   with the build (// floors, % takes the divisor's sign, whole powers are exact) and refuse what
   the build refuses: division by zero, a result that is not a finite number, a power too large.
   tests/test_expr.py runs them in Chromium against Python. */
const X = (() => {
  const fail = (message) => { throw new Error(message); };
  const num = (v) => {
    if (typeof v !== "number" || !Number.isFinite(v)) fail("the result is not a finite number");
    return v;
  };
  const nonzero = (b) => (b === 0 ? fail("division by zero") : b);
  return {
    num,
    add: (a, b) => num(a + b), sub: (a, b) => num(a - b), mul: (a, b) => num(a * b),
    div: (a, b) => num(a / nonzero(b)),
    floordiv: (a, b) => num(Math.floor(a / nonzero(b))),
    mod: (a, b) => { nonzero(b); const r = a % b; return num(r !== 0 && (r < 0) !== (b < 0) ? r + b : r); },
    pow: (a, b) => {
      if (a === 0 && b < 0) fail("zero to a negative power");
      if (a < 0 && !Number.isInteger(b)) fail("a negative number to a fractional power");
      if (Math.abs(a) > 1 && b * Math.log2(Math.abs(a)) > 1024) fail("a power too large to compute");
      const whole = Number.isInteger(a) && Number.isInteger(b) && b >= 0;
      if (!whole || b * Math.log2(Math.max(Math.abs(a), 1)) >= 53) return num(a ** b);
      let result = 1;  // a whole power below 2**53: multiplied out, exact, as Python's
      for (let i = 0; i < b && Math.abs(a) > 1; i++) result *= a;
      return num(Math.abs(a) > 1 ? result : a === 0 ? (b === 0 ? 1 : 0) : a === 1 ? 1 : b % 2 ? -1 : 1);
    },
    min: (...v) => num(Math.min(...v)), max: (...v) => num(Math.max(...v)),
    ceil: (a) => num(Math.ceil(a)), floor: (a) => num(Math.floor(a)), abs: (a) => num(Math.abs(a)),
    sqrt: (a) => (a < 0 ? fail("the square root of a negative number") : num(Math.sqrt(a))),
    log2: (a) => (a <= 0 ? fail("the logarithm of a number that is not positive") : num(Math.log2(a))),
  };
})();
