#!/usr/bin/env bash
# Speculative decoding by prompt lookup (--speculate ngram) against decoding
# without it, on prompts whose answers copy from their input: repeat,
# rewrite and summarise paragraphs of tests/data/text (chat prompts to the
# demo model), greedy. Per placement (weights in RAM; weights on disk, where
# a pass over the weights costs a disk read) and draft length it prints:
# decode tokens/s, total tokens/s, decode steps (passes over the weights),
# tokens per pass, the share of draft tokens accepted, the speed-up over no
# speculation, and how many records differ from the run without (expected
# 0 in f32; in bf16 a near tie can go the other way, as between batch sizes).
#
#   scripts/bench_speculation.sh [BUILD_DIR]
#   BATCH=16 GEN=96 DRAFTS="4 8" COMPUTE=f32 scripts/bench_speculation.sh
#
# Defaults: the demo model, 32 prompts, batch 16, 96 new tokens, drafts 4
# and 8, f32 compute. Needs an otherwise idle machine; about 3 minutes on 2
# cores. Output under OUT_DIR (default models/bench-speculation, git-ignored).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
out="${OUT_DIR:-$root/models/bench-speculation}"
model="${MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
batch="${BATCH:-16}"
gen="${GEN:-96}"
drafts="${DRAFTS:-4 8}"
compute="${COMPUTE:-f32}"

if [[ ! -d "$build" ]]; then
  echo "bench_speculation: no build directory $build; run scripts/build.sh or pass one" >&2
  exit 1
fi
if [[ ! -f "$model" ]]; then
  echo "bench_speculation: no model at $model; run scripts/fetch-demo-model.sh" >&2
  exit 1
fi
cmake --build "$build" --target strata -j"$(nproc)" >/dev/null
strata="$build/cli/strata"
mkdir -p "$out/runs" "$out/offload"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

# 32 prompts: paragraphs of the two texts, each asked to be repeated,
# rewritten or summarised.
python3 - "$root/tests/data/text" "$out/prompts.jsonl" <<'PY'
import json, sys
src, dst = sys.argv[1], sys.argv[2]
paras = []
for name in ("ppl.txt", "train.txt"):
    text = open(f"{src}/{name}", encoding="utf-8").read()
    for p in text.split("\n\n"):
        p = " ".join(p.split())
        if 200 <= len(p) <= 900:
            paras.append(p)
asks = ["Repeat the following text exactly:", "Rewrite the following text in plain words:",
        "Summarize the following text, quoting its key phrases:"]
with open(dst, "w", encoding="utf-8") as f:
    for i in range(32):
        f.write(json.dumps({"id": i, "prompt": f"{asks[i % 3]}\n\n{paras[i % len(paras)]}"}) + "\n")
PY

printf '\n%-12s %-6s %10s %10s %6s %9s %9s %8s %8s\n' weights drafts "decode" total steps \
  "tok/pass" accepted speedup differ
for place in ram disk; do
  if [[ $place == ram ]]; then pct=(100 0 100 0 100 0); else pct=(0 0 100 0 100 0); fi
  base=""
  for k in 0 $drafts; do
    name="$place-k$k"
    spec=(--speculate none)
    ((k > 0)) && spec=(--speculate ngram --speculate-tokens "$k")
    rm -f "$out/runs/$name.jsonl"
    "$strata" generate --model "$model" --prompts "$out/prompts.jsonl" --chat \
      --output "$out/runs/$name.jsonl" --max-new-tokens "$gen" --batch-size "$batch" \
      --compute-dtype "$compute" --percent "${pct[@]}" --offload-dir "$out/offload" "${spec[@]}" \
      --report "$out/runs/$name.report.json" >/dev/null 2>"$out/runs/$name.log"
    [[ -z $base ]] && base="$out/runs/$name"
    python3 - "$out/runs/$name" "$base" "$place" "$k" <<'PY'
import json, sys
run, base, place, k = sys.argv[1:5]
r, b = json.load(open(run + ".report.json")), json.load(open(base + ".report.json"))
recs = [json.loads(l) for l in open(run + ".jsonl")]
ref = [json.loads(l) for l in open(base + ".jsonl")]
differ = sum(x != y for x, y in zip(recs, ref))
decode = r["generated_tokens"] - r["n_prompts"]
steps = r["decode_steps"]
acc = f"{r['accepted_tokens'] / r['drafted_tokens']:.0%}" if r["drafted_tokens"] else "-"
print(f"{place:<12} {k:<6} {r['decode_tokens_per_s']:8.1f}/s {r['total_tokens_per_s']:8.1f}/s "
      f"{steps:6d} {decode / steps:9.2f} {acc:>9} "
      f"{r['decode_tokens_per_s'] / b['decode_tokens_per_s']:7.2f}x {differ:8d}")
PY
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
