#!/usr/bin/env bash
# Long-context decode on this machine: the KV cache in RAM and on disk.
#
# First fio on a file in the offload directory (the disk's best read
# pattern among sequential 1 MiB and 4 MiB requests at depth 32 and random
# 1 MiB at depth 32, O_DIRECT, io_uring; again at the end), then `strata bench` per context
# length with the KV cache all in RAM and all on disk (weights in RAM),
# dense and with each sparse budget (--sparse-budget, QUEST), printing per
# row: the KV bytes the disk link read per decode step, the decode step, the
# read rate while the link was busy and its share of fio's best, the step
# against its ceiling: KV bytes per step / fio's rate (the step can be no
# faster than reading its KV once), and with a budget and KV on disk the
# share of selected pages the last step's selection had prefetched and the
# time compute waited for the others.
#
#   scripts/bench_long_context.sh [BUILD_DIR]
#   CONTEXTS="1024 4096" BATCH=8 GEN=16 BUDGETS="0 512" scripts/bench_long_context.sh
#
# Defaults: the demo model, batch 8, contexts 2048 and 4096, 16 new tokens,
# budgets 0 (dense) and 512.
# A 4096-token row takes about 2 minutes on a 2-core machine (the prefill);
# numbers need an otherwise idle machine. Reports go to OUT_DIR (default
# models/bench-long-context, which git ignores). fio is installed with
# apt-get when missing (it is a benchmark tool, not a dependency of the build).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
out="${OUT_DIR:-$root/models/bench-long-context}"
model="${MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
contexts="${CONTEXTS:-2048 4096}"
batch="${BATCH:-8}"
gen="${GEN:-16}"
budgets="${BUDGETS:-0 512}"

if [[ ! -d "$build" ]]; then
  echo "bench_long_context: no build directory $build; run scripts/build.sh or pass one" >&2
  exit 1
fi
if [[ ! -f "$model" ]]; then
  echo "bench_long_context: no model at $model; run scripts/fetch-demo-model.sh" >&2
  exit 1
fi
if ! command -v fio >/dev/null; then
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  $sudo apt-get install -y --no-install-recommends fio >/dev/null
fi
cmake --build "$build" --target strata -j"$(nproc)" >/dev/null
strata="$build/cli/strata"
mkdir -p "$out/reports" "$out/offload"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

# fio's best read rate on the offload directory's file system (bytes/s).
fio_rate() {
  fio --name=kv --filename="$out/offload/fio.dat" --size=2G --direct=1 --ioengine=io_uring \
    --runtime=5 --time_based --output-format=json "$@" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0]["read"]["bw_bytes"])'
}
# Prints each pattern's rate; sets `best` to the fastest seen so far.
best=0
fio_best() {
  local args r
  for args in "--rw=read --bs=1M --iodepth=32" "--rw=read --bs=4M --iodepth=32" \
    "--rw=randread --bs=1M --iodepth=32"; do
    # shellcheck disable=SC2086
    r=$(fio_rate $args)
    printf 'fio %-34s %6.2f GB/s\n' "$args" "$(python3 -c "print($r / 1e9)")"
    ((r > best)) && best=$r
  done
  rm -f "$out/offload/fio.dat"
}
fio_best

printf '\n%-8s %-5s %-5s %-6s %10s %10s %10s %8s %10s %8s %9s %8s\n' context batch kv budget \
  "KV/step" step "read" "of fio" ceiling "step/ceil" prefetched stall
for ctx in $contexts; do
  for kv in ram disk; do
    if [[ $kv == ram ]]; then pct=(100 0 0 100 100 0); else pct=(100 0 0 0 100 0); fi
    for budget in $budgets; do
      name="ctx${ctx}-b${batch}-${kv}-s${budget}"
      "$strata" bench --model "$model" --prompt-len "$ctx" --gen-len "$gen" --batch "$batch" \
        --warmup 0 --repeats 1 --percent "${pct[@]}" --offload-dir "$out/offload" \
        --sparse-budget "$budget" --report "$out/reports/$name.json" \
        >/dev/null 2>"$out/reports/$name.log"
      python3 - "$out/reports/$name.json" "$ctx" "$batch" "$kv" "$gen" "$best" "$budget" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
ctx, batch, kv, gen, best = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
budget = sys.argv[7] if sys.argv[7] != "0" else "dense"
step = r["decode_s"] / (gen - 1)
link = r.get("links", {}).get("disk->cpu")
row = f"{ctx:<8} {batch:<5} {kv:<5} {budget:<6} "
if link is None:
    print(row + f"{'-':>10} {step * 1e3:8.1f}ms {'-':>10} {'-':>8} {'-':>10} {'-':>8} {'-':>9} {'-':>8}")
else:
    per_step = link["bytes"] / (gen - 1)
    ceil = per_step / best
    sel = r.get("sparse_prefetch_hits", 0) + r.get("sparse_misses", 0)
    hit = f"{r['sparse_prefetch_hits'] / sel:.1%}" if sel else "-"
    stall = f"{r['sparse_stall_s'] / (gen - 1) * 1e3:.1f}ms" if sel else "-"
    print(row + f"{per_step / 2**20:7.1f}MiB {step * 1e3:8.1f}ms "
          f"{link['gb_per_s']:6.2f}GB/s {link['gb_per_s'] * 1e9 / best:7.0%} "
          f"{ceil * 1e3:8.1f}ms {step / ceil:7.2f}x {hit:>9} {stall:>8}")
EOF
    done
  done
done
echo
echo "fio again (a virtual disk's rate wanders: the ratios above use the best before them)"
fio_best
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
