"""osmo-run: run a dataset through an agent workflow and a grader, locally or in Harbor trials.

Workflow authors import from here (``from osmo_run import AgentWorkflow, Grader``). The
package root re-exports only the SDK, which is stdlib-only, so importing it stays cheap
and works inside sandboxes; backends are imported from ``osmo_run.backends``.
"""

from osmo_run.sdk import *  # noqa: F403 -- the root re-exports exactly the SDK's __all__
from osmo_run.sdk import __all__ as __all__

__version__ = "0.1.0"
