"""Numbers as people and models write them, and the ``NumericMatch`` grader.

:func:`find_numbers` reads every number in a text: signs (``-``, ``+``, the Unicode minus
``−`` and its full-width form), thousands separators (``1,234,567``; thin and no-break
spaces, ``_``, ``'``; LaTeX's ``1{,}234`` and ``1\\,234``), decimals (``.5``, ``3.``),
exponents (``1e3``, ``2.5E-4``, ``1.5 × 10^3``, ``10^{-2}`` after a mantissa), percentages
(``50%``, ``50\\%``, ``50 percent``), simple fractions (``3/4``, ``\\frac{3}{4}``), digits of
other scripts (``٣``, full-width ``３``) and negative zero. A minus sign counts only where
it cannot be a hyphen (``10-20`` is 10 and 20). With ``decimal_comma`` the roles of ``,``
and ``.`` swap (``1.234,5``). Stdlib only.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

from osmo_run.graders.base import SettingsGrader, final_answer, quoted, wrong_label
from osmo_run.graders.settings import SettingsError
from osmo_run.sdk.context import GraderContext

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
    (re.compile(r"\{,\}"), ","),  # 1{,}234
    (re.compile(r"\\[,;!]|\\thinspace\b"), "\u2009"),  # 1\,234
    (re.compile(r"\\[dt]?frac\s*\{\s*([-+]?\d[\d.,]*)\s*\}\s*\{\s*(\d[\d.,]*)\s*\}"), r"\1/\2"),
    (re.compile(r"\\[dt]?frac(\d)(\d)"), r"\1/\2"),  # \frac12
    (re.compile(r"\\%"), "%"),
)
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


@dataclass(frozen=True)
class Number:
    """One number found in a text: its value, what was written, and whether it was a
    percentage (``value`` is then the number before the ``%``: 50 for ``50%``)."""

    value: float
    text: str
    percent: bool = False

    def shown(self, value: float | None = None) -> str:
        """As written, with the value it was read as when that differs (``1e3 = 1000``)."""
        value = self.value if value is None else value
        return self.text if self.text == f"{value:g}" else f"{self.text} = {value:g}"

    def candidates(self, percent_mode: str) -> list[float]:
        """The values this number may stand for under ``percent_mode``."""
        if not self.percent or percent_mode == "value":
            return [self.value]
        if percent_mode == "fraction":
            return [self.value / 100]
        return [self.value, self.value / 100]


def _prepare(text: str) -> str:
    text = text.translate(_TRANSLATE)
    for pattern, replacement in _LATEX:
        text = pattern.sub(replacement, text)
    return text


def _to_number(match: re.Match[str]) -> Number | None:
    groups = match.groupdict()
    integer = (groups["int"] or "").replace(groups["sep"] or "\0", "")
    fraction = groups["frac"] if groups["int"] is not None else groups["frac2"]
    exponent = groups["exp"] or groups["exp2"]
    sign = "-" if groups["sign"] == "-" else ""
    whole = int(integer) if integer else 0  # int() reads the digits of any script
    decimals = "".join(str(int(d)) for d in fraction) if fraction else "0"
    try:
        value = float(f"{sign}{whole}.{decimals}e{int(exponent) if exponent else 0}")
    except (ValueError, OverflowError):
        return None
    if groups["den"] is not None:
        denominator = int(groups["den"])
        if denominator == 0:
            return None
        value = math.copysign(abs(value) / denominator, value)
    if not math.isfinite(value):
        return None
    text = match.group(0).strip()
    if text.endswith(".") and not fraction:
        text = text[:-1]  # the full stop ending a sentence: "The answer is 12."
    return Number(value, text, percent=groups["pct"] is not None)


def find_numbers(text: str, decimal_comma: bool = False) -> list[Number]:
    """Every number in ``text``, in order (see the module docstring for the forms read)."""
    pattern = _PATTERNS[decimal_comma]
    numbers = (_to_number(m) for m in pattern.finditer(_prepare(text)))
    return [n for n in numbers if n is not None]


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

    rel_tol: float = 1e-9
    """Relative tolerance, as in ``math.isclose``."""
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
            if getattr(self, name) < 0:
                raise SettingsError(name, f"must be at least 0, got {getattr(self, name)}")
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise SettingsError("pattern", f"does not compile: {exc}") from None


class NumericMatch(SettingsGrader[NumericMatchSettings]):
    """1.0 when the answer's number equals the label's within the tolerance.

    The answer's number is the last (``occurrence``) number of the final assistant
    message, of its last ``\\boxed{}``, or of what ``pattern`` captures. The label is a
    number, a string holding exactly one number (``"1,234"``, ``"-0"``, ``"50%"``,
    ``"3/4"``) or a list of them (any may match); anything else is a ``validation_error``.
    """

    settings_type = NumericMatchSettings

    def _labels(self, label: object) -> list[Number]:
        items = label if isinstance(label, list) and label else [label]
        numbers = []
        for item in items:
            if isinstance(item, int | float) and not isinstance(item, bool):
                if not math.isfinite(item):
                    raise wrong_label("NumericMatch", "a finite number", label)
                numbers.append(Number(float(item), repr(item)))
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
        numbers = find_numbers(text or "", settings.decimal_comma)
        if not numbers:
            return None, where
        return (numbers[-1] if settings.occurrence == "last" else numbers[0]), where

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
        tolerance = f"rel_tol {settings.rel_tol:g}, abs_tol {settings.abs_tol:g}"
        for label in labels:
            for got in number.candidates(settings.percent):
                for want in label.candidates(settings.percent):
                    if math.isclose(got, want, rel_tol=settings.rel_tol, abs_tol=settings.abs_tol):
                        ctx.explain(
                            f"{settings.occurrence} number of {where}, {number.shown(got)}, "
                            f"matches label {label.shown(want)} ({tolerance})",
                            answer_number=got,
                        )
                        return 1.0
        ctx.explain(
            f"{settings.occurrence} number of {where}, {number.shown()}, does not match label "
            f"{shown} ({tolerance})",
            answer_number=number.value,
        )
        return 0.0
