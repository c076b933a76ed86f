"""The osmo-run SDK: what workflow and grader authors import.

Stdlib only, Python >= 3.11: the Harbor backend runs this package inside sandboxes
with nothing else installed.
"""

from osmo_run.sdk.config import AgentWorkflowConfig, ConcurrencyConfig, GraderConfig
from osmo_run.sdk.context import (
    AgentWorkflowContext,
    GraderContext,
    LLMEndpoint,
    RolloutContext,
    SampleSource,
    get_rollout_context,
)
from osmo_run.sdk.types import (
    AgentWorkflowOutput,
    BackendDetails,
    ErrorCategory,
    ExecutionRequest,
    ExecutionResult,
    LLMUsage,
    Message,
    Phase,
    RolloutSample,
    RolloutStatus,
    Timings,
)
from osmo_run.sdk.workflow import AgentWorkflow, Grader

__all__ = [
    "AgentWorkflow",
    "AgentWorkflowConfig",
    "AgentWorkflowContext",
    "AgentWorkflowOutput",
    "BackendDetails",
    "ConcurrencyConfig",
    "ErrorCategory",
    "ExecutionRequest",
    "ExecutionResult",
    "Grader",
    "GraderConfig",
    "GraderContext",
    "LLMEndpoint",
    "LLMUsage",
    "Message",
    "Phase",
    "RolloutContext",
    "RolloutSample",
    "RolloutStatus",
    "SampleSource",
    "Timings",
    "get_rollout_context",
]
