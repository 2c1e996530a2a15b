#!/usr/bin/env bash
# The cost model against the engine on this machine: `strata bench` over a
# grid of placements, compressions, batch sizes and lengths, each run with
# this machine's profile (`--hardware`, measured first), printing the
# predicted and the measured prefill, decode and total throughput of every
# row with the error (measured / predicted - 1), then the median and the
# worst |error| of the totals.
#
#   scripts/validate_cost_model.sh [BUILD_DIR]
#   BIG=1 scripts/validate_cost_model.sh     # also the 3.2 GB random f16 model
#                                            # of scripts/bench_offload.sh
#   BIG=1 DEMO=0 scripts/validate_cost_model.sh   # that model's rows only
#
# Each row runs once to warm up, then three times (the report keeps the
# median: a shared virtual machine's speed can wander by 10-30% from one
# minute to the next).
# The demo model's grid takes about 3 minutes on a 2-core machine; BIG=1
# adds about 5 (and writes that model once). Numbers need an otherwise idle
# machine; the load average is printed before and after. Reports go to
# OUT_DIR (default models/validate-cost-model, which git ignores).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
out="${OUT_DIR:-$root/models/validate-cost-model}"
demo="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
big="${BIG_MODEL_DIR:-$root/models/bench-llama-3g}"

if [[ ! -d "$build" ]]; then
  echo "validate_cost_model: no build directory $build; run scripts/build.sh or pass one" >&2
  exit 1
fi
if [[ ! -f "$demo" ]]; then
  echo "validate_cost_model: no demo model at $demo; run scripts/fetch-demo-model.sh" >&2
  exit 1
fi
cmake --build "$build" --target strata strata_make_bench_model -j"$(nproc)" >/dev/null
strata="$build/cli/strata"
rm -rf "$out/reports"
mkdir -p "$out/reports" "$out/offload"

echo "# strata validate_cost_model  $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')  $(nproc) cores  load $(cut -d' ' -f1-3 /proc/loadavg)"
"$strata" --log-level warn profile --quick --disk-bytes 1G --offload-dir "$out/offload" \
  -o "$out/profile.yaml"

rows=()
# row NAME MODEL PROMPT GEN BATCH NUM_BATCHES [bench flags...]
row() {
  local name=$1 model=$2 prompt=$3 gen=$4 batch=$5 nb=$6
  shift 6
  local tag="${model##*/}"
  "$strata" --log-level error bench --model "$model" --prompt-len "$prompt" --gen-len "$gen" \
    --batch "$batch" --num-batches "$nb" --warmup 1 --repeats 3 --hardware "$out/profile.yaml" \
    --offload-dir "$out/offload/${tag%%.*}${OFFLOAD_SUFFIX:-}" --report "$out/reports/$name.json" \
    "$@" >/dev/null
  rows+=("$name")
  echo "  ran $name"
}

ram=(--percent 0 100 0 100 0 100)
half=(--percent 0 50 0 100 0 100)
disk=(--percent 0 0 0 100 0 100)
kv_disk=(--percent 0 100 0 0 0 100)
if [[ "${DEMO:-1}" == 1 ]]; then
  row demo-ram-b1-p32-g8 "$demo" 32 8 1 1 "${ram[@]}"
  row demo-ram-b8-p128-g32 "$demo" 128 32 8 1 "${ram[@]}"
  row demo-ram-b32-p128-g32 "$demo" 128 32 32 1 "${ram[@]}"
  row demo-ram-b8x4-p256-g16 "$demo" 256 16 8 4 "${ram[@]}"
  row demo-ram-b8-p1024-g8 "$demo" 1024 8 8 1 "${ram[@]}"
  row demo-ram-b8-p32-g64 "$demo" 32 64 8 1 "${ram[@]}"
  row demo-half-b8-p128-g32 "$demo" 128 32 8 1 "${half[@]}"
  row demo-disk-b8-p128-g32 "$demo" 128 32 8 1 "${disk[@]}"
  row demo-disk-b32x2-p128-g32 "$demo" 128 32 32 2 "${disk[@]}"
  row demo-kvdisk-b8-p256-g32 "$demo" 256 32 8 1 "${kv_disk[@]}"
  row demo-kvq8-b8-p256-g32 "$demo" 256 32 8 1 "${ram[@]}" --compress-kv q8
  row demo-kvq4-b8-p256-g32 "$demo" 256 32 8 1 "${ram[@]}" --compress-kv q4
  OFFLOAD_SUFFIX=-q4 row demo-disk-wq4-b8-p128-g32 "$demo" 128 32 8 1 "${disk[@]}" --compress-weight q4
  # half of every prompt a shared prefix: a prefix step, then the rest
  row demo-shared-b8-p256-g16 "$demo" 256 16 8 1 "${ram[@]}" --shared-prefix 128
  row demo-shared-kvdisk-b8-p256-g16 "$demo" 256 16 8 1 "${kv_disk[@]}" --shared-prefix 128
fi
if [[ "${BIG:-0}" == 1 ]]; then
  if [[ ! -f "$big/model.safetensors" ]]; then
    "$build/offload/strata_make_bench_model" --out "$big" --tokenizer-dir "$root/tests/data/models/llama"
  fi
  row big-ram-b8-p32-g8 "$big" 32 8 8 1 "${ram[@]}"
  row big-half-b8-p32-g8 "$big" 32 8 8 1 "${half[@]}"
  row big-disk-b16-p32-g8 "$big" 32 8 16 1 "${disk[@]}"
  row big-kvdisk-b16-p128-g8 "$big" 128 8 16 1 "${kv_disk[@]}"
fi
echo "# load after $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$out/reports" "${rows[@]}" <<'EOF'
import json, statistics, sys
folder, names = sys.argv[1], sys.argv[2:]
def err(m, p):
    return m / p - 1 if p else float("nan")
print(f"{'row':28} {'prefill pred/meas':>20} {'err':>6} {'decode pred/meas':>19} {'err':>6}"
      f" {'total pred/meas':>18} {'err':>6}  bound")
totals = []
for n in names:
    r = json.load(open(f"{folder}/{n}.json"))
    p = r.get("predicted")
    if not p:
        print(f"{n:28} no prediction in the report")
        continue
    cells = []
    for k in ("prefill_tokens_per_s", "decode_tokens_per_s", "total_tokens_per_s"):
        m, q = r.get(k, 0.0), p[k]
        cells.append(f"{q:8.1f} /{m:8.1f} {100 * err(m, q):+5.0f}%")
    totals.append(abs(err(r["total_tokens_per_s"], p["total_tokens_per_s"])))
    print(f"{n:28} {cells[0]:>28} {cells[1]:>27} {cells[2]:>26}  {p.get('bound', '')}")
if totals:
    print(f"total throughput |error|: median {100 * statistics.median(totals):.0f}%, "
          f"worst {100 * max(totals):.0f}% over {len(totals)} rows (targets: 10% and 20%)")
EOF
