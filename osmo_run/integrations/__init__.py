"""Agent-framework integrations: an agent built with the framework talks to the rollout's
model endpoint, counts its usage in the rollout, and becomes the rollout's sample.

- :mod:`osmo_run.integrations.openai_agents`: the OpenAI Agents SDK
  (``pip install 'osmo-run[openai-agents]'``).
- :mod:`osmo_run.integrations.strands`: Strands Agents (``pip install 'osmo-run[strands]'``).

Each imports its framework when it is imported, never before: ``osmo_run.sdk`` stays
stdlib-only.
"""
