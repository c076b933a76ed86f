"""The user's grader, imported to check its own settings before any row runs.

A spec names its grader as ``module:Class``; the class knows which settings it takes
(``Grader.validate_settings``) and whether it needs a judge. Resolving it runs the user's
code, so it is kept apart from the spec's fields: a grader that does not import here is
left to whoever runs it (the backend, ``osmo-run validate``).
"""

from __future__ import annotations

from typing import Any

from osmo_run.errors import BackendUnavailable, ImportPathError, SpecError
from osmo_run.graders.base import SettingsGrader
from osmo_run.graders.judge import NO_ENDPOINT as NO_JUDGE_ENDPOINT
from osmo_run.graders.settings import SettingsError
from osmo_run.sdk.imports import resolve_class
from osmo_run.sdk.workflow import Grader


def check_grader_settings(
    grader: str, settings: dict[str, Any], *, judge: bool, tolerate_missing_deps: bool = False
) -> None:
    """Let the grader ``grader`` names check ``settings`` (``Grader.validate_settings``),
    so bad settings stop a run before any row: :class:`SpecError` naming the field (a
    judging grader with no endpoint when ``judge``, the spec's judge section, is off), or
    :class:`BackendUnavailable` naming the pip command of a missing extra (unless
    ``tolerate_missing_deps``).

    A grader path that does not resolve here is left to whoever resolves the grader (the
    backend, ``osmo-run validate``), which reports it, or tolerates a dependency missing
    on this host that the sandbox has.
    """
    try:
        cls = resolve_class(grader, Grader, "grader")
    except ImportPathError:
        return
    if not (isinstance(cls, type) and issubclass(cls, Grader)):
        return  # an instance brings its own config
    try:
        cls.validate_settings(settings)
        unnamed = (
            None if judge or not issubclass(cls, SettingsGrader) else cls.needs_judge(settings)
        )
    except SettingsError as exc:
        raise SpecError(f"{_settings_path(exc.path)}: {exc.problem} ({grader})") from None
    except (TypeError, ValueError) as exc:
        raise SpecError(f"grader_config.settings: {exc} ({grader})") from None
    except ImportError as exc:
        if tolerate_missing_deps:
            return
        raise BackendUnavailable(f"grader {grader}: {exc}") from None
    if unnamed is not None:
        raise SpecError(f"{_settings_path(unnamed)}: {NO_JUDGE_ENDPOINT} ({grader})")


def _settings_path(path: str) -> str:
    return f"grader_config.settings.{path}" if path else "grader_config.settings"
