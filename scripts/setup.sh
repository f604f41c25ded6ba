#!/usr/bin/env bash
# Install what nbdstack needs on Debian 12 or 13 (only what is missing), then
# configure and build it out of tree.
#   scripts/setup.sh [BUILD-DIR] [configure options...]
# SPDX-License-Identifier: BSD-3-Clause
set -euo pipefail
PATH=/usr/bin:/usr/sbin:/bin:/sbin:$PATH

top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build}
shift || true

# Everything the build, `make check` and the scripts run, so that a fresh
# Debian passes the test suite: besides the build tools and the NBD peers,
# python3 (tests run /usr/bin/python3), strace (test-image-fua),
# time (/usr/bin/time, test-coalesce-randops), util-linux (setpriv, flock,
# blockdev), mount (losetup), e2fsprogs (filefrag, chattr), and
# clang-format and git (test-build-format: the tracked files' format).
packages=(
  nbdkit nbdkit-plugin-dev libnbd-dev libnbd-bin python3-libnbd python3
  qemu-utils zlib1g-dev libzstd-dev autoconf automake libtool pkg-config
  make gcc clang clang-format git fio perl util-linux mount e2fsprogs strace time
  gnuplot-nox
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: need root to install packages: ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

cd "$top"
# Two builds from one source tree (several build dirs) must not run
# autoreconf at the same time: it rewrites build-aux/ in place.
(
  flock 9
  if [ ! -x configure ] || [ configure.ac -nt configure ]; then
    autoreconf -fi >/dev/null
  fi
) 9>"$top/.autoreconf.lock"
mkdir -p "$build"
cd "$build"
# Reconfigure when the options change, so that a build dir is never
# silently reused with different options.
wanted="$*"
if [ ! -f Makefile ] || [ "$(cat .nbdstack-configure-args 2>/dev/null)" != "$wanted" ]; then
  "$top/configure" "$@" >configure.out || { tail -30 configure.out; exit 1; }
  echo "$wanted" >.nbdstack-configure-args
fi
sed -n '/summary:/,$p' configure.out
make -j"$(nproc)" >make.out 2>&1 || { tail -50 make.out; exit 1; }
echo "setup: built in $build"
