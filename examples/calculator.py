"""A calculator "agent" that needs no model.

The workflow finds the arithmetic expression in the prompt, calls a calculator tool and
answers with the result, recording the tool call like an LLM agent would. It exists to
show osmo-run's behaviour on a run that mixes successes and every kind of failure; with
the built-in ``osmo_run.graders:NumericMatch`` (configs/example.yaml):

* a division by zero raises ``ZeroDivisionError``            -> agent_error
* a prompt with no expression raises ``ValueError``         -> validation_error
* ``metadata.think_sec`` longer than the agent timeout       -> timeout
* a label that is not a number makes the grader raise        -> validation_error (grader)
* a row without a label is not graded, and says so.
"""

from __future__ import annotations

import ast
import asyncio
import operator
import re
from pathlib import Path

from osmo_run import AgentWorkflow, AgentWorkflowContext, AgentWorkflowOutput

_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
}
_EXPRESSION = re.compile(r"[-+*/().\d\s^]*\d[-+*/().\d\s^]*")


def calculate(expression: str) -> float:
    """Evaluate ``+ - * / ** ( )`` over numbers; raise ``ValueError`` for anything else."""

    def evaluate(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](evaluate(node.left), evaluate(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](evaluate(node.operand))
        raise ValueError(f"unsupported expression: {expression!r}")

    return evaluate(ast.parse(expression.replace("^", "**"), mode="eval").body)


def find_expression(text: str) -> str:
    """The longest arithmetic expression in ``text``; ``ValueError`` if there is none."""
    candidates = [m.group().strip() for m in _EXPRESSION.finditer(text)]
    candidates = [c for c in candidates if re.search(r"\d\s*[-+*/^]\s*[-(\d]", c)]
    if not candidates:
        raise ValueError("the prompt holds no arithmetic expression")
    return max(candidates, key=len).rstrip("?. ")


class CalculatorWorkflow(AgentWorkflow):
    """Answers arithmetic questions with a calculator tool call.

    ``settings.answer_file``, when set, names a file the answer is also written to (for
    Harbor tasks whose own tests check files, like tasks/calculator).
    """

    async def run(self, ctx: AgentWorkflowContext) -> AgentWorkflowOutput:
        question = ctx.prompt[-1]["content"]
        await asyncio.sleep(float(ctx.metadata.get("think_sec", 0.0)))
        expression = find_expression(question)
        value = calculate(expression)
        answer = f"{value:g}"
        answer_file = self.config.settings.get("answer_file")
        if answer_file:
            await asyncio.to_thread(Path(answer_file).write_text, answer + "\n", encoding="utf-8")
        messages = [
            *ctx.prompt,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {
                            "name": "calculate",
                            "arguments": f'{{"expression": "{expression}"}}',
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": answer},
            {"role": "assistant", "content": f"The answer is {answer}."},
        ]
        return AgentWorkflowOutput(messages=messages, metrics={"tool_calls": 1})
