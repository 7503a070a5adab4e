"""An answer's form, read from its text: the unit it carries and the relations it states. math-verify drops both (a
unit is normalised away, `42=41` is read as its last side), so `r1kit.rewards.verify` checks them here, after
math-verify has found the value equal. Stdlib only (the verifier workers import it); every reader is linear in its
input and looks at bounded pieces.

    units(text)           the units of each value `text` states (`5\\text{ cm}`, `5 cm`, `30^\\circ`, `5\\%`, `\\$5`),
                          canonical: `\\mathrm{cm}`, `\\text{ centimeters}` and `cm` are one unit; a generic
                          `\\text{ units}` is none
    relations(text)       each comma-separated item of `text` as (sides, operators), operators canonical: `=`, `≈`,
                          `≠`, `<`, `>`, `≤`, `≥` (split only outside brackets)
    boxed(text)           every `\\boxed{}` of `text`: its content and what follows it on its line
    anchored(text)        what follows the word "answer" up to a math environment (math-verify's reading without a box)
    gold_texts(gold)      the answers a gold states: its boxes' contents, else the gold without math delimiters
    is_math(text)         whether `text` reads as one formula (no prose): where a gold may be read as LaTeX
"""

from __future__ import annotations

import re

from r1kit.rewards.text import last_answer_block

EQUALITY = frozenset("=≈")  # `\approx` is read as `=`: every side must hold the same value
ORDER = frozenset("≠<>≤≥")
MAX_BOXES = 64  # boxes read from one answer (math-verify reads all of them)
MAX_BOXED_CHARS = 40_000  # characters of box content read in all: nested boxes would read the same text again
MAX_UNIT_CHARS = 300  # a unit is read from the last characters of a value
AFTER_BOX = 40  # characters after a box where a unit may stand (`\boxed{5}\text{ cm}`)
ANCHORED_REGION = 2_000  # characters at the end of an answer searched for "answer" anchors

_OPERATORS = {"=": "=", "==": "=", ":=": "=", "\\approx": "≈", "≈": "≈", "\\neq": "≠", "\\ne": "≠", "≠": "≠",
              "!=": "≠", "\\not=": "≠", "<": "<", "\\lt": "<", ">": ">", "\\gt": ">", "\\le": "≤", "\\leq": "≤",
              "\\leqslant": "≤", "≤": "≤", "<=": "≤", "\\ge": "≥", "\\geq": "≥", "\\geqslant": "≥", "≥": "≥",
              ">=": "≥"}
# One token per match: a command, an escaped character, a two-character operator, a bracket, a separator, or a run of
# anything else; every branch is bounded or stops at the next special character, so a scan is linear.
_RELATION_TOKEN = re.compile(
    r"\\not\s*=|\\left\s*<|\\right\s*>|\\[A-Za-z]+|\\.|<=|>=|!=|==|:=|[{}()\[\],;=<>≤≥≠≈]|[^\\{}()\[\],;=<>≤≥≠≈!:]+|.",
    re.DOTALL)
_SEPARATOR_WORDS = re.compile(r"\\text\s*\{\s*(?:and|or)\s*\}|(?<![A-Za-z\\])(?:and|or)(?![A-Za-z])|\\q?quad(?![A-Za-z])")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_OPENING = frozenset("{([") | {"\\{", "\\langle"}
_CLOSING = frozenset("})]") | {"\\}", "\\rangle"}
_LEFT, _RIGHT = re.compile(r"\\left(?:\s*<)?"), re.compile(r"\\right(?:\s*>)?")


def relations(text: str) -> list[tuple[list[str], list[str]]]:
    """Each item of `text` (split at commas, semicolons, `\\quad`, `and`, `or` outside brackets) as its sides and
    the canonical operators between them; an item without a relation has one side and no operator."""
    text = _THOUSANDS.sub("", _SEPARATOR_WORDS.sub(",", str(text)))
    items: list[tuple[list[str], list[str]]] = []
    sides, ops, current, depth = [], [], [], 0
    for token in _RELATION_TOKEN.findall(text):
        if token in _OPENING or _LEFT.fullmatch(token):
            depth += 1
        elif token in _CLOSING or _RIGHT.fullmatch(token):
            depth = max(0, depth - 1)
        elif depth == 0 and token in (",", ";"):
            items.append((sides + ["".join(current).strip()], ops))
            sides, ops, current = [], [], []
            continue
        elif depth == 0 and re.sub(r"\s+", "", token) in _OPERATORS:
            sides.append("".join(current).strip())
            ops.append(_OPERATORS[re.sub(r"\s+", "", token)])
            current = []
            continue
        current.append(token)
    items.append((sides + ["".join(current).strip()], ops))
    return [(s, o) for s, o in items if o or s[0]]


# --------------------------------------------------------------------------------------------------------------------
# Units
# --------------------------------------------------------------------------------------------------------------------
def _aliases(canonical: str, *names: str) -> dict[str, str]:
    return {name: canonical for name in (canonical, *names)}


# Plain words read as units after a number (`5 cm`, `12 dollars`); inside `\text{}` any word is a unit. Short symbols
# keep their case (`m` and `M`, `mm` and `Mm` differ); `in` is left out (`5 in total`).
UNIT_WORDS = {
    **_aliases("mm", "millimeter", "millimeters", "millimetre", "millimetres"),
    **_aliases("cm", "centimeter", "centimeters", "centimetre", "centimetres"),
    **_aliases("m", "meter", "meters", "metre", "metres"),
    **_aliases("km", "kilometer", "kilometers", "kilometre", "kilometres"),
    **_aliases("in", "inch", "inches"), **_aliases("ft", "foot", "feet"), **_aliases("yd", "yard", "yards"),
    **_aliases("mi", "mile", "miles"),
    **_aliases("mg", "milligram", "milligrams"), **_aliases("g", "gram", "grams", "gm"),
    **_aliases("kg", "kilogram", "kilograms", "kgs"), **_aliases("lb", "lbs", "pound", "pounds"),
    **_aliases("oz", "ounce", "ounces"), **_aliases("t", "ton", "tons", "tonne", "tonnes"),
    **_aliases("s", "sec", "secs", "second", "seconds"), **_aliases("min", "mins", "minute", "minutes"),
    **_aliases("h", "hr", "hrs", "hour", "hours"), **_aliases("day", "days"), **_aliases("week", "weeks"),
    **_aliases("month", "months"), **_aliases("year", "years", "yr", "yrs"),
    **_aliases("mL", "ml", "milliliter", "milliliters", "millilitre", "millilitres"),
    **_aliases("L", "liter", "liters", "litre", "litres"), **_aliases("gal", "gallon", "gallons"),
    **_aliases("km/h", "kmh", "kph", "kmph"), **_aliases("mph"),
    **_aliases("$", "dollar", "dollars", "usd", "USD"), **_aliases("¢", "cent", "cents"),
    **_aliases("€", "euro", "euros"), **_aliases("£"), **_aliases("¥", "yen", "yuan"),
    **_aliases("°", "degree", "degrees", "deg"), **_aliases("rad", "radian", "radians"),
    **_aliases("%", "percent", "percentage", "pct"), **_aliases("acre", "acres"), **_aliases("hectare", "hectares"),
}
_NOT_UNITS = frozenset({"in", "t", "or", "and", "pi", "e", "i", "inf", "infty", "sqrt", "sin", "cos", "tan", "log",
                        "ln", "exp", "mod", "is", "at", "of", "the"})
_GENERIC = frozenset({"unit", "units", "squareunit", "squareunits", "squnit", "squnits", "cubicunit", "cubicunits"})
_TEXT_COMMANDS = r"text|mathrm|textrm|textnormal|mbox|operatorname|textit|mathit|mathsf|textsf"
_UNIT_TOKEN = re.compile(
    rf"(?P<text>\\(?:{_TEXT_COMMANDS})\s*\{{(?P<inner>[^{{}}]{{0,60}})\}})"
    r"|(?P<deg>\^\s*\{?\s*\\circ\s*\}?|°|\\degree(?![A-Za-z])|\\circ(?![A-Za-z]))"
    r"|(?P<pct>\\%|%)|(?P<cur>\\\$|[€£¥])"
    r"|(?P<exp>\^\s*(?:\{\s*-?\s*\d{1,2}\s*\}|-?\d))"
    r"|(?P<cmd>\\[A-Za-z]+)|(?P<word>[A-Za-z]+)|(?P<num>\d+(?:\.\d+)?)|(?P<space>\s+)|(?P<other>.)",
    re.DOTALL)
_SPACING = re.compile(r"\\[,;:! ]|~|\\q?quad(?![A-Za-z])|\\(?:left|right)(?![A-Za-z])|(?<!\\)\$")
_UNIT_LIKE = re.compile(r"\s*[A-Za-z°][A-Za-z°./^\-\d\s]{0,40}")  # `\text{ cm}`, `\text{m/s}`, not `\text{(A)}`
_VALUE_END = frozenset(")}]")


def _canonical_word(word: str) -> str:
    if word in UNIT_WORDS:
        return UNIT_WORDS[word]
    lower = word.lower()
    if len(word) > 2 and lower in UNIT_WORDS:
        return UNIT_WORDS[lower]
    if len(lower) > 3 and lower.endswith("s") and not lower.endswith("ss"):
        lower = lower[:-1]  # `apples` is `apple`
    return lower if len(word) > 2 else word


def _canonical_text(inner: str) -> str:
    """`\\text{ km/hr}` -> `km/h`, `\\text{ square units}` -> `squareunits` (generic)."""
    parts = re.findall(r"[A-Za-z°]+|\^\s*\{?\s*-?\d+\s*\}?|/|\d+", inner.replace("²", "^2").replace("³", "^3"))
    out = []
    for part in parts:
        if part[0].isalpha() or part == "°":
            out.append(("·" if out and out[-1][-1].isalnum() else "") + _canonical_word(part))
        else:
            out.append(re.sub(r"[\s{}]", "", part))
    return "".join(out)


def _unit_atom(tokens: list, at: int) -> tuple[str, int] | None:
    """The unit atom ending just before `tokens[at]` (with its exponent: `\\text{cm}^2`), and where it starts."""
    kind, raw, inner = tokens[at - 1]
    exponent = ""
    if kind == "exp" and at > 1 and tokens[at - 2][0] in ("text", "word"):
        exponent = "^" + re.sub(r"[\s{}^]", "", raw)
        at -= 1
        kind, raw, inner = tokens[at - 1]
    if kind == "text" and _UNIT_LIKE.fullmatch(inner) and not _NOT_UNITS & set(inner.split()):
        return _canonical_text(inner) + exponent, at - 1
    if kind == "word" and raw not in _NOT_UNITS and (raw in UNIT_WORDS or raw.lower() in UNIT_WORDS):
        return _canonical_word(raw) + exponent, at - 1
    if kind in ("deg", "pct") and not exponent:
        return ("°" if kind == "deg" else "%"), at - 1
    return None


def _read_unit(text: str) -> tuple[str, str | None]:
    """(the value's text, its canonical unit or None): units are peeled from the end (`5\\text{ m}/\\text{s}^{2}`),
    a currency sign from the start (`\\$5`). A unit needs a value before it (`\\text{cm}` alone is a text answer), and
    a plain word needs a number or a bracket before it (`x m` is a product)."""
    text = _SPACING.sub(" ", str(text)[-MAX_UNIT_CHARS:]).replace("²", "^2").replace("³", "^3").strip().rstrip(".,")
    found = [m for m in _UNIT_TOKEN.finditer(text) if m.lastgroup != "space"]
    tokens = [(m.lastgroup, m[0], m["inner"] or "") for m in found]
    prefix, start = None, 0
    if len(tokens) > 1 and tokens[0][0] == "cur":
        prefix = "$" if tokens[0][1] == "\\$" else tokens[0][1]
        tokens, found, start = tokens[1:], found[1:], found[1].start()
    parts: list[str] = []
    at = len(tokens)
    while at > 0 and (atom := _unit_atom(tokens, at)) is not None:
        parts.insert(0, atom[0])
        at = atom[1]
        joined = at > 1 and tokens[at - 1][1] in ("/", "\\cdot") and tokens[at - 2][0] in ("text", "word", "exp")
        if not joined or _unit_atom(tokens, at - 1) is None:
            break
        parts.insert(0, "/" if tokens[at - 1][1] == "/" else "·")
        at -= 1
    first = tokens[at][0] if parts else None
    value = tokens[:at]
    if parts and (not value or (first == "word" and value[-1][0] not in ("num", "cmd", "text")
                                and value[-1][1] not in _VALUE_END)):
        at, parts = len(tokens), []
    unit = "".join(parts) or None
    if prefix is not None:
        unit = prefix if unit in (None, prefix) else prefix + unit
    end = found[at].start() if at < len(found) else len(text)
    return text[start:end].strip(), (None if unit is None or unit.replace("·", "") in _GENERIC else unit)


def units(text: str) -> set[str]:
    """The units of the values `text` states: every side of every item (`5\\text{ cm} = 50\\text{ mm}` states two)."""
    return {unit for sides, _ in relations(text) for side in sides if (unit := _read_unit(side)[1]) is not None}


def value_text(text: str) -> str:
    """`text` without its unit (`42\\text{ cm}` -> `42`), to read a side's value."""
    return _read_unit(text)[0]


def unit_after(rest: str) -> str | None:
    """The unit written right after a box (`\\boxed{5}\\text{ cm}`, `\\boxed{5} cm`): the text up to the line's end,
    a math delimiter or a full stop, when it is nothing but a unit."""
    rest = re.split(r"\n|\$|\\\]|\\\)|\.(?:\s|$)|,", rest[:AFTER_BOX], maxsplit=1)[0]
    if not rest.strip():
        return None
    value, unit = _read_unit("0" + rest)
    return unit if value.strip() == "0" else None


# --------------------------------------------------------------------------------------------------------------------
# Where the answer stands
# --------------------------------------------------------------------------------------------------------------------
_BOX_TOKEN = re.compile(r"\\boxed\s*\{|\\.|[{}]", re.DOTALL)


def boxed(text: str) -> list[tuple[str, str]]:
    """(content, what follows on its line) for the last `MAX_BOXES` boxes of `text` (fewer where their contents
    pass `MAX_BOXED_CHARS` in all), in order. One pass over the text, nested boxes included."""
    found, stack = [], []
    for match in _BOX_TOKEN.finditer(text):
        token = match[0]
        if token.startswith("\\boxed"):
            stack.append(match.end())
        elif token == "{":
            stack.append(-1)
        elif token == "}" and stack:
            start = stack.pop()
            if start >= 0:
                found.append((start, match.start()))
    kept, budget = [], MAX_BOXED_CHARS
    for a, b in sorted(found, reverse=True)[:MAX_BOXES]:
        budget -= b - a
        if budget < 0:
            break
        kept.append((text[a:b], text[b + 1 : b + 1 + AFTER_BOX]))
    return kept[::-1]


# A math environment or a bare `\\frac{a}{b}`: what math-verify's answer reading takes after an anchor.
_ANCHORED_MATH = re.compile(r"\$\$[^$]{1,500}\$\$|(?<!\\)\$[^$\n]{1,500}\$|\\\(.{1,500}?\\\)|\\\[.{1,500}?\\\]"
                            r"|\s\[[^\n\[\]]{1,500}\]\s|-?\\frac\{-?\d{1,30}(?:[.,]\d{1,30})?\}\{-?\d{1,30}(?:[.,]\d{1,30})?\}",
                            re.DOTALL)
_ANCHOR = re.compile(r"answer", re.IGNORECASE)
_LEAD = re.compile(r"[\s:>*]{0,20}(?:is\b)?")
ANCHOR_GAP = 110  # characters math-verify allows between "answer" and what it reads (50; "final answer ... is": 100)


def anchored(text: str) -> list[str]:
    """What math-verify may read after the word "answer" in an answer without a box (`answer: $x$`, a bare
    `\\frac{a}{b}`, the <answer> tag's own name as the anchor): for each of the last 8 anchors in the last
    `ANCHORED_REGION` characters, the text from the anchor to the end of the first math environment starting within
    `ANCHOR_GAP` characters of it (`answer: 7 = \\frac{1}{2}` keeps its `7 =`)."""
    region = text[-ANCHORED_REGION:]
    found = []
    for anchor in list(_ANCHOR.finditer(region))[-8:]:
        after = region[anchor.end() : anchor.end() + ANCHOR_GAP + 520]
        math = _ANCHORED_MATH.search(after)
        if math is not None and math.start() <= ANCHOR_GAP:
            found.append(after[_LEAD.match(after).end() : math.end()])
    return found


DELIMITERS = re.compile(r"(?<!\\)\$|\\[()\[\]]")


def gold_texts(gold: str, limit: int = 300) -> list[str]:
    """The answers a gold states: its boxes' contents where it has boxes, else the gold without math delimiters when
    it is short (a longer gold without a box is a worked solution: no form is read from it)."""
    gold = str(gold)
    boxes = boxed(gold[-20_000:])
    if boxes:
        return [content for content, _ in boxes]
    return [DELIMITERS.sub("", gold)] if len(gold) <= limit else []


def is_math(text: str) -> bool:
    """Whether `text` is one formula rather than prose: no word of three letters outside a command or `\\text{}`."""
    bare = re.sub(rf"\\(?:{_TEXT_COMMANDS})\s*\{{[^{{}}]{{0,200}}\}}|\\[A-Za-z]+", " ", str(text)[:2_000])
    return len(text) <= 2_000 and not re.search(r"[A-Za-z]{3,}", bare)


# --------------------------------------------------------------------------------------------------------------------
# Golds the plain reading misreads, and golds that are words
# --------------------------------------------------------------------------------------------------------------------
def squeezed(text: str) -> str:
    return re.sub(r"\s+", "", text)


def reads_whole(parsed: list, text: str) -> bool:
    """Whether the plain reading took the whole gold: it took the first number only of `2a+b` or `3k+1`, the last of
    `2, 3` (so that `\\boxed{3}` was paid for `3k+1` and `\\boxed{2, 3}` was wrong for `2, 3`)."""
    return squeezed(str(parsed[-1])) == squeezed(text)


MATH_MARKS = re.compile(r"[\d+\-*/^=(),\[\]{}\\|<>&]")
LETTERS = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")
FUNCTION_NAMES = frozenset({"sqrt", "sin", "cos", "tan", "log", "ln", "exp", "pi"})
CONNECTIVES = re.compile(r"\b(?:and|or)\b")
ENVIRONMENT = re.compile(r"\\(?:begin|end)\{[A-Za-z*]+\}")  # `\begin{pmatrix}`: no word
# What the LaTeX reading would misread where the plain one reads right: a number in scientific notation (`1e-5`, not
# e - 5), numbers side by side (`3 4 5`, not their product), a ratio or a time (`1:2`, `12:30`), a version (`1.5.2`)
NOT_A_FORMULA = re.compile(r"\d[eE][-+]?\d|\d\s+\d|:|\d\.\d+\.\d")


def plain_formula(gold: str) -> bool:
    """Whether a gold the plain reading took in part is a formula to read whole: no word or unit in it (`5 cm`,
    `12 dollars`, `5 to 7`, `6xyz`; function names and `and`/`or` between answers are no words), none of
    `NOT_A_FORMULA`."""
    text = CONNECTIVES.sub(",", ENVIRONMENT.sub("", gold))
    return not NOT_A_FORMULA.search(text) and all(m[0] in FUNCTION_NAMES for m in LETTERS.finditer(text))


# A unit word after a number at the end of a box (`\boxed{12 dollars}`): read as the unit it is, `\text{ dollars}`
# (sympy would read a product of letters), when it is a known unit or the gold's own word (`12 apples`)
BOXED_UNIT = re.compile(r"(?<=\d)(\s*)([A-Za-z]{2,}(?:/[A-Za-z]+)?)(?=\s*\})")
GOLD_UNIT = re.compile(r"\d\s*([A-Za-z]{2,}(?:/[A-Za-z]+)?)\s*$")  # the word a gold ends in after its number
MAX_UNIT_GOLD = 200  # characters at a gold's end where its unit word stands


def units_as_text(answer: str, gold: str) -> str:
    found = GOLD_UNIT.search(gold[-MAX_UNIT_GOLD:])
    gold_words = {found[1].lower()} if found else set()

    def as_text(m: re.Match) -> str:
        word = m[2]
        known = word in UNIT_WORDS or word.split("/")[0] in UNIT_WORDS or word.lower() in gold_words
        return rf"\text{{ {word}}}" if known else m[0]

    return BOXED_UNIT.sub(as_text, answer)


MAX_COMPLEX_CHARS = 64
COMPLEX = re.compile(r"[-+]?[\d.]*([-+][\d.]*)?\\?i|[-+]?[\d.]+[-+][\d.]*i")


def is_complex(gold: str) -> bool:
    """A gold that states a complex number (`3+4i`, `-2i`, `1-i`); spaces dropped first (the pattern has none to
    backtrack over)."""
    text = squeezed(gold)
    return len(text) <= MAX_COMPLEX_CHARS and COMPLEX.fullmatch(text) is not None


# A gold that is a word or a choice, not mathematics: sympy would read `yes` as the product y*e*s, and pay `sey`
CHOICE = re.compile(r"^\(?([A-J])\)?\.?$")  # (upper case: a lower-case letter is more often a variable, `e` a constant)
ANSWER_CHOICE = re.compile(r"^[(\[{]?([A-Ja-j])[)\]}]?\.?$")  # an answer's letter, either case (`(b)`, `[B]`)
WORDS = {"yes", "no", "true", "false"}


def word_gold(gold: str, choices: re.Pattern = CHOICE) -> str | None:
    """A multiple-choice letter (`A`, `(B)`, `C.`) or yes / no / true / false, normalised (upper-case letter,
    lower-case word); None for any other gold."""
    text = gold.strip()
    choice = choices.match(text)
    if choice:
        return choice[1].upper()
    return text.lower().rstrip(".") if text.lower().rstrip(".") in WORDS else None


def word_answer(answer: str) -> str | None:
    """The answer's final word or letter: its last box, else its last <answer> block, normalised as `word_gold`
    normalises a gold (`\\text{(B)}`, `**Yes**` and `B.` included); None when neither holds one alone."""
    boxes = boxed(answer)
    final = boxes[-1][0] if boxes else last_answer_block(answer)
    if final is None:
        return None
    text = TEXT_WRAPPER.sub(r"\1", final[-MAX_WORD_CHARS:])
    return word_gold(FORMATTING.sub("", text.replace("*", "").replace("$", "")), ANSWER_CHOICE)


MAX_WORD_CHARS = 200
TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mathit|mbox)\s*\{([^{}]*)\}")
FORMATTING = re.compile(r"\\[,;:! ()\[\]]|~|\s")  # spacing, `\(`, `\[`: the word stands alone without them


SCIENTIFIC = re.compile(r"\s*([-+]?\d+(?:\.\d+)?[eE][-+]?\d{1,2})\s*")
BOXED_SCIENTIFIC = re.compile(r"(\\boxed\{)\s*([-+]?\d+(?:\.\d+)?[eE][-+]?\d{1,2})\s*(\})")


def boxed_decimals(answer: str) -> str:
    """A box holding a number in scientific notation written out (`\\boxed{1e-5}`), as its gold is (`plain_decimal`)."""
    from decimal import Decimal

    return BOXED_SCIENTIFIC.sub(lambda m: m[1] + format(Decimal(m[2]), "f") + m[3], answer)


def plain_decimal(gold: str) -> str:
    """A gold in scientific notation written out (`1e-5` -> `0.00001`): math-verify reads `1e-5` as 1 plainly and as
    e - 5 in LaTeX, so that `\\boxed{1}` was paid for it."""
    from decimal import Decimal

    found = SCIENTIFIC.fullmatch(gold)
    return format(Decimal(found[1]), "f") if found else gold

