#!/usr/bin/env bash
# Installs, with apt-get, the Debian packages Strata builds against, and only the
# ones that are missing. Quiet and quick when everything is already there.
# CUDA is not installed here: the build uses it when a toolkit is present.
# Open MPI is optional to the build (-DSTRATA_MPI=AUTO) and installed here so
# that `mpirun -np N strata generate` and its tests work.
# Packages are installed without their Recommends, so everything the build
# needs is named here: ocl-icd-opencl-dev is only recommended by libdnnl-dev,
# yet Debian's dnnl-config.cmake fails without the OpenCL headers and library.
# scripts/fresh-machine-check.sh proves this list on a minimal Debian 12 root.
set -euo pipefail

pkgs=(
  build-essential cmake pkg-config
  libglpk-dev libcli11-dev libyaml-cpp-dev liburing-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libdnnl-dev ocl-icd-opencl-dev libpcre2-dev nlohmann-json3-dev libutf8proc-dev libxxhash-dev
  libopenmpi-dev openmpi-bin
  fio python3 python3-pip python3-venv ca-certificates zstd
)

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
