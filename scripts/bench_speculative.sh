#!/usr/bin/env bash
# Speculative decoding against decoding without it, greedy, on two workloads
# of chat prompts to the demo model, with two kinds of drafts:
#   ngram: prompt lookup (--speculate ngram);
#   model: a draft model (--speculate model --draft-model DRAFT_MODEL; by
#          default the demo file itself, its weights resident in RAM while
#          the target's come from where --percent puts them);
# and two workloads:
#   copy: repeat a paragraph of tests/data/text exactly, or list its
#         sentences (the answer copies from the prompt: prompt lookup's case);
#   open: open-ended questions (little to copy: what speculation costs).
# Per workload, placement (weights in RAM; weights on disk, where a pass over
# the weights is a disk read), draft kind and length it prints: decode
# tokens/s, total tokens/s, decode steps (passes over the weights), tokens
# per pass, the share of draft tokens accepted, the total throughput over
# the run without speculation, and how many records differ from that run (0
# expected in f32; in bf16 a near tie can go the other way, as between
# batch sizes).
#
#   scripts/bench_speculative.sh [BUILD_DIR]
#   BATCH=4 PLACES=disk GEN=96 DRAFTS="4 8" KINDS="ngram model" COMPUTE=f32 \
#     DRAFT_MODEL=path scripts/bench_speculative.sh
#
# Defaults: the demo model, 32 prompts per workload, batch 16, 96 new
# tokens, drafts 4 and 8 of both kinds, f32 compute, both placements. (At
# batch 16 on two cores a verification step's compute is about a disk pass
# of this small model; at batch 4 the disk is the bound. The demo model as
# its own draft costs a pass of the same size per draft token: it shows
# acceptance and the mechanism, not the gain of a draft model many times
# smaller than its target.) Needs an otherwise idle machine; about 12
# minutes on 2 cores. Output under OUT_DIR (default
# models/bench-speculative, git-ignored).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
out="${OUT_DIR:-$root/models/bench-speculative}"
model="${MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
batch="${BATCH:-16}"
gen="${GEN:-96}"
drafts="${DRAFTS:-4 8}"
places="${PLACES:-ram disk}"
kinds="${KINDS:-ngram model}"
draft_model="${DRAFT_MODEL:-$model}"
compute="${COMPUTE:-f32}"

if [[ ! -d "$build" ]]; then
  echo "bench_speculative: no build directory $build; run scripts/build.sh or pass one" >&2
  exit 1
fi
if [[ ! -f "$model" ]]; then
  echo "bench_speculative: no model at $model; run scripts/fetch-demo-model.sh" >&2
  exit 1
fi
cmake --build "$build" --target strata -j"$(nproc)" >/dev/null
strata="$build/cli/strata"
mkdir -p "$out/runs" "$out/offload"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

# 32 prompts per workload.
python3 - "$root/tests/data/text" "$out" <<'PY'
import json, sys
src, dst = sys.argv[1], sys.argv[2]
paras = []
for name in ("ppl.txt", "train.txt"):
    text = open(f"{src}/{name}", encoding="utf-8").read()
    for p in text.split("\n\n"):
        p = " ".join(p.split())
        if 200 <= len(p) <= 900:
            paras.append(p)
asks = ["Repeat the following text exactly:", "List the sentences of the following text, one per line:"]
topics = ["the sea", "a library", "winter", "a train journey", "bees", "the moon", "a market",
          "mountains"]
opens = ["Write a short poem about {}.", "Tell a short story about {}.",
         "Give three tips for someone who loves {}.", "Why do people like {}?"]
with open(f"{dst}/copy.jsonl", "w", encoding="utf-8") as f:
    for i in range(32):
        f.write(json.dumps({"id": i, "prompt": f"{asks[i % 2]}\n\n{paras[i % len(paras)]}"}) + "\n")
with open(f"{dst}/open.jsonl", "w", encoding="utf-8") as f:
    for i in range(32):
        f.write(json.dumps({"id": i, "prompt": opens[i % 4].format(topics[i // 4])}) + "\n")
PY

printf '\n%-5s %-6s %-7s %10s %10s %6s %9s %9s %8s %7s\n' work weights drafts "decode" total \
  steps "tok/pass" accepted speedup differ
for work in copy open; do
  for place in $places; do
    if [[ $place == ram ]]; then pct=(100 0 100 0 100 0); else pct=(0 0 100 0 100 0); fi
    base=""
    runs=(none)
    for kind in $kinds; do for k in $drafts; do runs+=("$kind$k"); done; done
    for run in "${runs[@]}"; do
      name="$work-$place-$run"
      k="${run//[a-z]/}"
      case $run in
        none) spec=(--speculate none) ;;
        ngram*) spec=(--speculate ngram --speculate-tokens "$k") ;;
        model*) spec=(--speculate model --draft-model "$draft_model" --speculate-tokens "$k") ;;
      esac
      rm -f "$out/runs/$name.jsonl"
      "$strata" generate --model "$model" --prompts "$out/$work.jsonl" --chat \
        --output "$out/runs/$name.jsonl" --max-new-tokens "$gen" --batch-size "$batch" \
        --compute-dtype "$compute" --percent "${pct[@]}" --offload-dir "$out/offload" \
        "${spec[@]}" --report "$out/runs/$name.report.json" >/dev/null 2>"$out/runs/$name.log"
      [[ -z $base ]] && base="$out/runs/$name"
      python3 - "$out/runs/$name" "$base" "$work" "$place" "$run" <<'PY'
import json, sys
run, base, work, place, k = sys.argv[1:6]
r, b = json.load(open(run + ".report.json")), json.load(open(base + ".report.json"))
recs = [json.loads(l) for l in open(run + ".jsonl")]
ref = [json.loads(l) for l in open(base + ".jsonl")]
differ = sum(x != y for x, y in zip(recs, ref))
decode = r["generated_tokens"] - r["n_prompts"]
steps = r["decode_steps"]
acc = f"{r['accepted_tokens'] / r['drafted_tokens']:.0%}" if r["drafted_tokens"] else "-"
print(f"{work:<5} {place:<6} {k:<7} {r['decode_tokens_per_s']:8.1f}/s "
      f"{r['total_tokens_per_s']:8.1f}/s {steps:6d} {decode / steps:9.2f} {acc:>9} "
      f"{r['total_tokens_per_s'] / b['total_tokens_per_s']:7.2f}x {differ:7d}")
PY
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
