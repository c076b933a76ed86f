"""Model endpoints osmo-run runs itself: :mod:`.embedded` starts a small chat model behind an
OpenAI-compatible server for ``llm: embedded``; :mod:`.embedded_server` is that server's
process."""
