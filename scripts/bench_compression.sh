#!/usr/bin/env bash
# What compression saves where the disk is the bound. The demo model with
# every weight on disk (--percent 0 0 ...: each step reads every layer from
# the weight pack with O_DIRECT), one sequence, so the reads, not compute,
# bound a step: weights as f16 (an f16 copy of the demo model), requantized
# to q8 and to q4 (--compress-weight, groups of 64). Then the KV cache on disk
# (f16, q8, q4). For each: bytes read per step from the report's disk->cpu
# link, against f16, and the decode step time, against f16.
#
# The f16 copy (every tensor of the GGUF dequantized and stored as f16, 257 MB)
# is written once with the gguf package of the fixtures' virtual environment
# (scripts/make-venv.sh) into $WORK. Targets: q4 weights read <= 0.3x the f16
# bytes per step, and the step time falls with them while the disk is the bound.
#
# Usage: scripts/bench_compression.sh [STRATA_BIN]   (WORK=dir, THREADS=n)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/cli/strata}
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
WORK=${WORK:-${TMPDIR:-/tmp}/strata_bench_compression}
[[ -x $BIN ]] || { echo "error: $BIN is not built; run scripts/build.sh" >&2; exit 1; }
[[ -f $MODEL ]] || { echo "error: $MODEL is absent; run scripts/fetch-demo-model.sh" >&2; exit 1; }
[[ -x .venv/bin/python ]] || { echo "error: .venv is missing; run scripts/make-venv.sh" >&2; exit 1; }
mkdir -p "$WORK"
F16="$WORK/SmolLM2-135M-Instruct.f16.gguf"
if [[ ! -f $F16 ]]; then
  echo "# writing $F16 (the demo model's tensors as f16)"
  .venv/bin/python - "$MODEL" "$F16.tmp" <<'EOF'
import sys, numpy as np, gguf
src, dst = sys.argv[1], sys.argv[2]
r = gguf.GGUFReader(src)
f = r.fields['general.architecture']
w = gguf.GGUFWriter(dst, bytes(f.parts[f.data[0]]).decode())
S = gguf.GGUFValueType
def text(part): return bytes(part).decode('utf-8', errors='surrogateescape')
for name, f in r.fields.items():
    if name.startswith('GGUF.') or name == 'general.architecture': continue
    t = f.types[0]
    if t == S.ARRAY:
        sub = f.types[1]
        val = [text(f.parts[i]) if sub == S.STRING else f.parts[i].tolist()[0] for i in f.data]
        w.add_key_value(name, val, t, sub_type=sub)
    else:
        w.add_key_value(name, text(f.parts[f.data[0]]) if t == S.STRING else
                        f.parts[f.data[0]].tolist()[0], t)
for t in r.tensors:
    x = gguf.quants.dequantize(t.data, t.tensor_type).reshape([int(n) for n in reversed(t.shape)])
    w.add_tensor(t.name, x.astype(np.float16 if x.ndim >= 2 else np.float32))
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
EOF
  mv "$F16.tmp" "$F16"
fi
THREAD_ARGS=()
[[ -n ${THREADS:-} ]] && THREAD_ARGS=(--threads "$THREADS")

GEN=9  # steps per run: the prefill and 8 decode steps, each reading every weight once
run() {  # name json-out model extra-flags...
  local name=$1 out=$2 model=$3
  shift 3
  "$BIN" bench --model "$model" --prompt-len 16 --gen-len $GEN --batch 1 --warmup 1 \
    --repeats 3 --compute-dtype bf16 "${THREAD_ARGS[@]}" --report "$out" "$@" >/dev/null 2>&1 ||
    { echo "error: strata bench failed for $name" >&2; exit 1; }
}
row() {  # name json base-json
  python3 - "$@" <<'EOF'
import json, sys
name, path, base = sys.argv[1:4]
def load(p):
    j = json.load(open(p))
    link = j["links"].get("disk->cpu", {"bytes": 0, "busy_s": 0})
    steps = j["generated_tokens"] // j["n_prompts"]
    return (link["bytes"] / steps, j["decode_s"] / (steps - 1), j["queue_busy"].get("load", 0))
b, t, busy = load(path)
b0, t0, _ = load(base)
print(f"{name:<26} {b / 2**20:9.1f} MiB/step  {b / b0:5.3f}x f16   decode step {1e3 * t:7.2f} ms"
      f"  {t / t0:5.3f}x f16   load queue busy {100 * busy:5.1f}%")
EOF
}

echo "# strata $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)"
echo "# weights on disk (--percent 0 0 0 100 0 100), 1 sequence, prompt 16, $GEN steps, median of 3"
run f16 "$WORK/w_f16.json" "$F16" --percent 0 0 0 100 0 100 --offload-dir "$WORK/w_f16"
run q8 "$WORK/w_q8.json" "$F16" --percent 0 0 0 100 0 100 --offload-dir "$WORK/w_q8" \
  --compress-weight q8 --weight-group 64
run q4 "$WORK/w_q4.json" "$F16" --percent 0 0 0 100 0 100 --offload-dir "$WORK/w_q4" \
  --compress-weight q4 --weight-group 64
row "weights f16" "$WORK/w_f16.json" "$WORK/w_f16.json"
row "weights q8 (q8a64)" "$WORK/w_q8.json" "$WORK/w_f16.json"
row "weights q4 (q4a64)" "$WORK/w_q4.json" "$WORK/w_f16.json"

echo "# KV cache on disk (--percent 0 100 0 0 0 100), weights in RAM, 8 sequences, prompt 128"
for kv in f16 q8 q4; do
  "$BIN" bench --model "$MODEL" --prompt-len 128 --gen-len $GEN --batch 8 --warmup 1 --repeats 3 \
    --compute-dtype bf16 "${THREAD_ARGS[@]}" --percent 0 100 0 0 0 100 --offload-dir "$WORK/kv" \
    --compress-kv $kv --report "$WORK/kv_$kv.json" >/dev/null 2>&1 ||
    { echo "error: strata bench failed for KV $kv" >&2; exit 1; }
done
row "KV f16" "$WORK/kv_f16.json" "$WORK/kv_f16.json"
row "KV q8 (q8a32)" "$WORK/kv_q8.json" "$WORK/kv_f16.json"
row "KV q4 (q4a32)" "$WORK/kv_q4.json" "$WORK/kv_f16.json"
