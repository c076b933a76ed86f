"""A workflow that needs PyYAML (declared in ../pyproject.toml), and with the ``toml``
extra tomli-w: it answers with the YAML dump of the row's metadata and says where the
libraries were imported from."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import yaml

from osmo_run import AgentWorkflow, AgentWorkflowContext, AgentWorkflowOutput


def _compiled(cached: str) -> bool:
    """Whether the module's byte-code file for this Python exists (compiled ahead)."""
    return Path(cached).exists()


class YamlWorkflow(AgentWorkflow):
    """Answers ``yaml.safe_dump(metadata)``; ``info`` says where yaml came from."""

    async def run(self, ctx: AgentWorkflowContext) -> AgentWorkflowOutput:
        info: dict[str, object] = {
            "yaml_file": yaml.__file__,
            "yaml_pyc": _compiled(yaml.__cached__),
            "python": "{}.{}".format(*sys.version_info[:2]),
        }
        if ctx.metadata.get("want_toml"):
            info["tomli_w_file"] = importlib.import_module("tomli_w").__file__
        answer = yaml.safe_dump(dict(ctx.metadata), sort_keys=True).strip()
        reply = {"role": "assistant", "content": answer}
        return AgentWorkflowOutput(messages=[*ctx.prompt, reply], info=info)
