"""``MathEquivalence``: the answer equals the label as mathematics, through Hugging Face's
``math-verify`` (an optional extra: ``pip install 'osmo-run[math]'``).

math-verify extracts the answer (the last ``\\boxed{}``, LaTeX or a plain expression) and
compares it with the label symbolically and numerically: ``\\frac{1}{2}``, ``0.5`` and
``1/2`` are equal, so are ``\\{1,2\\}`` and ``\\{2,1\\}``, ``(x+1)^2`` and ``x^2+2x+1``.

math-verify bounds its own work with ``signal.alarm``, which works only on the main
thread and not in C code that holds the GIL (``\\boxed{9^{9^{9}}}`` computes for hours):
here it runs in a grader worker process (:mod:`osmo_run.graders.workers`) with that
mechanism off, killed at the row's grader deadline (``timeouts.grader_sec``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from osmo_run.graders.base import (
    SettingsGrader,
    final_answer,
    missing_extra,
    quoted,
    wrong_label,
)
from osmo_run.graders.settings import SettingsError
from osmo_run.graders.workers import GRADER_WORKERS
from osmo_run.sdk.context import GraderContext

_UNICODE_MINUS = str.maketrans({"\u2212": "-", "\ufe63": "-", "\uff0d": "-"})


class _NoTimeoutWarning(logging.Filter):
    """Drops math-verify's warning that its signal timeout is off: the deadline is ours."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Timeout is disabled" not in record.getMessage()


def _math_verify() -> Any:
    """The ``math_verify`` module; ``ImportError`` naming the pip command when missing."""
    try:
        import math_verify
    except ImportError as exc:
        raise missing_extra("MathEquivalence", "math-verify", "math", exc) from None
    for name in ("math_verify.parser", "math_verify.grader"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _NoTimeoutWarning) for f in logger.filters):
            logger.addFilter(_NoTimeoutWarning())
    return math_verify


@dataclass(frozen=True, kw_only=True)
class MathEquivalenceSettings:
    """``MathEquivalence`` settings (math-verify's ``verify`` options)."""

    float_rounding: int = 6
    """Decimal places numbers are rounded to before they are compared."""
    numeric_precision: int = 15
    """Significant digits of numeric evaluation."""
    strict: bool = True
    """False lets an equation's right side match a number (``x = 3`` equals ``3``) and
    treats variables as interchangeable."""

    def check(self) -> None:
        for name in ("float_rounding", "numeric_precision"):
            if getattr(self, name) < 1:
                raise SettingsError(name, f"must be at least 1, got {getattr(self, name)}")


def _as_gold(label: str) -> str:
    """The label as math-verify reads a reference: inside ``$...$`` unless it is already
    delimited, so plain LaTeX like ``\\frac{\\sqrt{2}}{2}`` is extracted whole."""
    text = label.strip()
    if "$" in text or "\\boxed" in text or "\\(" in text or "\\[" in text:
        return text
    return f"${text}$"


def _verify(
    gold_text: str, answer: str, settings: MathEquivalenceSettings
) -> tuple[bool, list[str], list[str]]:
    """``(equal, [label as extracted], [answer as extracted])``; a list is empty when
    nothing was extracted. Unbounded in its input: runs in a grader worker process."""
    math_verify = _math_verify()
    gold = math_verify.parse(gold_text, parsing_timeout=None)
    target = math_verify.parse(answer.translate(_UNICODE_MINUS), parsing_timeout=None)
    if not gold:
        raise ValueError(
            f"MathEquivalence: math-verify cannot read the label {quoted(gold_text, 80)}"
        )
    equal = bool(target) and math_verify.verify(
        gold,
        target,
        float_rounding=settings.float_rounding,
        numeric_precision=settings.numeric_precision,
        strict=settings.strict,
        timeout_seconds=None,
    )
    return equal, _shown(gold), _shown(target)


def _warm() -> None:
    """One small comparison, so that math-verify and everything it loads on first use are
    loaded where grader workers are forked from."""
    _verify("$1$", "1", MathEquivalenceSettings())


def _shown(parsed: list[Any]) -> list[str]:
    """What math-verify extracted (its results end with the text it read), for people."""
    if not parsed:
        return []
    return [parsed[-1] if isinstance(parsed[-1], str) else str(parsed[0])]


class MathEquivalence(SettingsGrader[MathEquivalenceSettings]):
    """1.0 when the final answer is mathematically equal to the label (a LaTeX or plain
    string, or a number); a label math-verify cannot read is a ``validation_error``."""

    settings_type = MathEquivalenceSettings

    @classmethod
    def validate_settings(cls, settings: dict[str, Any]) -> None:
        super().validate_settings(settings)
        _math_verify()  # missing extra: one error before any row runs
        GRADER_WORKERS.prestart(_verify, warm=_warm)

    async def grade(self, ctx: GraderContext) -> float:
        label = ctx.label
        if isinstance(label, int | float) and not isinstance(label, bool):
            label = str(label)
        if not isinstance(label, str):
            raise wrong_label("MathEquivalence", "a string (LaTeX or plain) or a number", label)
        answer = final_answer(ctx.sample)
        if answer is None:
            ctx.explain("MathEquivalence: the sample has no assistant message with text; reward 0")
            return 0.0
        gold_text = _as_gold(label.translate(_UNICODE_MINUS))
        equal, gold, target = await GRADER_WORKERS.run(
            _verify, gold_text, answer, self.settings, warm=_warm
        )
        if not target:
            ctx.explain(f"math-verify found no answer in {quoted(answer)}; label {gold[0]}")
            return 0.0
        verdict = "equals" if equal else "does not equal"
        ctx.explain(
            f"answer {target[0]} {verdict} label {gold[0]} (as math-verify extracted them; "
            f"the answer from {quoted(answer, 120)})"
        )
        return 1.0 if equal else 0.0
