"""Example workflows and graders bundled with osmo-run (see configs/ and datasets/)."""
