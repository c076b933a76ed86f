"""Docker environment variants for osmo-run trials.

Harbor's Docker environment passes an exec's environment as ``docker compose exec -e
NAME=VALUE``: on the command line, which every user of the host can read in
``/proc/*/cmdline`` while the exec runs (the model's and the judge's API keys among them).
:class:`SecretSafeDockerEnvironment` passes ``-e NAME`` only and puts the value in the
environment of the ``docker compose`` process, which reads it from there.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from harbor.environments.docker.docker import DockerEnvironment
from harbor.models.task.config import EnvironmentConfig as TaskEnvironmentConfig

SECRET_SAFE_IMPORT_PATH = "osmo_run.backends.harbor.environment:SecretSafeDockerEnvironment"
PREBUILT_IMAGE_IMPORT_PATH = "osmo_run.backends.harbor.environment:PrebuiltImageDockerEnvironment"

_EXEC_VALUES: ContextVar[dict[str, str] | None] = ContextVar("osmo_run_exec_values", default=None)
"""The values of the ``-e NAME`` options of the compose command being run (this task's)."""


def names_only(command: list[str]) -> tuple[list[str], dict[str, str]]:
    """``command`` (a compose subcommand and its arguments) with every ``-e NAME=VALUE``
    option of ``exec`` before the service name turned into ``-e NAME``, and the values
    taken out (``{NAME: VALUE}``). Anything else is returned unchanged."""
    if not command or command[0] != "exec":
        return command, {}
    kept, values = ["exec"], {}
    index = 1
    while index < len(command):
        option = command[index]
        if not option.startswith("-"):  # the service: the command that follows is its own
            break
        argument = command[index + 1] if index + 1 < len(command) else None
        if option in ("-e", "--env") and argument is not None and "=" in argument:
            name, _, value = argument.partition("=")
            kept += [option, name]
            values[name] = value
            index += 2
        elif option in ("-w", "--workdir", "-u", "--user", "-e", "--env"):
            kept += [option] + ([argument] if argument is not None else [])
            index += 2
        else:
            kept.append(option)
            index += 1
    return kept + command[index:], values


class SecretSafeDockerEnvironment(DockerEnvironment):
    """Harbor's Docker environment with every exec's environment values kept off the
    host's process list (see the module docstring)."""

    async def _run_docker_compose_command(
        self,
        command: list[str],
        check: bool = True,
        timeout_sec: int | None = None,
        stdin_data: bytes | None = None,
        on_output: Any = None,
    ) -> Any:
        command, values = names_only(command)
        token = _EXEC_VALUES.set(values)
        try:
            return await super()._run_docker_compose_command(
                command,
                check=check,
                timeout_sec=timeout_sec,
                stdin_data=stdin_data,
                on_output=on_output,
            )
        finally:
            _EXEC_VALUES.reset(token)

    def _compose_env_vars(self, include_os_env: bool = True) -> dict[str, str]:
        return {**super()._compose_env_vars(include_os_env), **(_EXEC_VALUES.get() or {})}


class PrebuiltImageDockerEnvironment(SecretSafeDockerEnvironment):
    """Harbor's Docker environment started from ``image`` instead of the task's own image.

    Harbor reads the image only from task.toml; this takes it as the ``image`` kwarg so one
    image built per run serves every trial without copying the task.
    """

    def __init__(
        self, *args: Any, image: str, task_env_config: TaskEnvironmentConfig, **kwargs: Any
    ) -> None:
        task_env_config = task_env_config.model_copy(update={"docker_image": image})
        super().__init__(*args, task_env_config=task_env_config, **kwargs)
