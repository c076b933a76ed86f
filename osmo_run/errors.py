"""Every exception osmo-run raises on purpose, rooted at one class, and the exit codes.

Stdlib only: the SDK imports this module inside sandboxes.

    OsmoRunError                      an expected failure; the CLI prints its message, no traceback
    ├── InputError                    bad input from the user: exit code 2, nothing was run
    │   ├── SpecError                 the YAML run spec (names the file and the field)
    │   ├── DatasetError              the dataset (names file:line)
    │   ├── ImportPathError           a "module:attr" that does not resolve to what it must
    │   │   └── DependencyImportError the module exists, one of its own imports is missing
    │   ├── TaskDirError              a Harbor task directory that cannot be used
    │   ├── RequirementsError         the workflow's requirements cannot reach the trial
    │   ├── EnvFileError              an --env-file that cannot be read or parsed (names file:line)
    │   └── ScaffoldError             osmo-run init's target exists or names no valid package
    ├── BackendUnavailable            an optional extra is missing (names the pip command): exit 2
    │   └── EmbeddedLLMUnavailable    `llm: embedded` without its server or model package
    ├── EnvironmentNotReady           a container engine or cloud credentials are missing: exit 2
    ├── OutputError                   the output file cannot be written: exit 2
    ├── DockerCommandError            a docker command failed during a run (that row's infra_error)
    ├── SandboxError                  inside a Harbor trial: the sandbox runner gave no result
    │   ├── OsmoRunSandboxInfraError      the environment is unusable (infra_error)
    │   ├── OsmoRunSandboxTimeoutError    the runner was killed at its hard deadline (timeout)
    │   └── OsmoRunSandboxRunnerError     the runner process itself failed (agent_error)
    ├── ModelAPIError                 a workflow's model endpoint failed (model_api_error)
    │   └── RateLimitError            it answered 429 (rate_limit)
    └── BudgetExceededError           the run's budget is spent, no call sent (budget_exceeded)

A rollout's own failures never propagate as exceptions: backends turn them into results with
an error category (:class:`osmo_run.sdk.types.ErrorCategory`). The classes under
``SandboxError`` and ``ModelAPIError`` are raised inside rollouts and categorized by their
class names, which Harbor records; those names are part of the result contract.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """The process exit codes, identical for every command and backend (see the README)."""

    OK = 0
    """The run passed: every rollout succeeded, or every given gate held."""
    ROLLOUTS_FAILED = 1
    """A rollout failed (no gate given), or a quality gate (--fail-under, --min-pass-rate)
    did not hold."""
    INVALID_INPUT = 2
    """Bad invocation, spec, dataset or environment; nothing was run."""
    INTERNAL_ERROR = 3
    """A bug in osmo-run."""
    ERROR_BUDGET_EXCEEDED = 4
    """More rollouts failed than --max-errors / --max-error-rate allow."""
    SYSTEMIC_FAILURE = 5
    """The breaker stopped the run: K rollouts in a row failed with the same cause
    (infra_error, model_api_error or rate_limit); rows not yet started were not started,
    and --resume runs them once the cause is fixed (see osmo_run.run.controls.breaker)."""
    BUDGET_SPENT = 6
    """The run's budget (tokens, usd or model calls) was spent: no further model call left,
    rows that needed one ended as budget_exceeded, rows not yet started were not started;
    --resume with a larger budget continues (see osmo_run.sdk.model_budget)."""
    INTERRUPTED = 130
    """Ctrl-C or SIGTERM: in-flight rows were recorded as cancelled."""


class OsmoRunError(Exception):
    """An expected failure whose message is written for the person who must act on it."""

    exit_code: ExitCode = ExitCode.ROLLOUTS_FAILED


class InputError(OsmoRunError):
    """The user's input (spec, dataset, import path, task) is invalid; nothing was run."""

    exit_code = ExitCode.INVALID_INPUT


class SpecError(InputError):
    """The run spec is invalid."""


class DatasetError(InputError):
    """A dataset line is invalid."""


class ImportPathError(InputError):
    """A ``module:attr`` import path does not resolve to the expected kind of object."""


class DependencyImportError(ImportPathError):
    """The module exists but one of its own imports failed (a dependency is missing)."""


class TaskDirError(InputError):
    """A Harbor task directory is missing required files."""


class RequirementsError(InputError):
    """The workflow's requirements are unreadable, or have no wheel for the trial's image."""


class CacheDirError(InputError):
    """osmo-run's cache directory (``OSMO_RUN_CACHE_DIR``) cannot be written."""


class EnvFileError(InputError):
    """An ``--env-file`` cannot be read, or a line of it is not ``KEY=VALUE``."""


class ScaffoldError(InputError):
    """``osmo-run init`` cannot create its project there (the directory is not empty, or its
    name makes no Python package name)."""


class BackendUnavailable(OsmoRunError):
    """A backend's optional dependencies are not installed."""

    exit_code = ExitCode.INVALID_INPUT


class EmbeddedLLMUnavailable(BackendUnavailable):
    """The embedded model's server (the ``embedded`` extra) or its model file is missing."""


class EnvironmentNotReady(OsmoRunError):
    """The execution environment (container engine, cloud credentials) is not usable."""

    exit_code = ExitCode.INVALID_INPUT


class OutputError(OsmoRunError):
    """The output location cannot be written."""

    exit_code = ExitCode.INVALID_INPUT


class DockerCommandError(OsmoRunError):
    """A ``docker`` command the Harbor backend ran itself failed; the message holds its output."""


class SandboxError(OsmoRunError):
    """The sandbox runner inside a Harbor trial could not produce a result. ``kind`` picks the
    error category: ``infra`` (environment unusable), ``timeout`` (killed at its hard
    deadline) or ``runner`` (the runner process itself failed)."""

    kind = "runner"


class OsmoRunSandboxInfraError(SandboxError):
    """The trial environment cannot run the sandbox runner (no Python, engine gone, killed)."""

    kind = "infra"


class OsmoRunSandboxTimeoutError(SandboxError):
    """The sandbox runner was killed at its hard deadline."""

    kind = "timeout"


class OsmoRunSandboxRunnerError(SandboxError):
    """The sandbox runner exited without writing a result."""

    kind = "runner"


class ModelAPIError(OsmoRunError):
    """A model endpoint failed or answered something that is not a chat completion."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RateLimitError(ModelAPIError):
    """The model endpoint answered 429 Too Many Requests."""


class BudgetExceededError(OsmoRunError):
    """The run's budget (``budget:`` in the spec, ``--budget-tokens``, ``--budget-usd``) is
    spent: the model call that raised it was never sent. Categorized ``budget_exceeded``
    (never retried) by its class name, wherever a model client wrapped it."""
