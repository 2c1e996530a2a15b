#!/usr/bin/env bash
# The main job on a fresh machine: install what is missing, build, fetch the
# demo model (SmolLM2-135M-Instruct, GGUF Q4_1) and generate a completion for
# every prompt of examples/prompts.txt with the model's chat template. Prints
# the completions and the throughput report; the records are in out/demo.jsonl
# and the report in out/demo-report.json. Then the same prompts again with
# --policy auto under a RAM budget smaller than the model's weights, so the
# weights stream from the disk tier (out/offload): the plan the search chose,
# the report's bytes and bandwidth per link, and the predicted throughput beside
# the measured (out/demo-offload-report.json). The first --policy auto measures
# this machine once (about 10 s) and caches the profile.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
./scripts/fetch-demo-model.sh
model=models/SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p out
rm -f out/demo.jsonl out/demo.jsonl.partial
./build/cli/strata inspect --model "$model"
echo
./build/cli/strata generate --model "$model" --prompts examples/prompts.txt --chat \
  --max-new-tokens 96 --output out/demo.jsonl --report out/demo-report.json
echo
python3 - examples/prompts.txt out/demo.jsonl <<'PY'
import json, sys
prompts = [l.rstrip("\r\n") for l in open(sys.argv[1], encoding="utf-8")]  # ids are line indices
for rec in map(json.loads, open(sys.argv[2], encoding="utf-8")):
    print(f"### {prompts[int(rec['id'])]}")
    print(rec["completion"].strip())
    print(f"    ({rec['completion_tokens']} tokens, {rec['finish_reason']})\n")
PY

echo "=== the same prompts with --policy auto and 80M of RAM: the 92M of weights stream from disk"
rm -f out/demo-offload.jsonl out/demo-offload.jsonl.partial
mkdir -p out/offload
./build/cli/strata generate --model "$model" --prompts examples/prompts.txt --chat \
  --max-new-tokens 32 --policy auto --cpu-mem 80M --offload-dir out/offload \
  --output out/demo-offload.jsonl --report out/demo-offload-report.json
