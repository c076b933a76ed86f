"""Numbers as people and models write them, and the ``NumericMatch`` grader.

:func:`find_numbers` reads every number in a text: signs (``-``, ``+``, the Unicode minus
``−`` and its full-width form), thousands separators (``1,234,567``; thin and no-break
spaces, ``_``, ``'``; LaTeX's ``1{,}234``, ``1\\,234`` and MATH's ``10,\\!000``), decimals
(``.5``, ``3.``), exponents (``1e3``, ``2.5E-4``, ``1.5 × 10^3``, ``10^{-2}`` after a
mantissa), powers written alone (``10^3``, ``2^{10}``), percentages (``50%``, ``50\\%``,
``50 percent``), simple fractions (``3/4``, ``\\frac{3}{4}``), mixed numbers
(``2\\frac{1}{3}`` is 7/3), degrees (``90^\\circ``), digits of other scripts (``٣``,
full-width ``３``) and negative zero (which equals zero). A minus sign counts only where it
cannot be a hyphen (``10-20`` is 10 and 20). With ``decimal_comma`` the roles of ``,`` and
``.`` swap (``1.234,5``).

Values are exact fractions (:class:`fractions.Fraction`), never binary floats:
``9007199254740993`` is not ``9007199254740992`` and ``0.1`` is one tenth. A number of more
than :data:`MAX_DIGITS` digits, or a power beyond ``10^``:data:`MAX_EXPONENT`, is not read,
so no work grows with what an answer writes. Stdlib only.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from osmo_run.graders.base import SettingsGrader, final_answer, quoted, wrong_label
from osmo_run.graders.settings import SettingsError
from osmo_run.sdk.context import GraderContext

MAX_DIGITS = 1000
"""The most digits a number (or a fraction's part) may have to be read."""
MAX_EXPONENT = 1000
"""The largest power of ten, either sign, that a number may be or carry to be read."""
FLOAT_LABEL_REL_TOL = 1e-9
"""The relative tolerance the default settings give a label that is a binary float
(``0.1 + 0.2`` written by a script as ``0.30000000000000004`` matches ``0.3``)."""

_TRANSLATE = str.maketrans(
    {
        "\u2212": "-",  # minus sign
        "\ufe63": "-",  # small hyphen-minus
        "\uff0d": "-",  # full-width hyphen-minus
        "\uff0b": "+",  # full-width plus
        "\uff0e": ".",  # full-width full stop
        "\uff0c": ",",  # full-width comma
        "\u066b": ".",  # Arabic decimal separator
        "\u066c": ",",  # Arabic thousands separator
        "\uff05": "%",  # full-width percent
        "\u066a": "%",  # Arabic percent
    }
)
_LATEX = (
    (re.compile(r"\{,\}"), ","),  # 1{,}234 (3{,}5 with decimal_comma)
    # MATH's 10,\!000: a thousands separator whichever character is the decimal one
    (re.compile(r",\\!|\\[,;!]|\\thinspace\b"), "\u2009"),  # and 1\,234
    (re.compile(r"\\\$"), "$"),  # \$5
    (re.compile(r"\^\s*(?:\\circ\b|\{\s*\\circ\s*\})"), ""),  # 90^\circ: degrees
    (re.compile(r"\\%"), "%"),
)
_FRAC = r"\\[dt]?frac\s*(?:\{\s*(?P<num>NUM)\s*\}\s*\{\s*(?P<den>\d+)\s*\}|(?P<n1>\d)(?P<d1>\d))"
_MIXED = re.compile(r"(?<![\w.])(?P<whole>\d+)\s*" + _FRAC.replace("NUM", r"\d+"))
"""A mixed number, ``2\\frac{1}{3}``: the whole plus the fraction (as MATH writes them)."""
_FRACTION = re.compile(_FRAC.replace("NUM", r"[-+]?\d[\d.,]*"))
_POWER = re.compile(
    r"(?<![\w.])(?P<base>\d+)\s*\^\s*(?:\{\s*(?P<exp>[-+]?\d+)\s*\}|(?P<exp1>[-+]?\d+))"
)
"""A power written alone, ``10^3`` or ``2^{10}`` (``1.5 × 10^3`` is read as an exponent)."""
_TIMES = ("×", "*", "x", "\\times", "\\cdot")
_SPACES = "\u00a0\u2009\u202f"  # no-break, thin and narrow no-break spaces


def _number_pattern(decimal_comma: bool) -> re.Pattern[str]:
    point, comma = (",", r"\.") if decimal_comma else (r"\.", ",")
    separator = f"[{comma}_'{_SPACES}]"
    integer = rf"\d{{1,3}}(?P<sep>{separator})\d{{3}}(?:(?P=sep)\d{{3}})*(?!\d)|\d+"
    mantissa = rf"(?:(?P<int>{integer})(?:{point}(?P<frac>\d*))?|{point}(?P<frac2>\d+))"
    exponent = (
        r"(?:[eE](?P<exp>[-+]?\d+)"
        r"|\s*(?:[x×*]|\\times|\\cdot)\s*10\s*(?:\^|\*\*)\s*\{?\s*(?P<exp2>[-+]?\d+)\s*\}?)"
    )
    percent = r"(?P<pct>\s?(?:%|percent\b))"
    denominator = r"(?:\s*/\s*(?P<den>\d+)(?![\d.,]\d))"
    return re.compile(
        rf"(?<![\w.])(?P<sign>[-+])?{mantissa}(?:{denominator}|{exponent})?{percent}?",
    )


_PATTERNS = {False: _number_pattern(False), True: _number_pattern(True)}


def _shown_value(value: Fraction) -> str:
    """``value`` for an explanation: an integer in full, anything else as ``%g``."""
    if value.denominator == 1:
        return str(value.numerator)
    try:
        return f"{float(value):g}"
    except OverflowError:
        return str(value)


@dataclass(frozen=True)
class Number:
    """One number found in a text: its exact value, what was written, and whether it was a
    percentage (``value`` is then the number before the ``%``: 50 for ``50%``).
    ``exact`` is false for a label given as a binary float, whose last digits may be noise."""

    value: Fraction
    text: str
    percent: bool = False
    exact: bool = True

    def shown(self, value: Fraction | None = None) -> str:
        """As written, with the value it was read as when that differs (``1e3 = 1000``)."""
        shown = _shown_value(self.value if value is None else value)
        return self.text if self.text == shown else f"{self.text} = {shown}"

    def candidates(self, percent_mode: str) -> list[Fraction]:
        """The values this number may stand for under ``percent_mode``."""
        if not self.percent or percent_mode == "value":
            return [self.value]
        if percent_mode == "fraction":
            return [self.value / 100]
        return [self.value, self.value / 100]


def json_number(value: Fraction) -> int | float | str:
    """``value`` for a row's ``info``: an integer exactly, else the nearest float (a
    fraction's text when no float is that large)."""
    if value.denominator == 1:
        return value.numerator
    try:
        return float(value)
    except OverflowError:
        return str(value)


def _mixed_to_improper(match: re.Match[str]) -> str:
    """``2\\frac{1}{3}`` as ``7/3``."""
    numerator = match.group("num") or match.group("n1")
    denominator = int(match.group("den") or match.group("d1"))
    too_long = len(match.group("whole")) + len(numerator) + len(str(denominator)) > MAX_DIGITS
    if denominator == 0 or too_long:
        return match.group(0)
    return f"{int(match.group('whole')) * denominator + int(numerator)}/{denominator}"


def _fraction_to_slash(match: re.Match[str]) -> str:
    """``\\frac{3}{4}`` and ``\\frac34`` as ``3/4``."""
    if match.group("num") is not None:
        return f"{match.group('num')}/{match.group('den')}"
    return f"{match.group('n1')}/{match.group('d1')}"


def _power_to_number(match: re.Match[str]) -> str:
    """``2^{10}`` as ``1024`` and ``10^{-2}`` as ``1/100``, when not too large to write."""
    before = match.string[max(0, match.start() - 16) : match.start()]  # bounded: no O(n^2)
    if before.rstrip().endswith(_TIMES):
        return match.group(0)  # 1.5 x 10^3: the number pattern reads it as an exponent
    base_text, exponent_text = match.group("base"), match.group("exp") or match.group("exp1")
    if len(base_text) > MAX_DIGITS or len(exponent_text.lstrip("+-")) > 6:
        return match.group(0)
    base, exponent = int(base_text), int(exponent_text)
    if base > 1 and abs(exponent) * math.log10(base) > MAX_EXPONENT:
        return match.group(0)
    if exponent >= 0:
        return str(base**exponent)
    return f"1/{base**-exponent}" if base else match.group(0)


def _prepare(text: str) -> str:
    text = text.translate(_TRANSLATE)
    for pattern, replacement in _LATEX:
        text = pattern.sub(replacement, text)
    text = _MIXED.sub(_mixed_to_improper, text)
    text = _FRACTION.sub(_fraction_to_slash, text)
    return _POWER.sub(_power_to_number, text)


def _to_number(match: re.Match[str]) -> Number | None:
    groups = match.groupdict()
    integer = (groups["int"] or "").replace(groups["sep"] or "\0", "")
    fraction = (groups["frac"] if groups["int"] is not None else groups["frac2"]) or ""
    exponent_text = (groups["exp"] or groups["exp2"] or "0").lstrip("+")
    denominator_text = groups["den"] or "1"
    if len(integer) + len(fraction) > MAX_DIGITS or len(denominator_text) > MAX_DIGITS:
        return None
    denominator = int(denominator_text)
    if denominator == 0:
        return None
    if len(exponent_text.lstrip("-")) > 6 or abs(int(exponent_text)) > MAX_EXPONENT:
        return None
    # int() reads the digits of any script (Arabic-Indic, full-width)
    digits = int(integer or "0") * 10 ** len(fraction) + int(fraction or "0")
    value = Fraction(digits, 10 ** len(fraction) * denominator) * Fraction(10) ** int(exponent_text)
    if groups["sign"] == "-":
        value = -value
    text = match.group(0).strip()
    if text.endswith(".") and not fraction:
        text = text[:-1]  # the full stop ending a sentence: "The answer is 12."
    return Number(value, text, percent=groups["pct"] is not None)


def find_numbers(text: str, decimal_comma: bool = False) -> list[Number]:
    """Every number in ``text``, in order (see the module docstring for the forms read)."""
    pattern = _PATTERNS[decimal_comma]
    numbers = (_to_number(m) for m in pattern.finditer(_prepare(text)))
    return [n for n in numbers if n is not None]


def pick_number(
    text: str, decimal_comma: bool = False, occurrence: Literal["last", "first"] = "last"
) -> Number | None:
    """The last (or first) number of ``text``, as :func:`find_numbers` reads them; only
    that one is converted, so a text of a million numbers costs one regex scan."""
    matches = list(_PATTERNS[decimal_comma].finditer(_prepare(text)))
    for match in reversed(matches) if occurrence == "last" else matches:
        number = _to_number(match)
        if number is not None:
            return number
    return None


_CURRENCY = "$€£¥₹"


def parse_number(text: str, decimal_comma: bool = False) -> Number | None:
    """``text`` read as exactly one number (surrounding whitespace and a currency sign
    allowed); ``None`` when it is anything else."""
    prepared = _prepare(text).strip().lstrip(_CURRENCY).strip()
    if prepared[:1] in "-+" and prepared[1:2] in tuple(_CURRENCY):  # -$5
        prepared = prepared[0] + prepared[2:]
    match = _PATTERNS[decimal_comma].fullmatch(prepared)
    return None if match is None else _to_number(match)


def _boxed_content(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (braces balanced), or ``None``."""
    start = text.rfind("\\boxed")
    if start == -1:
        return None
    opening = text.find("{", start)
    if opening == -1:
        return None
    depth = 0
    for i in range(opening, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[opening + 1 : i]
    return None


@dataclass(frozen=True, kw_only=True)
class NumericMatchSettings:
    """``NumericMatch`` settings."""

    rel_tol: float | None = None
    """Relative tolerance, as in ``math.isclose`` (computed exactly). Default: numbers
    compare exactly, except that a label given as a non-integer binary float (a JSON
    ``0.30000000000000004``) is matched within :data:`FLOAT_LABEL_REL_TOL`."""
    abs_tol: float = 0.0
    """Absolute tolerance: ``|answer - label| <= abs_tol`` also matches."""
    pattern: str | None = None
    """A regular expression whose first group (or whole match) holds the answer's number,
    e.g. ``'ANSWER:\\s*(.+)'``; default: the numbers of the whole answer."""
    occurrence: Literal["last", "first"] = "last"
    """Which number (or pattern match) is the answer."""
    prefer_boxed: bool = True
    """When the answer holds ``\\boxed{...}``, read the number from the last one."""
    percent: Literal["either", "value", "fraction"] = "either"
    """What ``50%`` matches: either 50 or 0.5; value: 50; fraction: 0.5."""
    decimal_comma: bool = False
    """Read ``,`` as the decimal separator and ``.`` as a thousands separator."""

    def check(self) -> None:
        for name in ("rel_tol", "abs_tol"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise SettingsError(name, f"must be at least 0, got {value}")
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise SettingsError("pattern", f"does not compile: {exc}") from None

    def matches(self, got: Fraction, want: Fraction, label_exact: bool) -> bool:
        """Whether ``got`` equals ``want`` within the tolerances, computed exactly."""
        difference = abs(got - want)
        if difference <= Fraction(repr(self.abs_tol)):
            return True
        rel_tol = self.rel_tol
        if rel_tol is None:
            integers = got.denominator == 1 and want.denominator == 1
            rel_tol = 0.0 if label_exact or integers else FLOAT_LABEL_REL_TOL
        return difference <= Fraction(repr(rel_tol)) * max(abs(got), abs(want))

    def tolerance(self, labels: list[Number]) -> str:
        """The tolerance in words, for an explanation."""
        if self.rel_tol is not None:
            return f"rel_tol {self.rel_tol:g}, abs_tol {self.abs_tol:g}"
        parts = [f"abs_tol {self.abs_tol:g}"] if self.abs_tol else []
        if not all(label.exact for label in labels):
            parts.append(f"rel_tol {FLOAT_LABEL_REL_TOL:g} for a float label")
        return ", ".join(parts) or "exactly"


class NumericMatch(SettingsGrader[NumericMatchSettings]):
    """1.0 when the answer's number equals the label's (exactly, or within a tolerance).

    The answer's number is the last (``occurrence``) number of the final assistant
    message, of its last ``\\boxed{}``, or of what ``pattern`` captures. The label is a
    number, a string holding exactly one number (``"1,234"``, ``"-0"``, ``"50%"``,
    ``"3/4"``, ``"2\\frac{1}{3}"``) or a list of them (any may match); anything else is a
    ``validation_error``.
    """

    settings_type = NumericMatchSettings

    def _labels(self, label: object) -> list[Number]:
        items = label if isinstance(label, list) and label else [label]
        numbers = []
        for item in items:
            if isinstance(item, int) and not isinstance(item, bool):
                numbers.append(Number(Fraction(item), repr(item)))
            elif isinstance(item, float):
                if not math.isfinite(item):
                    raise wrong_label("NumericMatch", "a finite number", label)
                # the shortest decimal that is this float: 0.1 is one tenth, not 0.1000...0555
                numbers.append(Number(Fraction(repr(item)), repr(item), exact=False))
            elif isinstance(item, str):
                number = parse_number(item, self.settings.decimal_comma)
                if number is None:
                    raise ValueError(f"NumericMatch: the label {quoted(item, 80)} is not a number")
                numbers.append(number)
            else:
                raise wrong_label("NumericMatch", "a number or a string holding one", label)
        return numbers

    def _answer_number(self, answer: str) -> tuple[Number | None, str]:
        """The answer's number and where it was read from (for the explanation)."""
        settings = self.settings
        where = "the answer"
        text = answer
        if settings.pattern is not None:
            matches = list(re.finditer(settings.pattern, answer))
            if not matches:
                return None, f"pattern {quoted(settings.pattern)} (no match)"
            match = matches[-1] if settings.occurrence == "last" else matches[0]
            text = match.group(1) if match.re.groups else match.group(0)
            where = f"pattern {quoted(settings.pattern)}"
        elif settings.prefer_boxed:
            boxed = _boxed_content(answer)
            if boxed is not None:
                text, where = boxed, "\\boxed{}"
        return pick_number(text or "", settings.decimal_comma, settings.occurrence), where

    async def grade(self, ctx: GraderContext) -> float:
        settings = self.settings
        labels = self._labels(ctx.label)
        answer = final_answer(ctx.sample)
        if answer is None:
            ctx.explain("NumericMatch: the sample has no assistant message with text; reward 0")
            return 0.0
        number, where = self._answer_number(answer)
        shown = " or ".join(label.shown() for label in labels)
        if number is None:
            ctx.explain(f"no number in {where} ({quoted(answer)}); label {shown}")
            return 0.0
        tolerance = settings.tolerance(labels)
        for label in labels:
            for got in number.candidates(settings.percent):
                for want in label.candidates(settings.percent):
                    if settings.matches(got, want, label.exact):
                        ctx.explain(
                            f"{settings.occurrence} number of {where}, {number.shown(got)}, "
                            f"matches label {label.shown(want)} ({tolerance})",
                            answer_number=json_number(got),
                        )
                        return 1.0
        ctx.explain(
            f"{settings.occurrence} number of {where}, {number.shown()}, does not match label "
            f"{shown} ({tolerance})",
            answer_number=json_number(number.value),
        )
        return 0.0
