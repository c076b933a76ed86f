"""Docker environment variants for osmo-run trials."""

from __future__ import annotations

from typing import Any

from harbor.environments.docker.docker import DockerEnvironment
from harbor.models.task.config import EnvironmentConfig as TaskEnvironmentConfig

PREBUILT_IMAGE_IMPORT_PATH = "osmo_run.backends.harbor.environment:PrebuiltImageDockerEnvironment"


class PrebuiltImageDockerEnvironment(DockerEnvironment):
    """Harbor's Docker environment started from ``image`` instead of the task's own image.

    Harbor reads the image only from task.toml; this takes it as the ``image`` kwarg so one
    image built per run serves every trial without copying the task.
    """

    def __init__(
        self, *args: Any, image: str, task_env_config: TaskEnvironmentConfig, **kwargs: Any
    ) -> None:
        task_env_config = task_env_config.model_copy(update={"docker_image": image})
        super().__init__(*args, task_env_config=task_env_config, **kwargs)
