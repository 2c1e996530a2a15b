#!/usr/bin/env bash
# One batch job over MPI ranks: total throughput of `strata generate` on the
# demo model over 512 text prompts (3 to 60 words, a fixed seed), greedy,
# with
#   1 rank,  1 thread    (one process, no mpirun)
#   2 ranks, 1 thread each (mpirun -np 2)
#   1 rank,  2 threads   (the same two cores used by one process)
# printing per run the job's tokens/s, its ratio to 1 rank with 1 thread,
# and per rank its prompts, seconds and tokens/s, with the balance (the
# fastest rank's time over the slowest's). Every run's output is compared
# with the first: they must be the same records.
#
#   scripts/bench_mpi.sh [BUILD_DIR]
#   MODEL=models/other.gguf PROMPTS=256 GEN=16 BATCH=16 scripts/bench_mpi.sh
#
# Defaults: 512 prompts, 32 new tokens, batch 32, f32 compute. Needs an
# otherwise idle machine and Open MPI (scripts/install-deps.sh); about 5
# minutes on 2 cores. Output under OUT_DIR (default models/bench-mpi,
# git-ignored).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
out="${OUT_DIR:-$root/models/bench-mpi}"
model="${MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
n_prompts="${PROMPTS:-512}"
gen="${GEN:-32}"
batch="${BATCH:-32}"
compute="${COMPUTE:-f32}"

[[ -d "$build" ]] || { echo "bench_mpi: no build directory $build; run scripts/build.sh or pass one" >&2; exit 1; }
[[ -f "$model" ]] || { echo "bench_mpi: no model at $model; run scripts/fetch-demo-model.sh" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "bench_mpi: no mpirun; run scripts/install-deps.sh and rebuild" >&2; exit 1; }
cmake --build "$build" --target strata -j"$(nproc)" >/dev/null
strata="$build/cli/strata"
mkdir -p "$out"
python3 - "$out/prompts.txt" "$n_prompts" <<'PY'
import random, sys
path, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(512)
words = ("the a cat dog house river city story time water light music garden "
         "question answer morning night friend letter road window market").split()
with open(path, "w") as f:
    for _ in range(n):
        f.write(" ".join(rng.choice(words) for _ in range(rng.randint(3, 60))) + "\n")
PY
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
args=(--log-level warn generate --model "$model" --prompts "$out/prompts.txt"
      --max-new-tokens "$gen" --batch-size "$batch" --compute-dtype "$compute")
mpi=(mpirun --oversubscribe --mca btl_vader_single_copy_mechanism none)
[[ $(id -u) -eq 0 ]] && mpi+=(--allow-run-as-root)

# run NAME NP THREADS: the job's report lands in $out/NAME.json.
run() {
  local name=$1 np=$2 threads=$3
  rm -f "$out/$name.jsonl" "$out/$name.jsonl.partial"
  if [[ $np -eq 1 ]]; then
    "$strata" "${args[@]}" --threads "$threads" -o "$out/$name.jsonl" --report "$out/$name.json" >/dev/null
  else
    "${mpi[@]}" -np "$np" "$strata" "${args[@]}" --threads "$threads" -o "$out/$name.jsonl" \
      --report "$out/$name.json" >/dev/null
  fi
  cmp -s "$out/np1-t1.jsonl" "$out/$name.jsonl" || { echo "bench_mpi: $name wrote other records than np1-t1" >&2; exit 1; }
}
run np1-t1 1 1
run np2-t1 2 1
run np1-t2 1 2

python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
base = json.load(open(f"{out}/np1-t1.json"))["total_tokens_per_s"]
print(f"\n{'run':16} {'tok/s':>9} {'vs 1 rank':>9} {'balance':>8}  ranks (prompts, s, tok/s)")
for name, label in (("np1-t1", "1 rank, 1 thr"), ("np2-t1", "2 ranks, 1 thr"), ("np1-t2", "1 rank, 2 thr")):
    r = json.load(open(f"{out}/{name}.json"))
    ranks = r.get("ranks", [dict(r, rank=0)])
    per = "  ".join(f"{k['rank']}: {k['n_prompts']}, {k['total_s']:.1f}, {k.get('total_tokens_per_s', 0):.0f}" for k in ranks)
    bal = r.get("balance", 1.0)
    print(f"{label:16} {r['total_tokens_per_s']:9.1f} {r['total_tokens_per_s'] / base:8.2f}x {bal:8.2f}  {per}")
print("\nceiling: 2 ranks on 2 cores at most 2.00x of 1 rank with 1 thread")
PY
