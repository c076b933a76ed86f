"""Configuration objects handed to workflows and graders."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

DEFAULT_MAX_CONCURRENT = 4

_IMMUTABLE = frozenset({str, int, float, bool, bytes, type(None)})


def own_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``settings`` one rollout may change without changing another's: a plain
    copy when every value is immutable (the common case, and far cheaper: it runs once per
    phase), a deep copy when a value could be changed in place (a list, a mapping)."""
    if not settings:
        return {}
    for value in settings.values():
        if type(value) not in _IMMUTABLE:
            return copy.deepcopy(settings)
    return dict(settings)


@dataclass
class ConcurrencyConfig:
    """How many rollouts may run at once. Always bounded: the default is 4."""

    max_concurrent: int = DEFAULT_MAX_CONCURRENT

    def __post_init__(self) -> None:
        if isinstance(self.max_concurrent, bool) or not isinstance(self.max_concurrent, int):
            raise TypeError(
                f"concurrency.max_concurrent must be an integer, got {self.max_concurrent!r}"
            )
        if self.max_concurrent < 1:
            raise ValueError(
                f"concurrency.max_concurrent must be at least 1, got {self.max_concurrent}"
            )


@dataclass
class AgentWorkflowConfig:
    """What a workflow is configured with: concurrency plus free-form ``settings``.

    ``settings`` comes from the spec's ``workflow_config.settings`` and is the place for a
    workflow's own knobs (temperature, max turns, tool lists).
    """

    concurrency: ConcurrencyConfig = field(default_factory=ConcurrencyConfig)
    settings: dict[str, Any] = field(default_factory=dict)

    def fresh_copy(self) -> AgentWorkflowConfig:
        """A copy one rollout may change freely (see :func:`own_settings`)."""
        return AgentWorkflowConfig(self.concurrency, own_settings(self.settings))

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> AgentWorkflowConfig:
        """Build from the spec's mapping; unknown top-level keys raise ``ValueError``."""
        data = dict(data or {})
        concurrency = data.pop("concurrency", None) or {}
        settings = data.pop("settings", None) or {}
        if data:
            raise ValueError(
                f"unknown workflow_config keys {sorted(data)}; put a workflow's own options "
                "under workflow_config.settings"
            )
        return cls(concurrency=ConcurrencyConfig(**concurrency), settings=dict(settings))


@dataclass
class GraderConfig:
    """What a grader is configured with: its free-form ``settings`` from the spec's
    ``grader_config.settings`` (the pass threshold is the spec's ``pass_threshold``).

    ``grade_without_label`` (the spec's setting of that name) grades rows that have no
    label too, with ``ctx.label`` ``None``: for graders that check the answer against the
    row's metadata (tests to run, a reference file). Off by default, because an exact-match
    grader given no label would score every such row 0 and drag the mean down with rows
    that were never gradable.
    """

    settings: dict[str, Any] = field(default_factory=dict)
    grade_without_label: bool = False

    def fresh_copy(self) -> GraderConfig:
        """A copy one rollout may change freely (see ``AgentWorkflowConfig.fresh_copy``)."""
        return GraderConfig(own_settings(self.settings), self.grade_without_label)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> GraderConfig:
        """Build from the spec's mapping; unknown top-level keys raise ``ValueError``."""
        data = dict(data or {})
        settings = data.pop("settings", None) or {}
        if data:
            raise ValueError(
                f"unknown grader_config keys {sorted(data)}; put a grader's own options "
                "under grader_config.settings"
            )
        return cls(settings=dict(settings))
