#!/usr/bin/env bash
# Installs missing dependencies, builds, and runs the whole test suite with
# ctest. Tests labelled `model` use the demo model when scripts/fetch-demo-model.sh
# has fetched it (this script fetches it) and tests labelled `cuda` skip with a
# message where no GPU is present. Extra arguments go to ctest, e.g. -L cpu.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
./scripts/fetch-demo-model.sh
cd build
ctest --output-on-failure -j"$(nproc)" "$@"
