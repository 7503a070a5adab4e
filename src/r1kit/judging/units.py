"""The unit an answer or a gold is written with, canonical (`5\\text{ cm}`, `5 cm`, `5 centimeters` are all `cm`), for
the independent judge's rule that a unit other than the gold's is wrong (`r1kit.judging.mathjudge`)."""

from __future__ import annotations

import re


def _units() -> dict[str, str]:
    names = {"inch": "in", "foot": "ft", "feet": "ft", "yard": "yd", "mile": "mi", "hour": "h", "hr": "h",
             "minute": "min", "sec": "s", "day": "day", "week": "week", "year": "year", "yr": "year", "pound": "lb",
             "ounce": "oz", "dollar": "$", "usd": "$", "cent": "¢", "euro": "€", "degree": "°", "deg": "°",
             "percent": "%", "percentage": "%", "pct": "%", "kmh": "km/h", "kph": "km/h", "radian": "rad",
             "gallon": "gal"}
    for prefix, short in (("", ""), ("milli", "m"), ("centi", "c"), ("kilo", "k")):
        for base, symbol in (("meter", "m"), ("metre", "m"), ("gram", "g"), ("liter", "l"), ("litre", "l"),
                             ("second", "s")):
            names[prefix + base] = short + symbol
    return names


UNIT_NAMES = _units()
# Words after a number that change its value: no unit (the judge's trailing-word rule would drop them)
VALUE_WORDS = frozenset({"hundred", "thousand", "million", "billion", "trillion", "dozen", "score", "half", "quarter",
                         "third", "squared", "cubed", "factorial", "inverse", "reciprocal", "negative", "times",
                         "sqrt", "root", "sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "power"})
_GENERIC_UNITS = ("unit", "squareunit", "squnit", "cubicunit")
_UNIT_AT_END = re.compile(
    r"(?:\\(?:text|mathrm|textrm|mbox)\s*\{\s*(?P<text>[A-Za-z][A-Za-z ./]{0,30})\}"
    r"|(?<![A-Za-z\\])(?P<word>[A-Za-z]{2,12})\.?|(?P<degree>\^\s*\{?\s*\\circ\s*\}?|°|\\degree)|(?P<percent>\\?%))"
    r"\s*(?P<power>\^\s*\{?\s*\d\s*\}?)?\s*$")


def _unit_name(name: str) -> str | None:
    name = re.sub(r"\s+", "", name.lower())
    for word in (name, name[:-1] if name.endswith("s") else name, name[:-2] if name.endswith("es") else name):
        if word in UNIT_NAMES:
            return UNIT_NAMES[word]
    single = name[:-1] if len(name) > 3 and name.endswith("s") else name
    return None if single in _GENERIC_UNITS or single in ("or", "and", "is") else single


def unit(text: str) -> str | None:
    """The unit a value is written with (`5\\text{ cm}`, `5 cm`, `30^\\circ`, `5\\%`, `\\$5`), canonical and lowercase;
    None without one, or for a generic `\\text{ units}`. A trailing word needs a number or a bracket before it."""
    text = str(text)[-200:].strip().rstrip(".").strip()
    found = _UNIT_AT_END.search(text)
    before = text[: found.start()].strip() if found else ""
    if found and (not before or (found["word"] and before[-1] not in "0123456789})")):
        found = None
    if found is None:
        return "$" if re.match(r"-?\s*\\\$", text) else None
    if found["degree"] or found["percent"]:
        return "°" if found["degree"] else "%"
    name = _unit_name(found["text"] or found["word"])
    power = re.sub(r"[^\d]", "", found["power"] or "")
    return None if name is None else name + (f"^{power}" if power else "")
