#!/usr/bin/env bash
# Fuzzes every parser with libFuzzer under AddressSanitizer and
# UndefinedBehaviorSanitizer (fuzz/: one target per parser, calling the entry
# point the program uses). Installs clang and its runtimes when missing,
# configures its own build directory (build-fuzz/, not the main build), and
# runs each target for SECONDS (default 60) on the committed seed corpus
# fuzz/corpus/<target>/ plus a working corpus in build-fuzz/corpus/<target>/
# (kept between runs). An input is a finding when it crashes, trips a
# sanitizer, leaks, or takes more than 1 s. Prints executions, coverage and
# findings of this run per target; crash reproducers are left in
# build-fuzz/findings/ (those of earlier runs are kept and not counted).
#
#   scripts/fuzz.sh [SECONDS] [TARGET ...]     e.g. scripts/fuzz.sh 600 gguf
#   scripts/fuzz.sh --runs N [TARGET ...]      N executions per target instead
#   JOBS=2 scripts/fuzz.sh ...                 parallel fuzzing processes per target
#
# After fixing a finding, copy its reproducer into fuzz/corpus/<target>/ so
# that the ctest test Fuzz.ReplaysCorpus.<target> guards against it.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=60 runs=""
if [ "${1:-}" = "--runs" ]; then
  runs=${2:?--runs needs a count}
  shift 2
elif [ $# -gt 0 ] && [[ "$1" =~ ^[0-9]+$ ]]; then
  seconds=$1
  shift
fi
jobs=${JOBS:-1}

./scripts/install-deps.sh
need=()
for p in clang libclang-rt-14-dev libomp-14-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "fuzz: installing ${need[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

all=$(sed -n '/^set(STRATA_FUZZ_TARGETS/,/)/p' fuzz/CMakeLists.txt | sed 's/set(STRATA_FUZZ_TARGETS//; s/)//' | xargs)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || read -r -a targets <<<"$all"
for t in "${targets[@]}"; do
  [[ " $all " == *" $t "* ]] || { echo "fuzz: unknown target '$t'; targets: $all" >&2; exit 2; }
done

flags="-fsanitize=address,undefined -fsanitize=fuzzer-no-link -fno-omit-frame-pointer -fno-sanitize-recover=undefined -g -O1"
cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATA_FUZZ=ON -DSTRATA_CUDA=OFF \
  -DBUILD_TESTING=OFF -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  "-DCMAKE_C_FLAGS=$flags" "-DCMAKE_CXX_FLAGS=$flags" >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target $(printf 'fuzz_%s ' "${targets[@]}") -- --no-print-directory >/dev/null

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:symbolize=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
mkdir -p build-fuzz/findings
declare -a rows
status=0
for t in "${targets[@]}"; do
  work=build-fuzz/corpus/$t
  mkdir -p "$work" "build-fuzz/findings/$t"
  log=build-fuzz/fuzz-$t.log
  limit=(-max_total_time="$seconds")
  [ -z "$runs" ] || limit=(-runs="$runs")
  if [ -n "$runs" ]; then what="$runs runs"; else what="$seconds s"; fi
  echo "fuzz: $t ($what, $jobs job(s))"
  # Findings of earlier runs stay where they are; this run counts its own.
  stamp=build-fuzz/findings/$t/.started
  touch "$stamp"
  set +e
  if [ "$jobs" -gt 1 ]; then
    [ -n "$runs" ] && limit=(-runs="$(( runs / jobs ))")
    ./build-fuzz/fuzz/fuzz_$t "$work" "fuzz/corpus/$t" "${limit[@]}" -timeout=1 -rss_limit_mb=4096 \
      -print_final_stats=1 -artifact_prefix="build-fuzz/findings/$t/" -jobs="$jobs" -workers="$jobs" \
      >"$log" 2>&1
    # libFuzzer copies each job's fuzz-N.log into its own output when the
    # job ends: the log has every job's lines once.
    rm -f fuzz-*.log
  else
    ./build-fuzz/fuzz/fuzz_$t "$work" "fuzz/corpus/$t" "${limit[@]}" -timeout=1 -rss_limit_mb=4096 \
      -print_final_stats=1 -artifact_prefix="build-fuzz/findings/$t/" >"$log" 2>&1
  fi
  rc=$?
  set -e
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | awk '{s += $2} END {print s + 0}')
  cov=$(grep -oE '(#[0-9]+|DONE).*cov: [0-9]+' "$log" | tail -1 | grep -oE 'cov: [0-9]+' | awk '{print $2}')
  ft=$(grep -oE 'ft: [0-9]+' "$log" | tail -1 | awk '{print $2}')
  found=$(find "build-fuzz/findings/$t" -type f ! -name .started -newer "$stamp" | wc -l)
  verdict=ok
  if [ "$rc" -ne 0 ] || [ "$found" -gt 0 ]; then verdict="FINDING (see $log)"; status=1; fi
  rows+=("$(printf '%-18s %12s %8s %8s %9s  %s' "$t" "${execs:-0}" "${cov:-?}" "${ft:-?}" "$found" "$verdict")")
done

echo
printf '%-18s %12s %8s %8s %9s  %s\n' target execs cov features findings result
printf '%s\n' "${rows[@]}"
exit $status
