#!/usr/bin/env bash
# Shared prompt prefixes: total throughput with prefix sharing (the default)
# against --no-prefix-sharing, on synthetic prompts (`strata bench
# --shared-prefix N`: every prompt of the block begins with the same N
# tokens), greedy, with the KV cache in RAM and on disk:
#   a: a 1024-token few-shot preamble + 32-token questions
#   b: a 200-token system prompt + 32-token requests
#   c: a 3072-token document + 32-token questions
#   page: 256-token prompts sharing one 16-token page (a short chat header:
#         what the extra prefix step costs where little is shared)
#   none: 256-token prompts sharing nothing (sharing changes nothing there)
# Per workload and placement it prints total tokens/s with and without
# sharing, their ratio, prompt tokens submitted and computed, and the KV
# bytes not stored again.
#
#   scripts/bench_prefix.sh [BUILD_DIR]
#   MODEL=models/other.gguf BATCH=8 GEN=16 PLACES=ram scripts/bench_prefix.sh
#
# Defaults: the demo model, batch 16 (one block of 16 prompts), 32 new
# tokens, f32 compute, both placements, the median of 2 runs. Needs an
# otherwise idle machine; about 5 minutes on 2 cores. Output under OUT_DIR
# (default models/bench-prefix, git-ignored).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
out="${OUT_DIR:-$root/models/bench-prefix}"
model="${MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
batch="${BATCH:-16}"
gen="${GEN:-32}"
places="${PLACES:-ram disk}"
compute="${COMPUTE:-f32}"
workloads="${WORKLOADS:-a b c page none}"

if [[ ! -d "$build" ]]; then
  echo "bench_prefix: no build directory $build; run scripts/build.sh or pass one" >&2
  exit 1
fi
if [[ ! -f "$model" ]]; then
  echo "bench_prefix: no model at $model; run scripts/fetch-demo-model.sh" >&2
  exit 1
fi
cmake --build "$build" --target strata -j"$(nproc)" >/dev/null
strata="$build/cli/strata"
mkdir -p "$out/runs" "$out/offload"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

printf '\n%-5s %-5s %12s %12s %7s %10s %10s %10s\n' work kv shared "not shared" ratio \
  submitted computed "KV saved"
for work in $workloads; do
  case $work in
    a) shared=1024 len=1056 ;;
    b) shared=200 len=232 ;;
    c) shared=3072 len=3104 ;;
    page) shared=16 len=256 ;;
    none) shared=0 len=256 ;;
    *) echo "bench_prefix: unknown workload $work (a, b, c, page, none)" >&2; exit 1 ;;
  esac
  for place in $places; do
    if [[ $place == ram ]]; then pct=(100 0 100 0 100 0); else pct=(100 0 0 0 100 0); fi
    for mode in on off; do
      flag=()
      [[ $mode == off ]] && flag=(--no-prefix-sharing)
      "$strata" bench --model "$model" --prompt-len "$len" --shared-prefix "$shared" \
        --gen-len "$gen" --batch "$batch" --compute-dtype "$compute" --percent "${pct[@]}" \
        --offload-dir "$out/offload" --warmup 0 --repeats 2 "${flag[@]}" \
        --report "$out/runs/$work-$place-$mode.json" >/dev/null 2>"$out/runs/$work-$place-$mode.log"
    done
    python3 - "$out/runs/$work-$place" "$work" "$place" <<'PY'
import json, sys
run, work, place = sys.argv[1:4]
on, off = (json.load(open(f"{run}-{m}.json")) for m in ("on", "off"))
print(f"{work:<5} {place:<5} {on['total_tokens_per_s']:10.1f}/s {off['total_tokens_per_s']:10.1f}/s "
      f"{on['total_tokens_per_s'] / off['total_tokens_per_s']:6.2f}x {on['prompt_tokens']:10d} "
      f"{on['prefill_tokens_computed']:10d} {on['kv_shared_bytes'] / 2**20:8.1f} MiB")
PY
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
