"""Graders made of graders: ``AllOf``, ``AnyOf`` and ``WeightedSum``.

Each part names a grader (a built-in by its name, ``NumericMatch``, or any grader as
``package.module:Class``) with its own settings, checked before any row runs::

    grader: osmo_run.graders:AllOf
    grader_config:
      settings:
        graders:
          - {grader: JsonValid}
          - {grader: JsonEquals, settings: {allow_extra_keys: true}}

Every part grades the same sample against the same label; the row's ``info.grader.parts``
lists each part's reward and explanation. An error in a part is the row's error (with
the part's category). Stdlib only (parts may need more).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from osmo_run.errors import ImportPathError
from osmo_run.graders.base import SettingsGrader
from osmo_run.graders.settings import SettingsError, join_path
from osmo_run.sdk.config import GraderConfig
from osmo_run.sdk.context import GraderContext
from osmo_run.sdk.imports import resolve_class
from osmo_run.sdk.types import validate_reward
from osmo_run.sdk.workflow import Grader


@dataclass(frozen=True, kw_only=True)
class Part:
    """One grader of a combination."""

    grader: str
    """A built-in grader's name (``ExactMatch``) or ``package.module:Class``."""
    settings: dict[str, Any] = field(default_factory=dict)
    """That grader's own settings."""
    weight: float = 1.0
    """Its weight in a ``WeightedSum`` (unused by ``AllOf`` and ``AnyOf``)."""


def resolve_part(name: str) -> type[Grader]:
    """The grader class ``name`` names; :class:`SettingsError` (path ``grader``) if none."""
    if ":" in name:
        try:
            found = resolve_class(name, Grader, "grader")
        except ImportPathError as exc:
            raise SettingsError("grader", str(exc).removeprefix("grader: ")) from None
        if not isinstance(found, type):
            raise SettingsError("grader", f"{name} is a Grader instance; name a class")
        return found
    import difflib

    import osmo_run.graders as builtins

    if name not in builtins.__all__:
        close = difflib.get_close_matches(name, builtins.__all__, n=1)
        hint = f"did you mean {close[0]!r}?" if close else "or name one as package.module:Class"
        raise SettingsError("grader", f"{name!r} is not a built-in grader; {hint}")
    grader: type[Grader] = getattr(builtins, name)
    return grader


@dataclass(frozen=True, kw_only=True)
class CombinationSettings:
    """``AllOf`` / ``AnyOf`` / ``WeightedSum`` settings."""

    graders: list[Part]
    """The parts, graded in order."""
    pass_threshold: float = 1.0
    """``AllOf`` / ``AnyOf``: a part passes when its reward is at least this."""
    normalize: bool = False
    """``WeightedSum``: divide by the sum of the weights (a weighted mean)."""

    def check(self) -> None:
        if not self.graders:
            raise SettingsError("graders", "needs at least one grader")
        for i, part in enumerate(self.graders):
            where = join_path("graders", i)
            try:
                cls = resolve_part(part.grader)
            except SettingsError as exc:
                raise SettingsError(join_path(where, exc.path), exc.problem) from None
            settings = join_path(where, "settings")
            try:
                cls.validate_settings(part.settings)
            except SettingsError as exc:
                path = join_path(settings, exc.path) if exc.path else settings
                raise SettingsError(path, exc.problem) from None
            except (ValueError, TypeError) as exc:
                raise SettingsError(settings, str(exc)) from None
        if self.normalize and sum(part.weight for part in self.graders) == 0:
            raise SettingsError("graders", "the weights sum to 0, so normalize cannot divide")


async def _grade_part(part: Part, ctx: GraderContext) -> dict[str, Any]:
    """Grade with one part on a context of its own; its reward, explanation and details."""
    cls = resolve_part(part.grader)
    instance = cls(GraderConfig(settings=dict(part.settings)))
    sample = None if ctx.sample is None else dataclasses.replace(ctx.sample)
    sub = GraderContext(
        label=ctx.label,
        sample=sample,
        metadata=ctx.metadata,
        config=instance.config,
        rollout_id=ctx.rollout_id,
        _artifacts_root=ctx._artifacts_root,
        _artifacts_name=ctx._artifacts_name,
    )
    returned = await instance.grade(sub)
    if returned is not None:
        sub.set_reward(returned)
    if sub.reward is None:
        raise ValueError(f"{part.grader} returned without a reward: call ctx.set_reward(value)")
    return {"grader": part.grader, "reward": validate_reward(sub.reward), **(sub.explained() or {})}


class _Combination(SettingsGrader[CombinationSettings]):
    settings_type = CombinationSettings

    @classmethod
    def needs_judge(cls, settings: dict[str, Any]) -> str | None:
        """The first part that needs the spec's judge section, as a settings path."""
        for i, part in enumerate(cls.parse_settings(settings).graders):
            grader = resolve_part(part.grader)
            if issubclass(grader, SettingsGrader):
                path = grader.needs_judge(part.settings)
                if path is not None:
                    where = join_path(join_path("graders", i), "settings")
                    return join_path(where, path) if path else where
        return None

    async def _grade_parts(
        self, ctx: GraderContext, stop_when: bool | None
    ) -> list[dict[str, Any]]:
        """Grade each part in order; stop after the first whose passing equals ``stop_when``.

        What was graded so far is explained even when a part raises.
        """
        graded: list[dict[str, Any]] = []
        try:
            for part in self.settings.graders:
                graded.append(await _grade_part(part, ctx))
                passed = graded[-1]["reward"] >= self.settings.pass_threshold
                if stop_when is not None and passed is stop_when:
                    break
        except BaseException:
            failing = self.settings.graders[len(graded)].grader
            ctx.explain(
                f"{type(self).__name__}: {failing} (part {len(graded) + 1}) raised", parts=graded
            )
            raise
        return graded


def _line(part: dict[str, Any]) -> str:
    explanation = part.get("explanation")
    return f"{part['grader']} {part['reward']:g}" + (f" ({explanation})" if explanation else "")


class AllOf(_Combination):
    """1.0 when every part's reward reaches ``pass_threshold``, else 0.0; stops at the
    first part that does not."""

    async def grade(self, ctx: GraderContext) -> float:
        graded = await self._grade_parts(ctx, stop_when=False)
        failed = [p for p in graded if p["reward"] < self.settings.pass_threshold]
        total = len(self.settings.graders)
        if failed:
            ctx.explain(
                f"AllOf: part {len(graded)} of {total} failed: {_line(failed[0])}", parts=graded
            )
            return 0.0
        ctx.explain(
            f"AllOf: all {total} parts passed: " + "; ".join(map(_line, graded)), parts=graded
        )
        return 1.0


class AnyOf(_Combination):
    """1.0 when some part's reward reaches ``pass_threshold``, else 0.0; stops at the
    first part that does."""

    async def grade(self, ctx: GraderContext) -> float:
        graded = await self._grade_parts(ctx, stop_when=True)
        passed = [p for p in graded if p["reward"] >= self.settings.pass_threshold]
        total = len(self.settings.graders)
        if passed:
            ctx.explain(
                f"AnyOf: part {len(graded)} of {total} passed: {_line(passed[0])}", parts=graded
            )
            return 1.0
        ctx.explain(
            f"AnyOf: none of {total} parts passed: " + "; ".join(map(_line, graded)), parts=graded
        )
        return 0.0


class WeightedSum(_Combination):
    """The sum of each part's reward times its ``weight`` (divided by the weights' sum
    with ``normalize``); every part is graded."""

    async def grade(self, ctx: GraderContext) -> float:
        graded = await self._grade_parts(ctx, stop_when=None)
        weights = [part.weight for part in self.settings.graders]
        total: float = sum(w * p["reward"] for w, p in zip(weights, graded, strict=True))
        if self.settings.normalize:
            total /= sum(weights)
        terms = " + ".join(f"{w:g} x {_line(p)}" for w, p in zip(weights, graded, strict=True))
        scale = f" / {sum(weights):g}" if self.settings.normalize else ""
        ctx.explain(f"WeightedSum: ({terms}){scale} = {total:g}", parts=graded)
        return total
