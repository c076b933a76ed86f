"""Text graders: exact match, includes, regex with a capture group, token F1.

Each compares the final assistant message with the row's label (a string, a number, or a
list of acceptable answers) after the same normalisation, applied to both sides:
Unicode NFKC (full-width letters, ligatures), case, whitespace, punctuation and English
articles, each a setting. Stdlib only. ``RegexMatch`` searches in a grader worker
process, where a user's pattern that backtracks for hours is killed at the deadline.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

from osmo_run.graders.base import SettingsGrader, final_answer, quoted, text_labels
from osmo_run.graders.settings import SettingsError
from osmo_run.graders.workers import GRADER_WORKERS
from osmo_run.sdk.context import GraderContext

_ARTICLES = re.compile(r"\b(?:a|an|the)\b", re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class Normalization:
    """How answer and label are normalised before they are compared."""

    ignore_case: bool = True
    """Compare case-insensitively (Unicode case folding: ``Straße`` equals ``STRASSE``)."""
    whitespace: Literal["collapse", "remove", "keep"] = "collapse"
    """collapse: trim, and any run of whitespace is one space; remove: drop all; keep."""
    ignore_punctuation: bool = False
    """Drop every Unicode punctuation character (``Paris.`` equals ``Paris``)."""
    ignore_articles: bool = False
    """Drop the English articles a, an, the."""
    unicode_nfkc: bool = True
    """Apply Unicode NFKC first (``ﬁ`` is ``fi``, full-width ``ＡＢＣ`` is ``ABC``)."""

    def apply(self, text: str) -> str:
        """``text`` normalised as these settings say."""
        if self.unicode_nfkc:
            text = unicodedata.normalize("NFKC", text)
        if self.ignore_case:
            text = text.casefold()
        if self.ignore_punctuation:
            text = "".join(c for c in text if not unicodedata.category(c).startswith("P"))
        if self.ignore_articles:
            text = _ARTICLES.sub(" ", text)
        if self.whitespace == "collapse":
            text = " ".join(text.split())
        elif self.whitespace == "remove":
            text = "".join(text.split())
        return text


def _no_answer(ctx: GraderContext, grader: str) -> float:
    ctx.explain(f"{grader}: the sample has no assistant message with text; reward 0")
    return 0.0


@dataclass(frozen=True, kw_only=True)
class ExactMatchSettings(Normalization):
    """``ExactMatch`` settings: the normalisation only."""


class ExactMatch(SettingsGrader[ExactMatchSettings]):
    """1.0 when the final answer, normalised, equals the label (or one of the labels)."""

    settings_type = ExactMatchSettings

    async def grade(self, ctx: GraderContext) -> float:
        labels = text_labels("ExactMatch", ctx.label)
        answer = final_answer(ctx.sample)
        if answer is None:
            return _no_answer(ctx, "ExactMatch")
        got = self.settings.apply(answer)
        for label in labels:
            want = self.settings.apply(label)
            if got == want:
                ctx.explain(f"answer {quoted(got)} equals label {quoted(want)} (normalised)")
                return 1.0
        wanted = " or ".join(quoted(self.settings.apply(label)) for label in labels)
        ctx.explain(f"answer {quoted(got)} differs from label {wanted} (normalised)")
        return 0.0


@dataclass(frozen=True, kw_only=True)
class IncludesSettings(Normalization):
    """``Includes`` settings."""

    whole_words: bool = True
    """The label must not sit inside a longer word or number (``4`` is not in ``14``)."""


def _find(needle: str, haystack: str, whole_words: bool) -> int:
    """Where ``needle`` first occurs in ``haystack`` (at word boundaries if asked); -1."""
    start = haystack.find(needle)
    while start != -1 and whole_words:
        end = start + len(needle)
        if not _continues_before(haystack, start, needle) and not _continues_after(
            haystack, end, needle
        ):
            return start
        start = haystack.find(needle, start + 1)
    return start


_SPACELESS_SCRIPTS = (
    "CJK ",
    "HIRAGANA",
    "KATAKANA",
    "HALFWIDTH KATAKANA",
    "HANGUL",
    "THAI",
    "LAO",
    "KHMER",
    "MYANMAR",
)
"""Scripts written without spaces between words (or, in Korean, with particles joined to
them): a neighbour from one of them is never part of the same word, as there is no way
to tell where words end without a dictionary."""


def _spaceless(char: str) -> bool:
    if char < "\u0e00":  # Thai is the first of them; most text stops here, without a lookup
        return False
    return unicodedata.name(char, "").startswith(_SPACELESS_SCRIPTS)


def _word_char(neighbour: str, edge: str) -> bool:
    """Whether ``neighbour`` continues the word that ends (or starts) with ``edge``."""
    if _spaceless(neighbour) or _spaceless(edge):
        return False
    return (neighbour.isalnum() or neighbour == "_") and (edge.isalnum() or edge == "_")


def _continues_before(text: str, start: int, needle: str) -> bool:
    """Whether the text before ``start`` belongs to the word or number ``needle`` starts:
    a letter or digit, or a decimal point or thousands separator after a digit
    (``5`` is not in ``4.5``)."""
    if start == 0:
        return False
    before = text[start - 1]
    if _word_char(before, needle[0]):
        return True
    return before in ".," and needle[0].isdigit() and start >= 2 and text[start - 2].isdigit()


def _continues_after(text: str, end: int, needle: str) -> bool:
    """Whether the text from ``end`` continues the word or number ``needle`` ends: a
    letter or digit, or a decimal point or separator before a digit (``4`` is not in
    ``4,000``; a full stop ending a sentence does not continue it)."""
    if end >= len(text):
        return False
    after = text[end]
    if _word_char(after, needle[-1]):
        return True
    return (
        after in ".," and needle[-1].isdigit() and end + 1 < len(text) and text[end + 1].isdigit()
    )


class Includes(SettingsGrader[IncludesSettings]):
    """1.0 when the final answer, normalised, contains the label (or one of the labels)."""

    settings_type = IncludesSettings

    async def grade(self, ctx: GraderContext) -> float:
        labels = text_labels("Includes", ctx.label)
        answer = final_answer(ctx.sample)
        if answer is None:
            return _no_answer(ctx, "Includes")
        got = self.settings.apply(answer)
        words = " as whole words" if self.settings.whole_words else ""
        for label in labels:
            want = self.settings.apply(label)
            at = _find(want, got, self.settings.whole_words) if want else -1
            if at != -1:
                ctx.explain(f"answer {quoted(got)} contains label {quoted(want)}{words} at {at}")
                return 1.0
        wanted = " or ".join(quoted(self.settings.apply(label)) for label in labels)
        ctx.explain(f"answer {quoted(got)} does not contain label {wanted}{words}")
        return 0.0


@dataclass(frozen=True, kw_only=True)
class RegexMatchSettings(Normalization):
    """``RegexMatch`` settings: ``pattern`` is required."""

    pattern: str
    """A Python regular expression searched in the final answer (``ignore_case`` applies)."""
    group: int | str | None = None
    """The capture group holding the answer (number or name); default 1 when the pattern
    has a group, else the whole match."""
    occurrence: Literal["first", "last"] = "last"
    """Which match counts when the pattern matches more than once."""
    compare: Literal["label", "found"] = "label"
    """label: the captured text must equal the label (normalised); found: a match is enough."""

    def compiled(self) -> re.Pattern[str]:
        return re.compile(self.pattern, re.IGNORECASE if self.ignore_case else 0)

    def check(self) -> None:
        try:
            pattern = self.compiled()
        except re.error as exc:
            raise SettingsError("pattern", f"does not compile: {exc}") from None
        if isinstance(self.group, int) and not 0 <= self.group <= pattern.groups:
            raise SettingsError(
                "group", f"the pattern has {pattern.groups} groups; {self.group} is not one"
            )
        if isinstance(self.group, str) and self.group not in pattern.groupindex:
            names = ", ".join(pattern.groupindex) or "none"
            raise SettingsError("group", f"no group named {self.group!r} (named groups: {names})")

    def group_of(self, pattern: re.Pattern[str]) -> int | str:
        if self.group is not None:
            return self.group
        return 1 if pattern.groups else 0


def regex_search(settings: RegexMatchSettings, answer: str) -> tuple[str, str] | None:
    """``(the whole match, the captured text)`` of the match ``settings.occurrence`` names,
    or ``None`` when the pattern does not match. A user's pattern may backtrack for hours:
    this runs in a grader worker process (:mod:`osmo_run.graders.workers`)."""
    pattern = settings.compiled()
    if settings.occurrence == "first":
        match = pattern.search(answer)
    else:
        match = None
        for match in pattern.finditer(answer):  # noqa: B007 (the last one is kept)
            pass
    if match is None:
        return None
    return match.group(0), match.group(settings.group_of(pattern)) or ""


class RegexMatch(SettingsGrader[RegexMatchSettings]):
    """Searches ``pattern`` in the final answer; 1.0 when the captured text equals the
    label (normalised), or with ``compare: found`` when the pattern matches at all."""

    settings_type = RegexMatchSettings

    @classmethod
    def validate_settings(cls, settings: dict[str, Any]) -> None:
        super().validate_settings(settings)
        GRADER_WORKERS.prestart(regex_search)  # before any row: the first one does not wait

    async def grade(self, ctx: GraderContext) -> float:
        settings = self.settings
        labels = text_labels("RegexMatch", ctx.label) if settings.compare == "label" else []
        answer = final_answer(ctx.sample)
        if answer is None:
            return _no_answer(ctx, "RegexMatch")
        found = await GRADER_WORKERS.run(regex_search, settings, answer)
        if found is None:
            ctx.explain(f"pattern {quoted(settings.pattern)} not found in {quoted(answer)}")
            return 0.0
        whole, captured = found
        if settings.compare == "found":
            ctx.explain(f"pattern {quoted(settings.pattern)} found: {quoted(whole)}")
            return 1.0
        got = settings.apply(captured)
        for label in labels:
            if got == settings.apply(label):
                ctx.explain(f"captured {quoted(got)} equals label {quoted(settings.apply(label))}")
                return 1.0
        wanted = " or ".join(quoted(settings.apply(label)) for label in labels)
        ctx.explain(f"captured {quoted(got)} ({settings.occurrence} match) differs from {wanted}")
        return 0.0


@dataclass(frozen=True, kw_only=True)
class TokenF1Settings(Normalization):
    """``TokenF1`` settings: SQuAD's normalisation by default (case, punctuation, articles)."""

    ignore_punctuation: bool = True
    ignore_articles: bool = True


def token_f1(answer_tokens: list[str], label_tokens: list[str]) -> tuple[float, float, float]:
    """``(f1, precision, recall)`` of the answer's tokens against the label's, counting
    repeated tokens as often as both sides hold them; two empty sides score 1."""
    if not answer_tokens or not label_tokens:
        same = float(answer_tokens == label_tokens)
        return same, same, same
    common = sum((Counter(answer_tokens) & Counter(label_tokens)).values())
    if common == 0:
        return 0.0, 0.0, 0.0
    precision = common / len(answer_tokens)
    recall = common / len(label_tokens)
    return 2 * precision * recall / (precision + recall), precision, recall


class TokenF1(SettingsGrader[TokenF1Settings]):
    """The F1 score of the answer's words against the label's (the best over a list of
    labels): partial credit for a partly right answer, as in SQuAD."""

    settings_type = TokenF1Settings

    async def grade(self, ctx: GraderContext) -> float:
        labels = text_labels("TokenF1", ctx.label)
        answer = final_answer(ctx.sample)
        if answer is None:
            return _no_answer(ctx, "TokenF1")
        got = self.settings.apply(answer).split()
        scored = [(token_f1(got, self.settings.apply(lb).split()), lb) for lb in labels]
        (f1, precision, recall), label = max(scored, key=lambda item: item[0][0])
        ctx.explain(
            f"F1 {f1:.3f} (precision {precision:.3f}, recall {recall:.3f}) of answer tokens "
            f"{quoted(got)} against label tokens {quoted(self.settings.apply(label).split())}",
            precision=round(precision, 6),
            recall=round(recall, 6),
        )
        return f1
