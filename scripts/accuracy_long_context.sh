#!/usr/bin/env bash
# Accuracy of sparse decode attention (--sparse-budget, QUEST) on the demo
# model (models/SmolLM2-135M-Instruct.Q4_1.gguf), dense as the reference:
#
#   ppl      Long-text perplexity in decode mode: the licence texts every
#            Debian system ships in /usr/share/common-licenses (base-files:
#            GPL-3, GPL-2, LGPL-2.1, GFDL-1.3, MPL-2.0, Apache-2.0; 131 KB,
#            28.6K tokens), in chunks of CTX tokens, the first CTX-1024 of each
#            chunk as a prompt and the last 1024 fed one token at a time
#            through the decode path (strata perplexity --decode-from), so the
#            budget applies to every scored token. Contexts 4096 and 8192;
#            dense, then budgets 256/512/1024/2048 with the first page kept,
#            then the same budgets with the first page scored like the others
#            (--sparse-score-first). Target: <= +1% at budget 1024.
#   passkey  Passkey retrieval: a 5-digit key hidden at 10 depths in filler
#            text at about 1K, 2K, 4K and 8K tokens, asked for through the
#            model's chat template (greedy, 16 new tokens: the model answers "The pass key is NNNNN."); a row per context
#            and budget: keys found out of 10, and how many of the keys dense
#            finds the budget finds too.
#
# Usage: scripts/accuracy_long_context.sh [ppl|passkey|all] [STRATA_BIN] [MODEL]
#   STRATA_BIN defaults to build/cli/strata; THREADS=n limits CPU threads;
#   CTXS="4096", BUDGETS="512 1024" or FIRST=kept (ppl) narrow the grid.
#   passkey needs python3.
set -euo pipefail
cd "$(dirname "$0")/.."
WHAT=${1:-all}
BIN=${2:-build/cli/strata}
MODEL=${3:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
BUDGETS=${BUDGETS:-256 512 1024 2048}
[[ -x $BIN ]] || { echo "error: $BIN is not built; run scripts/build.sh" >&2; exit 1; }
[[ -f $MODEL ]] || { echo "error: $MODEL is absent; run scripts/fetch-demo-model.sh" >&2; exit 1; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/strata_long_accuracy.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
THREAD_ARGS=()
[[ -n ${THREADS:-} ]] && THREAD_ARGS=(--threads "$THREADS")
echo "# strata $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%Y-%m-%dT%H:%MZ), model $MODEL"

ppl_table() {
  local text=$WORK/licenses.txt lic
  for lic in GPL-3 GPL-2 LGPL-2.1 GFDL-1.3 MPL-2.0 Apache-2.0; do
    cat "/usr/share/common-licenses/$lic" >>"$text"
  done
  echo "# perplexity in decode mode: /usr/share/common-licenses/{GPL-3,GPL-2,LGPL-2.1,GFDL-1.3,MPL-2.0,Apache-2.0}, the last 1024 tokens of each chunk scored"
  ppl() {  # ctx, extra flags; prints "ppl n_scored"
    "$BIN" perplexity --model "$MODEL" --text "$text" --ctx "$1" --decode-from $(($1 - 1024)) \
      "${THREAD_ARGS[@]}" "${@:2}" 2>/dev/null |
      awk '/^ppl /{p=$2} /^n_scored /{n=$2} END{print p, n}'
  }
  local ctx dense b r
  for ctx in ${CTXS:-4096 8192}; do
    read -r dense n <<<"$(ppl "$ctx")"
    printf "ctx %5d  %-26s ppl %8.4f  (%d tokens)\n" "$ctx" dense "$dense" "$n"
    for b in $BUDGETS; do
      for first in ${FIRST:-kept scored}; do
        local flags=(--sparse-budget "$b")
        [[ $first == scored ]] && flags+=(--sparse-score-first)
        read -r r n <<<"$(ppl "$ctx" "${flags[@]}")"
        awk -v c="$ctx" -v name="budget $b, first page $first" -v p="$r" -v d="$dense" \
          'BEGIN{printf "ctx %5d  %-26s ppl %8.4f  %+6.2f%% vs dense\n", c, name, p, 100*(p/d-1)}'
      done
    done
  done
}

passkey_table() {
  command -v python3 >/dev/null || { echo "error: passkey needs python3" >&2; exit 1; }
  echo "# passkey retrieval: 10 depths per context, greedy, --chat, 16 new tokens"
  local ctx budget
  for ctx in ${CTXS:-1024 2048 4096 8192}; do
    python3 - "$ctx" "$WORK/passkey-$ctx.jsonl" "$WORK/keys-$ctx.txt" <<'EOF'
import json, random, sys
ctx, out, keys = int(sys.argv[1]), sys.argv[2], sys.argv[3]
rng = random.Random(ctx)
head = ("There is an important piece of information hidden inside a lot of irrelevant text. "
        "Find it and memorize it. I will quiz you about it.\n")
filler = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
# About 24 tokens per filler sentence group with this tokenizer; leave room
# for the chat template, the question and the answer.
n = max(1, (ctx - 120) // 24)
with open(out, "w") as f, open(keys, "w") as k:
    for depth in range(10):
        key = rng.randrange(10000, 100000)
        at = round(n * depth / 9)
        parts = [filler] * n
        parts.insert(at, f"The pass key is {key}. Remember it. {key} is the pass key. ")
        prompt = head + "".join(parts) + "\nWhat is the pass key?"
        f.write(json.dumps({"id": f"{ctx}-{depth}", "prompt": prompt}) + "\n")
        k.write(f"{key}\n")
EOF
    for budget in 0 $BUDGETS; do
      ((budget == 0 || budget < ctx)) || continue
      "$BIN" generate --model "$MODEL" --prompts "$WORK/passkey-$ctx.jsonl" --chat \
        --max-new-tokens 16 --sparse-budget "$budget" --skip-long "${THREAD_ARGS[@]}" \
        -o "$WORK/out-$ctx-$budget.jsonl" >/dev/null 2>&1
      python3 - "$WORK/out-$ctx-$budget.jsonl" "$WORK/keys-$ctx.txt" "$WORK/out-$ctx-0.jsonl" \
        "$ctx" "$budget" <<'EOF'
import json, sys
out, keys, dense, ctx, budget = sys.argv[1:6]
k = [l.strip() for l in open(keys)]
def found(path):
    return [r.get("completion", r.get("text", "")).find(key) >= 0
            for r, key in zip(map(json.loads, open(path)), k)]
f, d = found(out), found(dense)
both = sum(a and b for a, b in zip(f, d))
name = "dense" if budget == "0" else f"budget {budget}"
print(f"ctx {int(ctx):5d}  {name:12s} found {sum(f):2d}/10  of dense's {sum(d):2d}: {both:2d}")
EOF
    done
  done
}

case $WHAT in
  ppl) ppl_table ;;
  passkey) passkey_table ;;
  all) passkey_table; ppl_table ;;
  *) echo "error: $WHAT: ppl, passkey or all" >&2; exit 1 ;;
esac
