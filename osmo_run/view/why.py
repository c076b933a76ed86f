"""Why a rollout scored what it did, in one line: what the rows table's "why" column and
the top of a row page show beside the result.

A failed or cancelled rollout: its error category and the first line of its message. A
graded one: the grader's explanation (``info.grader.explanation``, see
``GraderContext.explain``) with the label and answer it named, if any. A success without a
reward: why it was not graded (``grader_skipped``), else "no grader".
"""

from __future__ import annotations

from typing import Any

LIMIT = 200
"""Characters of the one line (the row page shows the whole text)."""
_NAMED = ("label", "expected", "answer", "got")
"""Details of ``info.grader`` shown beside the explanation (what was compared)."""


def _short(text: str, limit: int = LIMIT) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def grader_note(record: dict[str, Any]) -> str | None:
    """The grader's explanation with the label and answer it named (full text), or
    ``None`` when the grader explained nothing."""
    info = record.get("info")
    grader = info.get("grader") if isinstance(info, dict) else None
    if not isinstance(grader, dict):
        return None
    explanation = grader.get("explanation")
    parts = [str(explanation)] if explanation not in (None, "") else []
    for name in _NAMED:
        if grader.get(name) is not None:
            parts.append(f"{name}: {grader[name]}")
    return " · ".join(parts) or None


def passing(record: dict[str, Any], threshold: float) -> bool | None:
    """Whether the rollout passed (a success rewarded at least ``threshold``); ``None``
    when it succeeded without a reward (not graded)."""
    if record.get("status") != "success":
        return False
    reward = record.get("reward")
    if not isinstance(reward, int | float) or isinstance(reward, bool):
        return None
    return reward >= threshold


def why_text(record: dict[str, Any], full: bool = False) -> str:
    """Why the rollout has its result; one line of at most :data:`LIMIT` characters unless
    ``full``."""
    shorten = (lambda text: text) if full else _short
    status = record.get("status")
    if status != "success":
        category = record.get("error_category") or status or "error"
        message = str(record.get("error_message") or "")
        first = message if full else (message.strip().splitlines() or [""])[0]
        note = grader_note(record)  # a grader that failed may have said why first
        text = f"{category}: {first}" if first else str(category)
        return shorten(f"{text} · grader: {note}" if note and full else text)
    note = grader_note(record)
    if note is not None:
        return shorten(note)
    if record.get("grader_skipped"):
        return shorten(f"not graded: {record['grader_skipped']}")
    if record.get("reward") is None:
        return "no grader"
    return ""
