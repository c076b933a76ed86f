"""What every built-in grader shares: typed settings, the answer it grades, label checks.

Stdlib only: these graders run wherever the SDK runs, Harbor trials included.
"""

from __future__ import annotations

from typing import Any, ClassVar, Generic, TypeVar

from osmo_run.graders.settings import parse_settings
from osmo_run.sdk.config import GraderConfig
from osmo_run.sdk.types import RolloutSample
from osmo_run.sdk.workflow import Grader

S = TypeVar("S")


class SettingsGrader(Grader, Generic[S]):
    """A grader whose ``grader_config.settings`` are the dataclass ``settings_type``.

    The settings are parsed once per instance (``self.settings``) and checked before any
    row runs (:meth:`validate_settings`), so a bad value stops the run with the field's
    name instead of failing every row.
    """

    settings_type: ClassVar[type[Any]]

    def __init__(self, config: GraderConfig | None = None) -> None:
        super().__init__(config)
        self.settings: S = self.parse_settings(self.config.settings)

    @classmethod
    def parse_settings(cls, settings: dict[str, Any] | None) -> S:
        """The typed settings; :class:`~osmo_run.graders.settings.SettingsError` if invalid."""
        parsed: S = parse_settings(cls.settings_type, settings)
        return parsed

    @classmethod
    def validate_settings(cls, settings: dict[str, Any]) -> None:
        cls.parse_settings(settings)

    @classmethod
    def needs_judge(cls, settings: dict[str, Any]) -> str | None:
        """Where ``settings`` (already valid) leave a judge model unnamed: the path of the
        setting that would name it (``""``: the grader itself), so the run spec's ``judge``
        section must; ``None`` when no judge endpoint is needed. The default needs none."""
        return None


def missing_extra(grader: str, library: str, extra: str, exc: ImportError) -> ImportError:
    """The error for an optional library that is not installed where the grader runs: it
    names the library and how to get it, on this host or in a Harbor trial's image."""
    return ImportError(
        f"{grader} needs {library}, which is not installed where the grader runs ({exc}); "
        f"pip install 'osmo-run[{extra}]' (in a Harbor trial: add it to the spec's "
        f"requirements, `requirements: {{add: [{library}]}}`, or install it in the task's image)"
    )


def message_text(message: dict[str, Any]) -> str:
    """The text of a chat message: its ``content`` string, or its text parts joined."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        return "".join(p for p in parts if isinstance(p, str))
    return ""


def final_answer(sample: RolloutSample | None) -> str | None:
    """The text of the last assistant message that has text; ``None`` when there is none
    (a sample of tool calls only, or no sample)."""
    if sample is None:
        return None
    for message in reversed(sample.messages):
        if message.get("role") == "assistant":
            text = message_text(message)
            if text.strip():
                return text
    return None


def quoted(value: object, limit: int = 200) -> str:
    """``value`` as ``repr`` for an explanation, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def wrong_label(grader: str, expected: str, label: object) -> TypeError:
    """The error for a row whose label a grader cannot use (a ``validation_error``)."""
    return TypeError(
        f"{grader}: the label must be {expected}, got {type(label).__name__} {quoted(label, 80)}"
    )


def text_labels(grader: str, label: object) -> list[str]:
    """The acceptable answers a label names: a string, a number (as written in JSON) or a
    list of them (any may match). Raises ``TypeError`` (a ``validation_error``) otherwise."""
    items = label if isinstance(label, list) and label else [label]
    texts = []
    for item in items:
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, int | float) and not isinstance(item, bool):
            texts.append(str(item))
        else:
            raise wrong_label(grader, "a string, a number or a list of them", label)
    return texts
