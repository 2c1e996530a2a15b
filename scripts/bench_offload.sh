#!/usr/bin/env bash
# Offload benchmark. A random-weight Llama-shaped model of 3.2 GB in f16
# (24 layers, hidden 2048, gated FFN 8192; written once by
# strata_make_bench_model into models/, which git ignores) runs through
# `strata bench`:
#   1. with all weights on disk (--percent 0 0 0 100 0 100: streamed from the
#      weight pack with O_DIRECT, double-buffered, overlapped with compute);
#   2. fio on the same pack file, O_DIRECT, io_uring, in the same run: at the
#      disk I/O layer's block size and depth (1M x 16), the same with registered
#      buffers and files (as the engine registers its staging buffers), and
#      with large requests (16M x 16). Some disks (virtual ones especially)
#      deliver far more with more bytes in flight; the best of the three is
#      the disk's ceiling the targets are measured against;
#   3. with everything in RAM (the compute ceiling);
#   4. with --policy auto under a RAM budget below the model (AUTO_CPU_MEM),
#      so the search puts part of it on disk: predicted (from this machine's
#      profile, measured at the start: step 0) beside measured.
# It prints the numbers and the ratios the targets are about:
#   disk read bandwidth during run 1 (bytes / busy time of the load queue)
#     >= 85% of fio's best;
#   decode step of run 1 <= 1.15 x max(weight bytes per step / fio's best,
#     decode step of run 3);
#   |measured - predicted| total throughput of run 4 <= 25% of measured;
#   5. all weights on disk requantized to q4 (--compress-weight q4): bytes
#      read per step <= 0.3 x f16's, and the decode step time beside run 1's.
# Reports and the trace of run 1 go to OUT_DIR. O_DIRECT reads bypass the
# page cache, so no cache dropping is needed (or done).
#
#   scripts/bench_offload.sh [BUILD_DIR]
#   PROMPT_LEN=32 GEN_LEN=8 BATCH=8 REPEATS=2 AUTO_CPU_MEM=2G scripts/bench_offload.sh
#
# About 5 minutes on a 2-core machine with an NVMe disk (the first run also
# writes the model, the pack and this machine's profile). Numbers need an
# otherwise idle machine; the load average is printed before and after.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
model="${MODEL_DIR:-$root/models/bench-llama-3g}"
off="${OFFLOAD_DIR:-$root/models/bench-offload}"
out="${OUT_DIR:-$root/models/bench-offload-reports}"
prompt_len="${PROMPT_LEN:-32}"
gen_len="${GEN_LEN:-8}"
batch="${BATCH:-8}"
repeats="${REPEATS:-2}"
auto_cpu_mem="${AUTO_CPU_MEM:-2G}"

if [[ ! -d "$build" ]]; then
  echo "bench_offload: no build directory $build; run scripts/build.sh or pass one" >&2
  exit 1
fi
if ! command -v fio >/dev/null; then
  echo "bench_offload: fio is not installed; run scripts/install-deps.sh" >&2
  exit 1
fi
if (( gen_len < 2 )); then
  echo "bench_offload: GEN_LEN must be 2 or more (decode steps are measured)" >&2
  exit 1
fi
cmake --build "$build" --target strata strata_make_bench_model -j"$(nproc)" >/dev/null
mkdir -p "$out" "$off"
strata="$build/cli/strata"

echo "# strata bench_offload  $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')  $(nproc) cores  load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# offload dir $off on $(df -P "$off" | awk 'NR==2 {print $1}')"

if [[ ! -f "$model/model.safetensors" ]]; then
  "$build/offload/strata_make_bench_model" --out "$model" \
    --tokenizer-dir "$root/tests/data/models/llama"
fi

run=(--log-level warn bench --model "$model" --prompt-len "$prompt_len" --gen-len "$gen_len"
     --warmup 1 --repeats "$repeats")

echo "# 0. this machine's profile (for the prediction of run 4), measured first so that"
echo "#    the disk has settled from its writes before anything is timed"
"$strata" --log-level warn profile --quick --disk-bytes 1G --offload-dir "$off" -o "$out/profile.yaml"
grep -A1 "links.disk_to_cpu" "$out/profile.yaml" | sed 's/^#  */#    /'

echo "# 1. all weights on disk"
"$strata" "${run[@]}" --batch "$batch" --percent 0 0 0 100 0 100 --offload-dir "$off" \
  --report "$out/disk.json" --trace "$out/disk-trace.json"

echo "# 2. fio on the pack ($off/weights.bin): O_DIRECT, io_uring, sequential reads"
pack_bytes=$(stat -c %s "$off/weights.bin")
fio_run() {  # name fio-options...
  local name=$1
  shift
  fio --name=strata-pack --filename="$off/weights.bin" --readonly --direct=1 \
    --ioengine=io_uring --rw=read --size="$pack_bytes" "$@" \
    --output-format=json >"$out/fio-$name.json"
}
fio_run engine --bs=1M --iodepth=16
fio_run engine-fixed --bs=1M --iodepth=16 --fixedbufs=1 --registerfiles=1
fio_run large --bs=16M --iodepth=16 --fixedbufs=1 --registerfiles=1

echo "# 3. everything in RAM"
"$strata" "${run[@]}" --batch "$batch" --report "$out/ram.json"

echo "# 4. --policy auto with --cpu-mem $auto_cpu_mem"
# The batch stays that of runs 1 and 3 (the search would pick a far larger
# block for throughput); it chooses the placement under the budget.
"$strata" --log-level info bench --model "$model" --prompt-len "$prompt_len" \
  --gen-len "$gen_len" --warmup 1 --repeats "$repeats" --batch "$batch" --num-batches 1 \
  --policy auto --hardware "$out/profile.yaml" --cpu-mem "$auto_cpu_mem" --offload-dir "$off" \
  --report "$out/auto.json" 2>&1 |
  grep -E "policy auto|error" || true

echo "# 5. all weights on disk, requantized to q4 (--compress-weight q4, groups of 64; its own pack)"
"$strata" "${run[@]}" --batch "$batch" --percent 0 0 0 100 0 100 --offload-dir "$off-q4" \
  --compress-weight q4 --report "$out/disk-q4.json" | grep -E "decode|link|total  "

python3 - "$out" "$gen_len" <<'EOF'
import json, sys
out, gen = sys.argv[1], int(sys.argv[2])
disk = json.load(open(f"{out}/disk.json"))
ram = json.load(open(f"{out}/ram.json"))
auto = json.load(open(f"{out}/auto.json"))
fio_cfg = {"engine": "1M x 16", "engine-fixed": "1M x 16, registered buffers",
           "large": "16M x 16, registered buffers"}
fio_bws = {k: json.load(open(f"{out}/fio-{k}.json"))["jobs"][0]["read"]["bw_bytes"] / 1e9
           for k in fio_cfg}
fio_bw = max(fio_bws.values())
link = disk["links"]["disk->cpu"]
run_bw = link["gb_per_s"]
per_step = link["bytes"] / gen / 1e9          # every step reads the whole model
disk_step = disk["decode_s"] / (gen - 1)
ram_step = ram["decode_s"] / (gen - 1)
bound = max(per_step / fio_bw, ram_step)
print()
for k, label in fio_cfg.items():
    print(f"fio read (O_DIRECT, io_uring) {label:29s} {fio_bws[k]:8.3f} GB/s")
print(f"disk->cpu during the run (bytes / busy)     {run_bw:8.3f} GB/s   {100 * run_bw / fio_bw:5.1f}% of fio's best (target >= 85%)")
print(f"  load queue busy                           {100 * disk['queue_busy'].get('load', 0):7.1f} %   compute busy {100 * disk['queue_busy'].get('compute', 0):.1f} %")
print(f"weights read per step                       {per_step:8.3f} GB    / fio = {per_step / fio_bw:.3f} s")
print(f"decode step, all in RAM                     {ram_step:8.3f} s")
print(f"decode step, all weights on disk            {disk_step:8.3f} s   {disk_step / bound:5.2f} x max({per_step / fio_bw:.3f}, {ram_step:.3f}) (target <= 1.15)")
print(f"total, weights on disk / in RAM             {disk['total_tokens_per_s']:8.2f} / {ram['total_tokens_per_s']:.2f} tok/s")
q4 = json.load(open(f"{out}/disk-q4.json"))
q4_step_bytes = q4["links"]["disk->cpu"]["bytes"] / gen / 1e9
q4_step = q4["decode_s"] / (gen - 1)
print(f"weights q4 on disk: read per step            {q4_step_bytes:8.3f} GB   {q4_step_bytes / per_step:5.3f} x f16 (target <= 0.3)")
print(f"  decode step                               {q4_step:8.3f} s   {q4_step / disk_step:5.3f} x f16's; "
      f"bound max({q4_step_bytes / fio_bw:.3f}, {ram_step:.3f}) s")
pol = auto["policy"]
print(f"--policy auto: block {pol['block_size']} ({pol['gpu_batch_size']} x {pol['num_gpu_batches']}), "
      f"weights {100 * pol['weights']['disk']:.1f}% on disk, KV {100 * pol['kv_cache']['disk']:.1f}% on disk")
if "predicted" in auto:
    p = auto["predicted"]
    for k in ("prefill_tokens_per_s", "decode_tokens_per_s", "total_tokens_per_s"):
        m = auto.get(k, 0)
        print(f"  {k:22s} measured {m:8.2f}  predicted {p[k]:8.2f}  "
              f"|m - p| / m = {abs(m - p[k]) / m * 100 if m else float('nan'):5.1f}%"
              + ("   (target <= 25%)" if k == "total_tokens_per_s" else ""))
    print(f"  predicted bound {p.get('bound', '?')}")
    terms = p.get("decode_layer_terms_s", {})
    if terms:
        print("  predicted decode layer step: " +
              ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in terms.items()))
    if p.get("block_decode_s"):
        print(f"  decode of the block: measured {auto['decode_s']:.3f} s, predicted {p['block_decode_s']:.3f} s; "
              f"prefill: measured {auto['prefill_s']:.3f} s, predicted {p['block_prefill_s']:.3f} s")
else:
    print("  (no prediction in the report)")
EOF
echo "# reports in $out; trace of run 1: $out/disk-trace.json (open in ui.perfetto.dev)"
echo "# load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
