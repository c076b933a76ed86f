"""Every exception osmo-run raises on purpose, rooted at one class.

Stdlib only: the SDK imports this module inside sandboxes.

    OsmoRunError                    an expected failure; the CLI prints its message, no traceback
    ├── InputError                  bad input from the user: exit code 2
    │   ├── SpecError               the YAML run spec (names the file and the field)
    │   ├── DatasetError            the JSONL dataset (names file:line)
    │   ├── ImportPathError         a "module:attr" that does not resolve to what it must
    │   └── TaskDirError            a Harbor task directory that cannot be used
    ├── BackendUnavailable          an optional extra is missing (names the pip command)
    ├── EnvironmentNotReady         a container engine or cloud credentials are missing
    └── OutputError                 the output file cannot be written
"""

from __future__ import annotations


class OsmoRunError(Exception):
    """An expected failure whose message is written for the person who must act on it."""

    exit_code: int = 1


class InputError(OsmoRunError):
    """The user's input (spec, dataset, import path, task) is invalid; nothing was run."""

    exit_code = 2


class SpecError(InputError):
    """The run spec is invalid."""


class DatasetError(InputError):
    """A dataset line is invalid."""


class ImportPathError(InputError):
    """A ``module:attr`` import path does not resolve to the expected kind of object."""


class TaskDirError(InputError):
    """A Harbor task directory is missing required files."""


class BackendUnavailable(OsmoRunError):
    """A backend's optional dependencies are not installed."""

    exit_code = 2


class EnvironmentNotReady(OsmoRunError):
    """The execution environment (container engine, cloud credentials) is not usable."""

    exit_code = 2


class OutputError(OsmoRunError):
    """The output location cannot be written."""

    exit_code = 2
