"""An independent math judge: a parser and evaluator of its own (not math-verify's, not sympy), over the answer grammar
the math rewards accept, for the second opinion and the wires.

    numbers       integers (thousands commas), decimals, `a/b`, `\\frac{a}{b}` (`\\dfrac`, `\\tfrac`, `\\frac12`)
    radicals      `\\sqrt{x}`, `\\sqrt[n]{x}`, `√x`, powers `a^{b}`, `\\pi`, `e`, `\\infty`, `\\ln`, `\\log`, `\\exp`,
                  `\\sin`, `\\cos`, `\\tan`; `+ - * / \\cdot \\times \\div`, implicit products (`2\\sqrt{3}`, `3x`)
    structures    intervals and tuples `(a, b]`, sets `\\{a, b\\}`, several answers `a, b` (a set), `x = a`
    percentages   `5\\%` is 5 (one reading, as the rewards read it); units: `\\text{ cm}`, `^\\circ`, a trailing word
    relations     `x \\le 3`, `x \\neq 2`, `-3 \\le x \\le 3` (gold and answer), `=` and `\\approx` chains (`6 \\cdot 7 = 42`)
    more          `\\pm` (`1 \\pm \\sqrt{2}` is the set of both), matrices (`\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}`, cell by
                  cell), complex numbers (a gold whose one variable is `i`: evaluated at the imaginary unit)
    words         a multiple-choice letter (`A`, `(B)`, `C.`) or yes / no / true / false: the answer must be the same word

Values compare exactly as fractions where both sides are rational, else numerically (relative 1e-6); an expression
in variables compares by its values at fixed points. A verdict is True, False, or None when the judge cannot read
the gold or the answer (counted by the second opinion as unchecked, never a disagreement). Deliberately stricter
than an evaluator: an answer that restates the question's numbers (`499+296`, `499 296` for `499+296=`: more numbers
than the gold, all of them the question's) is wrong; several values where the gold is one (a hedge) are wrong. An
answer's form is judged as the rewards' policy states it (docs/rewards.md), by code of its own: a unit other than the
gold's is wrong (a unit on one side only is not judged), an equation whose sides without variables differ (`42=41`),
a relation with a side missing (`= 41`) and an order or `\\neq` relation for a gold that states none are wrong.

Bounded: an answer of at most `MAX_CHARS` characters, nesting of at most `MAX_DEPTH`, exact powers of at most
`MAX_EXACT_DIGITS` digits (past that, floating point; past floating point, unjudgeable).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from r1kit.judging.units import VALUE_WORDS, unit

MAX_CHARS = 2_000
MAX_DEPTH = 60
MAX_EXACT_DIGITS = 2_000
RELATIVE = 1e-6
POINTS = (0.37, 1.91, -2.3)  # where expressions in variables are compared

Verdict = bool | None


class Unreadable(ValueError):
    """Outside the grammar (or past a bound): the judge cannot read it."""


# --------------------------------------------------------------------------------------------------------------------
# Text to tokens
# --------------------------------------------------------------------------------------------------------------------
_DROP = ("\\left", "\\right", "\\displaystyle", "\\!", "\\,", "\\;", "\\:", "\\quad", "\\qquad", "\\ ", "~", "\\$", "$",
         "\\(", "\\)", "\\[", "\\]", "\\big", "\\Big")
_REPLACE = {"\\dfrac": "\\frac", "\\tfrac": "\\frac", "\\cdot": "*", "\\times": "*", "\\div": "/", "×": "*", "·": "*",
            "÷": "/", "−": "-", "±": "\\pm", "∓": "\\mp", "π": "\\pi", "∞": "\\infty", "√": "\\sqrt", "\\lbrace": "\\{", "\\rbrace": "\\}"}
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°|\\degree")
_TEXT = re.compile(r"\\(?:text|mathrm|textbf|mbox|operatorname|mathbf)\s*\{([^{}]*)\}(\s*\^\s*\{?\s*\d\s*\}?)?")
_WORDS = re.compile(r"\b(?:or|and)\b")
# each word takes its whole run of letters (`(?![A-Za-z])`): `[A-Za-z]{2,}` repeated could split a long run of
# letters in exponentially many ways before failing (`5 aaaa...a!`, 40 letters: 20 s)
_TRAILING_UNIT = re.compile(r"(?<=[\d}).])\s*(?:[A-Za-z]{2,}(?![A-Za-z])\.?\s*)+(?:\^\{?\d\}?)?$")
_THOUSANDS = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_TOKEN = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+|\\[A-Za-z]+|\\\{|\\\}|\\%|[A-Za-z]|[-+*/^(){}\[\],=%!<>|])")
FUNCTIONS = {"\\ln": math.log, "\\log": math.log10, "\\exp": math.exp, "\\sin": math.sin, "\\cos": math.cos,
             "\\tan": math.tan}


def _text_part(match: re.Match) -> str:
    """`\\text{...}`: a word of letters (a unit with its power, `\\text{ cm}^2`, or "or") is dropped or kept as a
    word; anything else is read."""
    inner = match[1].strip()
    if inner in ("or", "and"):
        return ","
    return "" if re.fullmatch(r"[A-Za-z .]*", inner) else inner + (match[2] or "")


_SCIENTIFIC = re.compile(r"([-+]?\d+(?:\.\d+)?)[eE]([-+]?\d{1,2})")


def clean(text: str) -> str:
    """The answer's text with formatting, units and degree signs dropped, words `or`/`and` made commas, a number in
    scientific notation written out (`1e-5`, not 1 e - 5)."""
    text = str(text).strip()
    if len(text) > MAX_CHARS:
        raise Unreadable("too long")
    if found := _SCIENTIFIC.fullmatch(text):
        text = str(Fraction(found[1]) * Fraction(10) ** int(found[2]))
    text = _TEXT.sub(_text_part, text)
    text = _DEGREES.sub("", text)
    for old in _DROP:
        text = text.replace(old, "")
    for old, new in _REPLACE.items():
        text = text.replace(old, new)
    text = _WORDS.sub(",", text).strip().rstrip(".").strip()
    text = text.rsplit("=", 1)[-1].strip()  # `x = 5`, `499+296=795`: what the equation ends in
    if _THOUSANDS.match(text):
        text = text.replace(",", "")
    return text


def tokens(text: str) -> list[str]:
    found, at = [], 0
    while at < len(text):
        match = _TOKEN.match(text, at)
        if match is None:
            if text[at:].strip():
                raise Unreadable(f"cannot read {text[at:at + 20]!r}")
            break
        found.append(match[1])
        at = match.end()
    return found


# --------------------------------------------------------------------------------------------------------------------
# Tokens to a tree: ("num", Fraction) ("var", x) ("const", name) ("op", sym, a, b) ("neg", a) ("root", a, n)
# ("fn", name, a) ("seq", open, items, close) ("set", items) ("list", items)
# --------------------------------------------------------------------------------------------------------------------
class Parser:
    def __init__(self, toks: list[str]):
        self.toks, self.at, self.depth = toks, 0, 0

    def peek(self) -> str | None:
        return self.toks[self.at] if self.at < len(self.toks) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expected is not None and tok != expected):
            raise Unreadable(f"expected {expected or 'more'}, got {tok}")
        self.at += 1
        return tok

    def whole(self):
        items = [self.item()]
        while self.peek() == ",":
            self.take(",")
            items.append(self.item())
        if self.peek() is not None:
            raise Unreadable(f"left over: {self.toks[self.at:self.at + 3]}")
        return items[0] if len(items) == 1 else ("list", items)

    def nested(self):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise Unreadable("nested too deep")

    def item(self):
        if self.peek() == "\\{":
            self.take()
            self.nested()
            items = [] if self.peek() == "\\}" else [self.item()]
            while self.peek() == ",":
                self.take()
                items.append(self.item())
            self.take("\\}")
            self.depth -= 1
            return ("set", items)
        return self.expr()

    def expr(self):
        sign = self.take() if self.peek() in ("+", "-") else "+"
        node = self.term()
        node = ("neg", node) if sign == "-" else node
        while self.peek() in ("+", "-"):
            op = self.take()
            node = ("op", op, node, self.term())
        return node

    def term(self):
        node = self.power()
        while True:
            tok = self.peek()
            if tok in ("*", "/"):
                self.take()
                node = ("op", tok, node, self.power())
            elif tok is not None and self.starts_atom(tok):
                if node[0] == "num" and tok[0].isdigit():
                    raise Unreadable("two numbers side by side")  # `499 296`: no value, a list at best
                node = ("op", "*", node, self.power())
            else:
                return node

    @staticmethod
    def starts_atom(tok: str) -> bool:
        return tok[0].isdigit() or tok[0] == "." or tok.isalpha() or tok in ("(", "\\frac", "\\sqrt", "\\pi",
                                                                              "\\infty") or tok in FUNCTIONS

    def power(self):
        base = self.postfix()
        if self.peek() != "^":
            return base
        self.take("^")
        if self.peek() == "{":
            exponent = self.group()
        elif self.peek() == "-":
            self.take()
            exponent = ("neg", self.postfix())
        else:
            exponent = self.single()
        return ("op", "^", base, exponent)

    def postfix(self):
        node = self.atom()
        if self.peek() in ("%", "\\%"):
            self.take()  # one reading: 5% is 5, as the rewards read it
        return node

    def single(self):
        """One token as an argument (`\\frac12`, `x^2`): a digit of a number, a letter, or an atom."""
        tok = self.peek()
        if tok is not None and tok[0].isdigit() and len(tok) > 1 and "." not in tok:
            self.toks[self.at] = tok[1:]
            return ("num", Fraction(int(tok[0])))
        return self.atom()

    def group(self):
        if self.peek() == "{":
            self.take("{")
            self.nested()
            node = self.expr()
            self.take("}")
            self.depth -= 1
            return node
        return self.single()

    def atom(self):
        tok = self.take()
        if tok[0].isdigit() or tok[0] == ".":
            return ("num", Fraction(tok if not tok.endswith(".") else tok[:-1]))
        if tok == "\\frac":
            return ("op", "/", self.group(), self.group())
        if tok == "\\sqrt":
            index = None
            if self.peek() == "[":
                self.take("[")
                index = self.expr()
                self.take("]")
            return ("root", self.group(), index)
        if tok in ("\\pi", "\\infty"):
            return ("const", tok[1:])
        if tok in FUNCTIONS:
            return ("fn", tok, self.group() if self.peek() == "{" else self.power())
        if tok.isalpha() and len(tok) == 1:
            return ("const", "e") if tok == "e" else ("var", tok)
        if tok in ("(", "[", "{"):
            return self.bracketed(tok)
        raise Unreadable(f"cannot read {tok!r}")

    def bracketed(self, opening: str):
        self.nested()
        items = [self.expr()]
        while self.peek() == ",":
            self.take(",")
            items.append(self.expr())
        closing = self.take()
        if closing not in (")", "]", "}") or (opening == "{" and closing != "}"):
            raise Unreadable("unbalanced brackets")
        self.depth -= 1
        if len(items) == 1 and opening + closing in ("()", "{}", "[]"):
            return items[0]
        return ("seq", opening, items, closing)


_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{3,}")


def parse(text: str):
    """The tree of an answer; raises `Unreadable` outside the grammar (a word of three letters or more included:
    not a product of variables)."""
    cleaned = clean(text)
    stripped = _TRAILING_UNIT.sub("", cleaned).strip()  # `5 cm`, `12 dollars`: the unit dropped
    if stripped and stripped != cleaned and _parses(stripped):
        cleaned = stripped
    if not cleaned:
        raise Unreadable("empty")
    if _WORD.search(cleaned):
        raise Unreadable("a word")
    if "\\pm" in cleaned or "\\mp" in cleaned:
        return _plus_minus(cleaned)
    return Parser(tokens(cleaned)).whole()


_PLUS_MINUS = re.compile(r"\\(pm|mp)(?![A-Za-z])")


def _plus_minus(cleaned: str):
    """`1 \\pm \\sqrt{2}`: the set of both values. Several signs take the upper signs together, then the lower
    (`a \\pm b \\mp c` is a+b-c and a-b+c), as a formula that writes them means."""
    values = []
    for upper in (True, False):
        text = _PLUS_MINUS.sub(lambda m, upper=upper: "+" if (m[1] == "pm") == upper else "-", cleaned)
        values.append(Parser(tokens(text)).whole())
    return ("set", values)


def _parses(text: str) -> bool:
    try:
        Parser(tokens(text)).whole()
    except (Unreadable, RecursionError):
        return False
    return not _WORD.search(text)


# --------------------------------------------------------------------------------------------------------------------
# Evaluation: exact fractions where it can, floats where it must
# --------------------------------------------------------------------------------------------------------------------
Number = Fraction | float


def _power(base: Number, exponent: Number) -> Number:
    if isinstance(base, complex) or isinstance(exponent, complex):
        return complex(base) ** complex(exponent)
    if isinstance(base, Fraction) and isinstance(exponent, Fraction) and exponent.denominator == 1:
        digits = abs(exponent.numerator) * max(len(str(abs(base.numerator))), len(str(base.denominator)))
        if digits <= MAX_EXACT_DIGITS:
            if base == 0 and exponent < 0:
                raise Unreadable("division by zero")
            return base ** int(exponent)
    return float(base) ** float(exponent)


def _root(value: Number, index: Number) -> Number:
    if isinstance(value, complex) or isinstance(index, complex):
        return complex(value) ** (1 / complex(index))
    if isinstance(value, Fraction) and isinstance(index, Fraction) and index.denominator == 1 and 1 < index <= 64:
        n = int(index)
        if value >= 0:
            top, bottom = round(value.numerator ** (1 / n)), round(value.denominator ** (1 / n))
            if top ** n == value.numerator and bottom ** n == value.denominator:
                return Fraction(top, bottom)
    if value < 0 and isinstance(index, Fraction) and index.denominator == 1 and int(index) % 2 == 1:
        return -(float(-value) ** (1 / float(index)))
    return float(value) ** (1 / float(index))


def evaluate(node, env: dict[str, float | complex]) -> Number | complex:
    """The value of a scalar tree; raises `Unreadable` for what has none (a set where a number goes, 1/0, a complex
    result where no variable is complex, an overflow)."""
    try:
        value = _evaluate(node, env)
    except (ZeroDivisionError, OverflowError, ValueError, TypeError) as e:
        raise Unreadable(str(e)) from None
    allowed = any(isinstance(v, complex) for v in env.values())
    if (isinstance(value, complex) and not allowed) or (isinstance(value, float | complex) and value != value):
        raise Unreadable("not a real number")
    return value


def _evaluate(node, env):
    kind = node[0]
    if kind == "num":
        return node[1]
    if kind == "var":
        if node[1] not in env:
            raise Unreadable(f"a variable {node[1]}")
        return env[node[1]]
    if kind == "const":
        return {"pi": math.pi, "e": math.e, "infty": math.inf}[node[1]]
    if kind == "neg":
        return -_evaluate(node[1], env)
    if kind == "root":
        index = Fraction(2) if node[2] is None else _evaluate(node[2], env)
        return _root(_evaluate(node[1], env), index)
    if kind == "fn":
        return FUNCTIONS[node[1]](float(_evaluate(node[2], env)))
    if kind == "op":
        a, b = _evaluate(node[2], env), _evaluate(node[3], env)
        if node[1] == "^":
            return _power(a, b)
        if isinstance(a, complex) or isinstance(b, complex):
            a, b = complex(a), complex(b)
        elif isinstance(a, float) or isinstance(b, float):
            a, b = float(a), float(b)
        return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "/": lambda: a / b}[node[1]]()
    raise Unreadable(f"a {kind} where a number goes")


def variables(node) -> set[str]:
    """The variables a tree names."""
    if isinstance(node, list):
        return set().union(*(variables(item) for item in node))
    if not isinstance(node, tuple):
        return set()
    if node[0] == "var":
        return {node[1]}
    return set().union(*(variables(part) for part in node[1:]))


def numbers(node) -> list[Fraction]:
    """The number literals of a tree, in order."""
    if isinstance(node, list):
        return [n for item in node for n in numbers(item)]
    if not isinstance(node, tuple):
        return []
    if node[0] == "num":
        return [node[1]]
    return [n for part in node[1:] for n in numbers(part)]


# --------------------------------------------------------------------------------------------------------------------
# Comparison
# --------------------------------------------------------------------------------------------------------------------
def close(a: Number, b: Number) -> bool:
    if isinstance(a, Fraction) and isinstance(b, Fraction):
        return a == b
    if isinstance(a, complex) or isinstance(b, complex):  # part by part: 10^6 + i is not 10^6
        a, b = complex(a), complex(b)
        return all(math.isfinite(x) and math.isfinite(y) and abs(x - y) <= RELATIVE * max(1.0, abs(x), abs(y))
                   for x, y in ((a.real, b.real), (a.imag, b.imag)))
    try:
        a, b = float(a), float(b)
    except OverflowError:  # an exact number past floating point (`10^{400}`) against a float (`\\sqrt{2}`, `\\pi`)
        return False
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= RELATIVE * max(1.0, abs(a), abs(b))


IMAGINARY = {"i": 1j}  # a gold whose one variable is `i` states a complex number (`3+4i`): `i` is the unit


def scalar_equal(gold, answer) -> bool:
    names = variables(gold) | variables(answer)
    if not names:
        return close(evaluate(gold, {}), evaluate(answer, {}))
    if names == variables(gold) == {"i"}:
        return close(evaluate(gold, IMAGINARY), evaluate(answer, IMAGINARY))
    if not variables(answer) <= variables(gold):
        return False
    names = sorted(names)
    for shift in range(3):  # points where both are defined: a pole at one point is no verdict
        env = {name: POINTS[(k + shift) % len(POINTS)] + 0.11 * k for k, name in enumerate(names)}
        try:
            return all(close(evaluate(gold, point), evaluate(answer, point))
                       for point in (env, {n: v * 1.7 + 0.3 for n, v in env.items()}))
        except Unreadable:
            continue
    raise Unreadable("no point where both are defined")


def equal(gold, answer) -> bool:
    """Whether two trees name the same value (sets and several answers in any order, sequences in order with the
    same brackets)."""
    kinds = gold[0], answer[0]
    if kinds[0] in ("set", "list") or kinds[1] in ("set", "list"):
        mine, theirs = _members(gold), _members(answer)
        if len(mine) != len(theirs):
            return False
        left = list(theirs)
        for item in mine:
            match = next((k for k, other in enumerate(left) if equal(item, other)), None)
            if match is None:
                return False
            left.pop(match)
        return True
    if kinds[0] == "seq" or kinds[1] == "seq":
        if kinds[0] != kinds[1] or (gold[1], gold[3]) != (answer[1], answer[3]) or len(gold[2]) != len(answer[2]):
            return False
        return all(equal(g, a) for g, a in zip(gold[2], answer[2]))
    return scalar_equal(gold, answer)


def _members(node) -> list:
    """The members of a set or of several answers, each once (`795, 795` is one answer); a value alone."""
    if node[0] not in ("set", "list"):
        return [node]
    kept: list = []
    for item in node[1]:
        try:
            if any(equal(item, other) for other in kept):
                continue
        except (Unreadable, RecursionError):
            pass
        kept.append(item)
    return kept


def restates(answer, gold, question: str | None) -> bool:
    """The answer holds more numbers than the gold, and at least two of them are the question's (padding such as
    `+0` or `\\cdot 1` does not hide a copy)."""
    if not question:
        return False
    used = numbers(answer)
    if len(used) < 2 or len(used) <= len(numbers(gold)):
        return False
    given = list(Fraction(n) for n in re.findall(r"\d+(?:\.\d+)?", str(question)[-20_000:], re.ASCII))
    found = 0
    for number in used:
        if number in given:
            given.remove(number)
            found += 1
    return found >= 2


# --------------------------------------------------------------------------------------------------------------------
# An answer's form: its relations and its unit
# --------------------------------------------------------------------------------------------------------------------
_RELATION = re.compile(r"\\(?:neq|ne|not\s*=|leqslant|geqslant|leq|geq|le|ge|lt|gt|approx)(?![A-Za-z])|<=|>=|!=|[=<>≤≥≠≈]")
_CANONICAL = {"=": "=", "\\approx": "=", "≈": "=", "\\neq": "≠", "\\ne": "≠", "\\not=": "≠", "!=": "≠", "≠": "≠",
              "<": "<", "\\lt": "<", ">": ">", "\\gt": ">", "\\le": "≤", "\\leq": "≤", "\\leqslant": "≤", "<=": "≤",
              "≤": "≤", "\\ge": "≥", "\\geq": "≥", "\\geqslant": "≥", ">=": "≥", "≥": "≥"}
_FLIPPED = {">": "<", "≥": "≤", "<": ">", "≤": "≥", "≠": "≠", "=": "="}


def statement(text: str) -> tuple[list[str], list[str]]:
    """`text` split at its relations outside brackets: (sides, operators); `\\approx` is `=` (its sides must agree)."""
    text = str(text)
    if len(text) > MAX_CHARS:
        raise Unreadable("too long")
    sides, ops, start, depth, at = [], [], 0, 0, 0
    while at < len(text):
        ch = text[at]
        if ch in "{([":
            depth += 1
        elif ch in "})]":
            depth = max(0, depth - 1)
        elif depth == 0 and (found := _RELATION.match(text, at)):
            sides.append(text[start:at].strip())
            ops.append(_CANONICAL[re.sub(r"\s+", "", found[0])])
            at = start = found.end()
            continue
        at += 1
    return sides + [text[start:].strip()], ops


def _form(answer_text: str, gold_text: str) -> bool:
    """Whether the answer's form allows it to equal the gold: no relation with a side missing, no order or `\\neq`
    relation (the gold states none), the numbers of an `=` chain equal, and no unit other than the gold's."""
    sides, ops = statement(answer_text)
    if ops and (not all(sides) or set(ops) - {"="}):
        return False
    if ops and not _chain_agrees(sides):
        return False
    stated = [unit(side) for side in sides]
    if any(u is not None and u.split("^")[0] in VALUE_WORDS for u in stated):
        return False  # `12 thousand`, `5 squared`, `2 cos`: a word that changes the value is no unit
    gold_unit = unit(statement(gold_text)[0][-1])
    return gold_unit is None or all(u in (None, gold_unit) for u in stated)


def _chain_agrees(sides: list[str]) -> bool:
    """Every side of an `=` chain that names no variable equals the value the chain ends in (`6 \\cdot 7 = 42`;
    not `42 = 41`, `\\pm 3 = 3`, `7 = 2i`); a side outside the grammar is not read, one that has no value is wrong."""
    try:
        last = parse(sides[-1])
    except (Unreadable, RecursionError):
        return True
    for side in sides[:-1]:
        try:
            tree = parse(side)
        except (Unreadable, RecursionError):
            continue
        if variables(tree) - variables(last) or (variables(tree) and tree[0] == "var"):
            continue  # a name (`x = 4`) or an expression in the question's variables
        try:
            if not equal(last, tree):
                return False
        except (Unreadable, RecursionError, ArithmeticError, ValueError, TypeError):
            return False
    return True


def _oriented(sides: list[str], ops: list[str]) -> tuple[list[str], list[str]]:
    """`3 \\ge x` as `x \\le 3`: a chain read from its `<` end."""
    if ops and ops[0] in (">", "≥"):
        return sides[::-1], [_FLIPPED[op] for op in reversed(ops)]
    return sides, ops


def _judge_relation(answer_text: str, gold_sides: list[str], gold_ops: list[str]) -> Verdict:
    """An answer against a gold that is an inequality or a `\\neq`: the same relation between equal sides. A value is
    wrong; an interval or a set may state the same (None: not judged here)."""
    sides, ops = statement(answer_text)
    if not ops:
        return None if parse(answer_text)[0] in ("seq", "set", "list") else False
    if not all(sides) or not all(gold_sides):
        return False
    (sides, ops), (gold_sides, gold_ops) = _oriented(sides, ops), _oriented(gold_sides, gold_ops)
    readings = [sides] + ([sides[::-1]] if set(ops) == {"≠"} and len(sides) == 2 else [])
    return ops == gold_ops and any(len(r) == len(gold_sides) and all(equal(parse(g), parse(a))
                                                                      for g, a in zip(gold_sides, r))
                                   for r in readings)


# --------------------------------------------------------------------------------------------------------------------
# Golds that are no single expression: a word or a choice, a matrix
# --------------------------------------------------------------------------------------------------------------------
_CHOICE = re.compile(r"^[(\[{]?([A-Ja-j])[)\]}]?\.?$")
WORDS = ("yes", "no", "true", "false")
_WRAPPER = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mathit|mbox)\s*\{([^{}]*)\}")
_SPACES = re.compile(r"\\[,;:! ()\[\]]|~|\s")  # spacing and `\\(`, `\\[`: none of them the word


def word(text: str, gold: bool = False) -> str | None:
    """A multiple-choice letter (`A`, `(B)`, `C.`, `\\text{D}`), upper-case, or yes / no / true / false, lower-case;
    None for anything else. A gold's letter must be upper-case (a lower-case one is a variable, `e` a constant)."""
    text = _WRAPPER.sub(r"\1", str(text)[:MAX_CHARS])
    text = _SPACES.sub("", text.replace("*", "").replace("$", "")).strip().rstrip(".").strip()
    choice = _CHOICE.match(text)
    if choice and (not gold or choice[1].isupper()):
        return choice[1].upper()
    return text.lower() if text.lower() in WORDS else None


# A matrix's value (`vmatrix` is a determinant: no matrix, not read)
_MATRIX = re.compile(r"\\begin\{(?P<kind>[pbB]?matrix|array)\}(?:\{[^{}]*\})?(?P<body>.*?)\\end\{(?P=kind)\}", re.S)


def matrix(text: str) -> list[list[str]] | None:
    """The cells, row by row, of the matrix `text` is (each read by the grammar); None when it holds none; `Unreadable` when it holds more
    than one matrix alone (an expression around it, a second matrix)."""
    text = str(text)
    if len(text) > MAX_CHARS:
        raise Unreadable("too long")
    found = _MATRIX.search(text)
    if found is None:
        return None
    rest = (text[:found.start()] + text[found.end():]).replace("\\left", "").replace("\\right", "")
    if rest.strip(" $().[]"):
        raise Unreadable("more than a matrix")
    body = found["body"].replace("\\hline", "")
    rows = [row for row in re.split(r"\\\\(?:\[[^\]]*\])?", body) if row.strip()]
    cells = [[cell.strip() for cell in row.split("&")] for row in rows]
    for row in cells:
        for cell in row:
            parse(cell)  # outside the grammar: Unreadable
    return cells


def _judge_matrix(answer_text: str, gold: list[list[str]]) -> Verdict:
    """A matrix gold: the answer's matrix of the same shape, each cell judged against the gold's as a value (its
    form and unit included); any other readable answer is wrong."""
    answer = matrix(answer_text)
    if answer is None:
        parse(answer_text)  # unreadable: no verdict; readable: a value that is no matrix
        return False
    if [len(row) for row in answer] != [len(row) for row in gold]:
        return False
    verdicts = [judge(a, g) for gold_row, answer_row in zip(gold, answer) for g, a in zip(gold_row, answer_row)]
    return False if False in verdicts else (None if None in verdicts else True)


def judge(answer_text: str | None, gold_text, question: str | None = None) -> Verdict:
    """True when the answer equals the gold, False when it does not (or restates the question, or hedges several
    values for one, or its form differs: `_form`), None when the gold or the answer is outside the grammar. No answer
    at all is False. A multiple-choice or yes/no gold takes the same word; a matrix gold the same matrix."""
    gold_word = word(gold_text, gold=True)
    if gold_word is not None:
        return answer_text is not None and word(answer_text) == gold_word
    try:
        gold_matrix = matrix(gold_text)
    except (Unreadable, RecursionError):
        return None
    if gold_matrix is not None:
        if answer_text is None or not str(answer_text).strip():
            return False
        try:
            return _judge_matrix(str(answer_text), gold_matrix)
        except (Unreadable, RecursionError, ArithmeticError, ValueError, TypeError):
            return None
    try:
        gold_sides, gold_ops = statement(str(gold_text))
        gold = None if set(gold_ops) - {"="} else parse(gold_sides[-1])
    except (Unreadable, RecursionError):
        return None
    if answer_text is None or not str(answer_text).strip():
        return False
    try:
        if gold is None:
            return _judge_relation(str(answer_text), gold_sides, gold_ops)
    except (Unreadable, RecursionError, ArithmeticError, ValueError, TypeError):
        return None
    try:
        if not _form(str(answer_text), str(gold_text)):
            return False
        value_text = statement(answer_text)[0][-1]  # what an `=` or `\\approx` chain ends in
    except (Unreadable, RecursionError, ArithmeticError, ValueError, TypeError):
        value_text = str(answer_text)  # past a bound: read below, where a hedge of plain numbers is still wrong
    try:
        answer = parse(value_text)
    except (Unreadable, RecursionError):
        return _hedge(answer_text, gold)
    if gold[0] not in ("list", "set") and answer[0] == "list" and len(_members(answer)) > 1:
        return False  # several answers for one gold: a hedge
    if restates(answer, gold, question):
        return False
    try:
        return equal(gold, answer)
    except (Unreadable, RecursionError, ArithmeticError, ValueError, TypeError):
        return None  # never raises: one row that did would leave the whole batch unchecked


def _hedge(answer_text: str, gold) -> Verdict:
    """An answer the grammar cannot read as one value: several plain numbers for a one-value gold are a hedge
    (False); anything else is unreadable (None)."""
    found = re.findall(r"-?\d+(?:\.\d+)?", str(answer_text)[:MAX_CHARS], re.ASCII)
    if gold[0] not in ("list", "set") and len(found) >= 2 and not re.search(r"[A-Za-z\\]", str(answer_text)):
        return False
    return None
