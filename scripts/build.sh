#!/usr/bin/env bash
# Installs missing dependencies and builds Strata into build/ (Release with
# debug info). Extra arguments go to the CMake configure step, e.g.
#   scripts/build.sh -DSTRATA_CUDA=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build build -j"$(nproc)" -- --no-print-directory
