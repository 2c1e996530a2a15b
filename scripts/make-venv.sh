#!/usr/bin/env bash
# Creates the Python virtual environment .venv used by scripts/make_fixtures.py,
# with the pinned versions of scripts/requirements-fixtures.txt (PyPI only).
# Idempotent: when .venv already holds exactly those pins (a stamp file records
# the sha256 of the requirements file), it does nothing. The test suite never
# needs this environment; only regenerating fixtures does.
#   PYTHON=python3.11 scripts/make-venv.sh   # choose the interpreter
set -euo pipefail
cd "$(dirname "$0")/.."

req=scripts/requirements-fixtures.txt
venv=.venv
stamp=$venv/.requirements.sha256
python=${PYTHON:-python3}
want=$(sha256sum "$req" | cut -d' ' -f1)

if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi

if [ ! -x "$venv/bin/python" ]; then
  echo "make-venv: creating $venv with $($python --version 2>&1)"
  "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
echo "make-venv: installing $req (torch is large; this takes a few minutes)"
"$venv/bin/python" -m pip install --quiet --requirement "$req"
"$venv/bin/python" - <<'PY'
import torch, transformers, tokenizers, safetensors, gguf, numpy
print("make-venv: torch", torch.__version__, "transformers", transformers.__version__,
      "tokenizers", tokenizers.__version__, "numpy", numpy.__version__)
PY
echo "$want" > "$stamp"
