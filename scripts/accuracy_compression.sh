#!/usr/bin/env bash
# Accuracy of compression on the demo model: perplexity of SmolLM2-135M
# (models/SmolLM2-135M-Instruct.Q4_1.gguf) on tests/data/text/ppl.txt, by the
# golden procedure (chunks of 256 tokens, f32 compute), with
#   - the KV cache in f32 (the reference), f16, q8 and q4 (groups 32 and 64,
#     asymmetric; q8 symmetric too), weights as stored (GGUF Q4_1 / Q8_0);
#   - the weight matrices requantized to q8 (groups 32 and 64) and q4 (group
#     32) in a weight pack, KV in f32. Requantizing a Q4_1 matrix to q8
#     dequantizes its Q4_1 values and quantizes them again; token_embd (Q8_0,
#     tied with the output) is requantized too.
# Prints one line per configuration: perplexity and its change against the f16
# KV run (the KV targets: q8 <= +0.5%, q4 <= +5%) and against the f32 run.
#
# Usage: scripts/accuracy_compression.sh [STRATA_BIN] [MODEL]
#   STRATA_BIN defaults to build/cli/strata; THREADS=n limits CPU threads.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/cli/strata}
MODEL=${2:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
TEXT=tests/data/text/ppl.txt
[[ -x $BIN ]] || { echo "error: $BIN is not built; run scripts/build.sh" >&2; exit 1; }
[[ -f $MODEL ]] || { echo "error: $MODEL is absent; run scripts/fetch-demo-model.sh" >&2; exit 1; }
PACKS=$(mktemp -d "${TMPDIR:-/tmp}/strata_accuracy.XXXXXX")
trap 'rm -rf "$PACKS"' EXIT
THREAD_ARGS=()
[[ -n ${THREADS:-} ]] && THREAD_ARGS=(--threads "$THREADS")

ppl() {  # args: extra strata flags; prints the perplexity
  "$BIN" perplexity --model "$MODEL" --text "$TEXT" "${THREAD_ARGS[@]}" "$@" 2>/dev/null |
    awk '/^ppl /{print $2}'
}

echo "# strata $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%Y-%m-%dT%H:%MZ)"
echo "# model $MODEL, text $TEXT, f32 compute, chunks of 256"
F32=$(ppl)
F16=$(ppl --compress-kv f16)
row() {  # name ppl
  awk -v n="$1" -v p="$2" -v f16="$F16" -v f32="$F32" \
    'BEGIN{printf "%-34s ppl %9.4f  %+6.2f%% vs KV f16  %+6.2f%% vs f32\n", n, p, 100*(p/f16-1), 100*(p/f32-1)}'
}
row "KV f32, weights Q4_1 (source)" "$F32"
row "KV f16" "$F16"
for g in 32 64; do
  row "KV q8 (q8a$g)" "$(ppl --compress-kv q8 --kv-group $g)"
  row "KV q8s (q8s$g, symmetric)" "$(ppl --compress-kv q8s --kv-group $g)"
  row "KV q4 (q4a$g)" "$(ppl --compress-kv q4 --kv-group $g)"
done
for w in "q8 32" "q8 64" "q4 32"; do
  set -- $w
  row "weights $1 (${1}a$2), KV f32" \
    "$(ppl --compress-weight "$1" --weight-group "$2" --offload-dir "$PACKS/$1$2")"
done
row "weights q8 (q8a32) + KV q8 (q8a32)" \
  "$(ppl --compress-weight q8 --weight-group 32 --offload-dir "$PACKS/q832" --compress-kv q8)"
