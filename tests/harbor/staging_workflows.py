"""A workflow that reports what reached its trial, for the staging tests
(``test_staging.py`` copies this file into the code dirs it builds).

Stdlib only: it runs on the trial container's Python 3.11 with the osmo-run SDK alone.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from osmo_run import AgentWorkflow, AgentWorkflowContext, AgentWorkflowOutput, Grader, GraderContext


def _shown(relative: Path) -> str:
    """A file name as text, whatever its bytes (a non-UTF-8 byte shows as ``\\xe9``)."""
    return os.fsencode(relative).decode("utf-8", "backslashreplace")


def _staged_files() -> list[str]:
    root = Path(__file__).resolve().parent
    return sorted(_shown(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


class ListingWorkflow(AgentWorkflow):
    """Reports in ``info``: ``files`` (every file of the staged code dir, relative),
    ``imports`` (for each module ``metadata.imports`` names: ``ok`` or the error) and
    ``prompt`` (the row's prompt text)."""

    async def run(self, ctx: AgentWorkflowContext) -> AgentWorkflowOutput:
        files = _staged_files()
        imports: dict[str, str] = {}
        for name in ctx.metadata.get("imports", []):
            try:
                importlib.import_module(name)
                imports[name] = "ok"
            except Exception as exc:
                imports[name] = f"{type(exc).__name__}: {exc}"
        prompt = " ".join(str(m.get("content")) for m in ctx.prompt)
        info = {"files": files, "imports": imports, "prompt": prompt}
        return AgentWorkflowOutput(
            messages=[*ctx.prompt, {"role": "assistant", "content": "listed"}], info=info
        )


class AlwaysOne(Grader):
    """Every answer is right: the tests look at ``info``, not at grades."""

    async def grade(self, ctx: GraderContext) -> float:
        return 1.0
