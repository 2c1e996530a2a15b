#!/usr/bin/env bash
# The GPU check, run once on a machine with an NVIDIA GPU: builds the CUDA
# backend for the GPU present (its compute capability only, -j$(nproc)), runs
# every test labelled `cuda` (and the CPU tests of the CUDA host logic), the
# host<->device bandwidth benchmark, a decode step with the weights streamed
# from pinned RAM against the all-on-GPU step (strata bench --device cuda on a
# random-weight 3.2 GB Llama-shaped f16 model it writes), and prints a short
# table. Builds only the targets these need, in build-device/. Meant to finish within 8 minutes on
# a fresh 16-core machine with the Debian packages of scripts/install-deps.sh
# and the CUDA toolkit (nvcc) installed.
#
#   scripts/device-check.sh [BUILD_DIR]        (default build-device)
#
# Exit status: 0 when every test passed, 1 when a test failed, 2 when the
# check could not run (no GPU, no toolkit, configure or build failure).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
build=${1:-build-device}
log_dir="$build/device-check"
t_start=$(date +%s)

say() { printf 'device-check: %s\n' "$*"; }
die() { say "$*"; exit 2; }

# ---- the GPU and the toolkit ----
command -v nvidia-smi >/dev/null || die "nvidia-smi not found: no NVIDIA driver on this machine"
gpu_line=$(nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n1)
[ -n "$gpu_line" ] || die "nvidia-smi lists no GPU"
gpu_name=$(echo "$gpu_line" | cut -d, -f1 | sed 's/^ *//;s/ *$//')
cap=$(echo "$gpu_line" | cut -d, -f2 | tr -d ' ')
arch=${cap/./}
[[ "$arch" =~ ^[0-9]+$ ]] || die "could not read the compute capability from nvidia-smi ('$gpu_line')"
if ! command -v nvcc >/dev/null; then
  for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
    [ -x "$d/nvcc" ] && export PATH="$d:$PATH" && break
  done
fi
command -v nvcc >/dev/null || die "nvcc not found: install the CUDA toolkit (or put its bin/ on PATH)"
nvcc_version=$(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
say "GPU: $gpu_line; building for sm_$arch with nvcc $nvcc_version"

# ---- configure and build only what the checks need ----
./scripts/install-deps.sh >/dev/null 2>&1 || say "install-deps.sh could not install missing packages (configure will say which)"
mkdir -p "$log_dir"
jobs=$(nproc)
if ! cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" -DBUILD_TESTING=ON >"$log_dir/configure.log" 2>&1; then
  tail -n 30 "$log_dir/configure.log"
  die "configure failed (log: $log_dir/configure.log)"
fi
targets=(test_cuda_ops test_cuda_offload test_cuda_engine test_cuda_host test_cuda_offload_host
         strata_bench_cuda_copy strata strata_make_bench_model)
t_build0=$(date +%s)
if ! cmake --build "$build" -j"$jobs" --target "${targets[@]}" >"$log_dir/build.log" 2>&1; then
  grep -E "error|Error" "$log_dir/build.log" | head -n 30
  die "build failed (log: $log_dir/build.log)"
fi
build_s=$(( $(date +%s) - t_build0 ))
say "built ${targets[*]} in ${build_s}s"

# ---- tests ----
count() { grep -cE "Test +#[0-9]+: .*$1" "$2" || true; }
ctest --test-dir "$build" -L cuda -j "$(( jobs < 8 ? jobs : 8 ))" --timeout 300 \
  --output-on-failure >"$log_dir/ctest-cuda.log" 2>&1
cuda_rc=$?
ctest --test-dir "$build" -L cpu -R '^(Numeric|Dispatch|LaunchPlan|CudaDevice|PinnedHostAllocator)\.' \
  -j "$jobs" --timeout 120 --output-on-failure >"$log_dir/ctest-cpu.log" 2>&1
cpu_rc=$?
c_pass=$(count 'Passed' "$log_dir/ctest-cuda.log")
c_skip=$(count 'Skipped' "$log_dir/ctest-cuda.log")
c_fail=$(grep -cE "Test +#[0-9]+: .*\*\*\*(Failed|Exception|Timeout|Not Run)" "$log_dir/ctest-cuda.log" || true)
h_pass=$(count 'Passed' "$log_dir/ctest-cpu.log")
h_fail=$(grep -cE "Test +#[0-9]+: .*\*\*\*(Failed|Exception|Timeout|Not Run)" "$log_dir/ctest-cpu.log" || true)

# ---- bandwidth: our pinned copy path beside plain cudaMemcpyAsync ----
bench_out=$("$build/offload/strata_bench_cuda_copy" --size 256M --repeats 10 2>"$log_dir/bench.err")
bench_rc=$?
echo "$bench_out" >"$log_dir/bench.log"
val() { echo "$bench_out" | sed -n "s/.*RESULT.* $1=\([0-9.]*\).*/\1/p; s/^RESULT $1=\([0-9.]*\).*/\1/p" | head -n1; }
ours_h2d=$(val ours_h2d); ours_d2h=$(val ours_d2h); plain_h2d=$(val plain_h2d); plain_d2h=$(val plain_d2h)
page_h2d=$(val pageable_h2d); page_d2h=$(val pageable_d2h); duplex=$(val ours_duplex)

# ---- decode step with weights streamed from pinned RAM ----
# Batch 8, prompt 32, 8 new tokens: every step reads every column's weights,
# all of them from pinned RAM (--percent 0 100 100 0 100 0) or none (all on
# the GPU). Target: streamed step <= 1.15 x max(weight bytes / plain pinned
# h2d GB/s, all-on-GPU step).
model="$build/device-check/bench-model"
decode_note=""
if [ ! -f "$model/model.safetensors" ]; then
  "$build/offload/strata_make_bench_model" --out "$model" --tokenizer-dir tests/data/models/llama \
    >"$log_dir/make-model.log" 2>&1 || decode_note="could not write the bench model ($log_dir/make-model.log)"
fi
if [ -z "$decode_note" ]; then
  run=("$build/cli/strata" --log-level warn bench --device cuda --model "$model" --prompt-len 32
       --gen-len 8 --batch 8 --warmup 1 --repeats 1)
  if "${run[@]}" --report "$log_dir/decode-gpu.json" >"$log_dir/decode-gpu.log" 2>&1 &&
     "${run[@]}" --percent 0 100 100 0 100 0 --report "$log_dir/decode-pinned.json" \
       >"$log_dir/decode-pinned.log" 2>&1; then
    decode_note=$(python3 - "$log_dir" "${plain_h2d:-0}" <<'EOF'
import json, sys
d, h2d = sys.argv[1], float(sys.argv[2])
gpu = json.load(open(f"{d}/decode-gpu.json"))
pin = json.load(open(f"{d}/decode-pinned.json"))
gen = 8
gpu_step = gpu["decode_s"] / (gen - 1)
pin_step = pin["decode_s"] / (gen - 1)
link = pin.get("links", {}).get("cpu->gpu", {})
per_step = link.get("bytes", 0) / gen / 1e9
xfer = per_step / h2d if h2d > 0 else float("nan")
bound = max(xfer, gpu_step)
print(f"{pin_step * 1e3:.1f} ms = {pin_step / bound:.2f} x max({xfer * 1e3:.1f} ms transfer of "
      f"{per_step:.2f} GB at {h2d:.1f} GB/s, {gpu_step * 1e3:.1f} ms all on GPU) (target <= 1.15); "
      f"cpu->gpu during the run {link.get('gb_per_s', 0):.1f} GB/s")
EOF
) || decode_note="could not read the reports in $log_dir"
  else
    decode_note="strata bench failed (logs: $log_dir/decode-*.log): $(tail -n 1 "$log_dir/decode-pinned.log" "$log_dir/decode-gpu.log" 2>/dev/null | grep -v '^==>' | grep . | head -n 1)"
  fi
fi

# ---- the table ----
total_s=$(( $(date +%s) - t_start ))
echo
echo "Strata device check — $gpu_name (sm_$arch), nvcc $nvcc_version, commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u +%Y-%m-%dT%H:%MZ)"
printf '%-44s %s\n' "check" "result"
printf '%-44s %s\n' "--------------------------------------------" "------------------------------------------------"
printf '%-44s %s\n' "build (sm_$arch, -j$jobs)" "${build_s}s"
printf '%-44s %s\n' "ctest -L cuda" "$c_pass passed, $c_fail failed, $c_skip skipped (log: $log_dir/ctest-cuda.log)"
printf '%-44s %s\n' "CPU tests of the CUDA host logic" "$h_pass passed, $h_fail failed"
if [ "$bench_rc" -eq 0 ] && [ -n "$ours_h2d" ]; then
  printf '%-44s %s\n' "host->device GB/s: strata / plain pinned" "$ours_h2d / $plain_h2d (pageable: $page_h2d)"
  printf '%-44s %s\n' "device->host GB/s: strata / plain pinned" "$ours_d2h / $plain_d2h (pageable: $page_d2h)"
  printf '%-44s %s\n' "both directions at once, strata GB/s" "$duplex"
else
  printf '%-44s %s\n' "host<->device bandwidth" "benchmark failed (rc $bench_rc; $log_dir/bench.err)"
fi
printf '%-44s %s\n' "decode step, weights from pinned RAM" "$decode_note"
printf '%-44s %s\n' "total time" "${total_s}s"
echo
if [ "$cuda_rc" -ne 0 ] || [ "$cpu_rc" -ne 0 ] || [ "${c_fail:-0}" -ne 0 ]; then
  say "failures: see the logs above; the failing tests:"
  grep -E "\*\*\*(Failed|Exception|Timeout|Not Run)" "$log_dir"/ctest-*.log | head -n 40
  exit 1
fi
exit 0
