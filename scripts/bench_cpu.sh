#!/usr/bin/env bash
# CPU engine benchmark: SmolLM2-135M at batch 1, 8 and 32 (prompt 128, gen 32),
# prefill and decode tokens/s beside this machine's ceilings measured in the
# same run (tests/offload/bench_engine.cpp): prefill GFLOP/s against a large
# oneDNN matmul in the same compute dtype, and the decode step time against
# the memory-bandwidth bound (weights + KV read per step / memcpy bandwidth).
# Then the same workload end to end through `strata bench` (driver, sampling,
# report) for reference.
#
#   scripts/bench_cpu.sh [BUILD_DIR] [extra strata_bench_engine options]
#   MODEL=path COMPUTE="bf16 f32" BATCHES=1,8,32 scripts/bench_cpu.sh
#
# Numbers need an otherwise idle machine: a team of OpenMP threads waits for
# its slowest member at every region, so another busy process costs decode
# (hundreds of short regions per step) far more than its share of a core.
# The load average is printed before and after; rerun when it was high.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
shift || true
model="${MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
computes="${COMPUTE:-bf16 f32}"
batches="${BATCHES:-1,8,32}"
prompt_len="${PROMPT_LEN:-128}"
gen_len="${GEN_LEN:-32}"

if [[ ! -f "$model" ]]; then
  echo "bench_cpu: $model is absent; run scripts/fetch-demo-model.sh first" >&2
  exit 1
fi
if [[ ! -d "$build" ]]; then
  echo "bench_cpu: no build directory $build; run scripts/build.sh or pass one" >&2
  exit 1
fi
cmake --build "$build" --target strata_bench_engine strata -j"$(nproc)" >/dev/null

echo "# strata bench_cpu  $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')  $(nproc) cores  load $(cut -d' ' -f1-3 /proc/loadavg)"
for c in $computes; do
  echo
  "$build/tests/offload/strata_bench_engine" --model "$model" --batch "$batches" \
    --prompt-len "$prompt_len" --gen-len "$gen_len" --compute "$c" --reps 3 "$@"
done
echo
echo "# end to end: strata bench --batch 32 (bf16 where native)"
"$build/cli/strata" --log-level warn bench --model "$model" --prompt-len "$prompt_len" \
  --gen-len "$gen_len" --batch 32 --repeats 3
echo "# load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
