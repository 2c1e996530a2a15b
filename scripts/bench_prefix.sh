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
#   docs: a prompt file through `strata generate`: one system prompt (an
#         instruction and 150 words of a licence), then one of four
#         documents (450 words of another licence each), then one of 16
#         questions; blocks of BATCH: each document's group is a block, the
#         first computes the system prompt and its document, the others take
#         the system prompt's pages kept from the block before and compute
#         only their document (one run each, not the median of 2)
# Per workload and placement it prints total tokens/s with and without
# sharing, their ratio, prompt tokens submitted and computed, and the KV
# bytes not stored again.
#
#   scripts/bench_prefix.sh [BUILD_DIR]
#   MODEL=models/other.gguf BATCH=8 GEN=16 PLACES=ram scripts/bench_prefix.sh
#   MODEL=models/bench-prefix-llama scripts/bench_prefix.sh   # a model directory too
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
workloads="${WORKLOADS:-a b c page none docs}"

if [[ ! -d "$build" ]]; then
  echo "bench_prefix: no build directory $build; run scripts/build.sh or pass one" >&2
  exit 1
fi
if [[ ! -e "$model" ]]; then
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
    docs) python3 - "$out/docs.jsonl" <<'PY'
import json, sys
def words(name, n, skip):
    text = open(f"/usr/share/common-licenses/{name}", encoding="utf-8", errors="replace").read()
    return " ".join(text.split()[skip:skip + n])
system = "You are a careful legal assistant. Answer in one short sentence. " + words("Apache-2.0", 150, 0)
questions = ["Who may copy it?", "What must be kept?", "Is there a warranty?", "What about patents?",
             "Can it be sold?", "What is a derivative?", "Who is liable?", "What must a copy include?",
             "When does it end?", "Can terms change?", "What is source code?", "Is linking allowed?",
             "What is distribution?", "Who is the licensor?", "Are fees allowed?", "What happens on breach?"]
with open(sys.argv[1], "w") as f:
    for d, name in enumerate(["GPL-3", "MPL-2.0", "LGPL-2.1", "Artistic"]):
        doc = words(name, 450, 100)
        for q, question in enumerate(questions):
            prompt = f"{system}\n\nDocument:\n{doc}\n\nQuestion: {question}"
            f.write(json.dumps({"id": f"d{d}q{q}", "prompt": prompt}) + "\n")
PY
      ;;
    *) echo "bench_prefix: unknown workload $work (a, b, c, page, none, docs)" >&2; exit 1 ;;
  esac
  for place in $places; do
    if [[ $place == ram ]]; then pct=(100 0 100 0 100 0); else pct=(100 0 0 0 100 0); fi
    for mode in on off; do
      flag=()
      [[ $mode == off ]] && flag=(--no-prefix-sharing)
      run="$out/runs/$work-$place-$mode"
      if [[ $work == docs ]]; then
        rm -f "$run.jsonl" "$run.jsonl.partial"
        "$strata" generate --model "$model" --prompts "$out/docs.jsonl" --output "$run.jsonl" \
          --max-new-tokens "$gen" --batch-size "$batch" --compute-dtype "$compute" \
          --percent "${pct[@]}" --offload-dir "$out/offload" "${flag[@]}" \
          --report "$run.json" >/dev/null 2>"$run.log"
      else
        "$strata" bench --model "$model" --prompt-len "$len" --shared-prefix "$shared" \
          --gen-len "$gen" --batch "$batch" --compute-dtype "$compute" --percent "${pct[@]}" \
          --offload-dir "$out/offload" --warmup 0 --repeats 2 "${flag[@]}" \
          --report "$run.json" >/dev/null 2>"$run.log"
      fi
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
