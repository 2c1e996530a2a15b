#!/usr/bin/env bash
# Proves the README's two commands on a fresh machine: builds a minimal Debian 12
# root (mmdebstrap, variant minbase, from this machine's apt sources; the root
# tarball is cached in .cache/fresh-machine/), copies this checkout in (the
# files git tracks plus untracked ones it does not ignore: no build trees,
# models or venvs) and runs, inside it as root,
#   ./scripts/test.sh -L cpu     (install, build, the CPU tests)
#   ./scripts/demo.sh            (install, build, fetch the model, generate)
# printing each command's result and time. The root has no CUDA toolkit, so
# this is also the build without CUDA. Not part of CI: it takes about half an
# hour on a 2-core machine.
#
#   scripts/fresh-machine-check.sh [--keep] [--refresh] [--only test|demo]
#     --keep      leave the root (in /var/tmp/strata-fresh-root) for inspection
#     --refresh   rebuild the cached root tarball
#     --only X    run only one of the two commands
# Needs root (chroot, mounts); installs mmdebstrap when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

keep=0 refresh=0 only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=1 ;;
    --refresh) refresh=1 ;;
    --only) only=${2:?--only needs test or demo}; shift ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fresh-machine-check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case "$only" in ""|test|demo) ;; *) echo "fresh-machine-check: --only takes test or demo, not '$only'" >&2; exit 2 ;; esac
[ "$(id -u)" -eq 0 ] || { echo "fresh-machine-check: needs root (chroot and mounts)" >&2; exit 1; }

cache=$repo/.cache/fresh-machine
tarball=$cache/bookworm-minbase.tar
root=${STRATA_FRESH_ROOT:-/var/tmp/strata-fresh-root}
mkdir -p "$cache"

sources=""
for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list; do
  [ -s "$f" ] && grep -q bookworm "$f" && { sources=$f; break; }
done
[ -n "$sources" ] || { echo "fresh-machine-check: no Debian 12 (bookworm) apt source on this machine" >&2; exit 1; }

if [ "$refresh" -eq 1 ] || [ ! -f "$tarball" ] || [ ! -s "$tarball" ]; then
  command -v mmdebstrap >/dev/null || {
    echo "fresh-machine-check: installing mmdebstrap"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
  }
  echo "fresh-machine-check: building a minimal Debian 12 root from $sources"
  # mmdebstrap picks its output format from the name: say tar, and write
  # under a name that ends in .tar until it is complete.
  rm -rf "$tarball" "$cache/partial.tar"
  mmdebstrap --quiet --variant=minbase --mode=root --format=tar bookworm "$cache/partial.tar" "$sources"
  mv "$cache/partial.tar" "$tarball"
fi

unmount_all() {
  for m in dev/pts dev proc; do
    mountpoint -q "$root/$m" 2>/dev/null && umount -l "$root/$m" || true
  done
}
remove_root() {
  unmount_all
  if findmnt -rn -o TARGET | grep -q "^$root/"; then
    echo "fresh-machine-check: something is still mounted under $root; not removing it" >&2
    return 1
  fi
  rm -rf --one-file-system "$root"
}
cleanup() {
  if [ "$keep" -eq 1 ]; then unmount_all; else remove_root; fi
}
trap cleanup EXIT

remove_root
mkdir -p "$root"
tar -xf "$tarball" -C "$root"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# The certificate authorities this machine trusts (a network whose HTTPS goes
# through a proxy of its own has one more), as any machine on this network
# would have them; ca-certificates adds them when install-deps installs it.
mkdir -p "$root/usr/local/share/ca-certificates"
if [ -s /etc/ssl/certs/ca-certificates.crt ]; then
  awk -v dir="$root/usr/local/share/ca-certificates" '
    /-----BEGIN CERTIFICATE-----/ { n++; f = sprintf("%s/host-%03d.crt", dir, n) }
    f { print > f }
    /-----END CERTIFICATE-----/ { close(f); f = "" }' /etc/ssl/certs/ca-certificates.crt
fi
mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"

commit=$(git rev-parse --short HEAD)
dirty=""
[ -z "$(git status --porcelain)" ] || dirty=" with uncommitted changes"
mkdir -p "$root/strata"
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
  [ -e "$f" ] && printf '%s\0' "$f"
done | tar --null -T - -cf - | tar -xf - -C "$root/strata"
echo "fresh-machine-check: checkout $commit$dirty copied into a fresh Debian 12 root (no CUDA toolkit)"

# A clean environment: none of this machine's PATH, toolchains or caches.
in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 TERM=dumb /bin/bash -c "cd /strata && $1"
}

declare -a names results times
status=0
run_step() {
  local name=$1 cmd=$2 log=$cache/$1.log start end rc
  echo "fresh-machine-check: running '$cmd' (log: ${log#"$repo"/})"
  start=$(date +%s)
  set +e
  in_root "$cmd" >"$log" 2>&1
  rc=$?
  set -e
  end=$(date +%s)
  names+=("$cmd") times+=("$((end - start))")
  if [ "$rc" -eq 0 ]; then results+=("ok"); else results+=("FAILED (exit $rc)"); status=1; fi
  tail -n 15 "$log" | sed 's/^/    /'
}

[ "$only" = demo ] || run_step test "./scripts/test.sh -L cpu"
[ "$only" = test ] || run_step demo "./scripts/demo.sh"

echo
echo "fresh-machine-check: Debian 12 minbase, checkout $commit$dirty"
for i in "${!names[@]}"; do
  printf '  %-28s %-18s %4d s\n' "${names[$i]}" "${results[$i]}" "${times[$i]}"
done
exit $status
