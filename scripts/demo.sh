#!/usr/bin/env bash
# nbdstack quick start: install what is missing, build, then upload a
# sample disk image through the image plugin (and whichever of our filters
# are built) with `qemu-img convert -p -n -W`, verify it with
# `qemu-img compare`, and print the throughput; then the same upload into
# a qcow2 target the plugin creates (create=true format=qcow2), verified
# with `qemu-img compare` and `qemu-img check`.
#
#   bash scripts/demo.sh
#
# Environment (optional):
#   BUILD=DIR      build directory (default: ./build next to this script's repo)
#   DEMO_SIZE=512M virtual size of the sample image
#   TMPDIR=DIR     where the private scratch directory goes (default /var/tmp)
#
# Safe to re-run: every run works in a fresh private directory, removed
# at the end, and the server it starts is always stopped.
# SPDX-License-Identifier: BSD-3-Clause
set -euo pipefail
PATH=/usr/bin:/usr/sbin:/bin:/sbin:$PATH
export PATH LC_ALL=C

top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$top/build}
size=${DEMO_SIZE:-512M}

say () { echo "demo: $*"; }
die () { echo "demo: ERROR: $*" >&2; exit 1; }

# 1. Packages and build.
say "installing missing packages and building into $build"
bash "$top/scripts/setup.sh" "$build" || die "setup/build failed (see above)"

plugin=$build/plugins/image/.libs/nbdkit-image-plugin.so
[ -f "$plugin" ] || die "$plugin was not built"
filters=()
names=()
for f in coalesce zerodetect discard; do
  so=$build/filters/$f/.libs/nbdkit-$f-filter.so
  if [ -f "$so" ]; then
    filters+=("--filter=$so")
    names+=("$f")
  fi
done
if [ ${#names[@]} -gt 0 ]; then
  # Filters load only into the nbdkit version they were built against.
  built=$(sed -n 's/^NBDKIT_VERSION = //p' "$build/Makefile")
  running=$(nbdkit --version | awk '{ print $2 }')
  [ "$built" = "$running" ] ||
    die "filters were built for nbdkit $built but nbdkit is $running: rebuild ($build)"
fi

# 2. Private scratch directory and a server that is always stopped.
tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/nbdstack-demo.XXXXXX")
. "$top/bench/server-lib.sh"

# 3. A sample source image: random data, allocated zeroes and holes.
sample=$tmp/sample.img
target=$tmp/target.img
SIZE=$size BUILD=$build bash "$top/bench/make-sample.sh" "$sample" ||
  die "cannot create the sample image"
bytes=$(stat -c %s "$sample")
alloc=$(( $(stat -c '%b * %B' "$sample") ))

# 4. The server: image plugin over a fresh sparse target, unix socket only.
uri="nbd+unix:///?socket=$sock"
say "starting nbdkit on $sock:"
say "  nbdkit ${names[*]/#/--filter=} image file=target.img create=true size=$bytes"
nbdkit --log=stderr -U "$sock" -P "$pidfile" "${filters[@]}" \
       "$plugin" file="$target" create=true size="$bytes" \
       2>>"$log" ||
  die "nbdkit did not start: $(tail -n 3 "$log")"
for ((i = 0; i < 100; i++)); do
  [ -s "$pidfile" ] && [ -S "$sock" ] && break
  sleep 0.1
done
[ -S "$sock" ] || die "nbdkit did not create $sock"

# 5. Upload, timed.
say "uploading with: qemu-img convert -p -n -W -f raw -O raw sample.img $uri"
t0=$EPOCHREALTIME
qemu-img convert -p -n -W -f raw -O raw "$sample" "$uri" ||
  die "upload failed"
t1=$EPOCHREALTIME

# 6. Verify, through the server and then in the file itself.
say "verifying with qemu-img compare"
qemu-img compare -q -f raw -F raw "$sample" "$uri" ||
  die "the export differs from the sample"
stop_server
qemu-img compare -q -f raw -F raw "$sample" "$target" ||
  die "the target file differs from the sample"
talloc=$(( $(stat -c '%b * %B' "$target") ))

awk -v t0="$t0" -v t1="$t1" -v v="$bytes" -v a="$alloc" -v ta="$talloc" 'BEGIN {
  s = t1 - t0
  printf "demo: OK: uploaded %.0f MiB virtual (%.0f MiB allocated) in %.2f s: %.0f MB/s virtual, %.0f MB/s of allocated data\n",
         v / 1048576, a / 1048576, s, v / s / 1e6, a / s / 1e6
  printf "demo: target file allocates %.0f MiB; qemu-img compare: identical\n", ta / 1048576
}'

# 7. The same upload into a qcow2 target that the plugin creates.
qtarget=$tmp/target.qcow2
rm -f "$sock" # the first server's socket may outlive it
say "starting nbdkit on $sock:"
say "  nbdkit ${names[*]/#/--filter=} image file=target.qcow2 format=qcow2 create=true size=$bytes"
nbdkit --log=stderr -U "$sock" -P "$pidfile" "${filters[@]}" \
       "$plugin" file="$qtarget" format=qcow2 create=true size="$bytes" \
       2>>"$log" ||
  die "nbdkit did not start: $(tail -n 3 "$log")"
for ((i = 0; i < 100; i++)); do
  [ -s "$pidfile" ] && [ -S "$sock" ] && break
  sleep 0.1
done
[ -S "$sock" ] || die "nbdkit did not create $sock"
say "uploading with: qemu-img convert -p -n -W -f raw -O raw sample.img $uri"
t0=$EPOCHREALTIME
qemu-img convert -p -n -W -f raw -O raw "$sample" "$uri" ||
  die "qcow2 upload failed"
t1=$EPOCHREALTIME
stop_server
say "verifying with qemu-img compare and qemu-img check"
qemu-img compare -q -f raw -F qcow2 "$sample" "$qtarget" ||
  die "the qcow2 target differs from the sample"
qemu-img check -q -f qcow2 "$qtarget" ||
  die "qemu-img check found problems in the qcow2 target"
talloc=$(( $(stat -c '%b * %B' "$qtarget") ))
awk -v t0="$t0" -v t1="$t1" -v v="$bytes" -v a="$alloc" -v ta="$talloc" 'BEGIN {
  s = t1 - t0
  printf "demo: OK: qcow2: uploaded %.0f MiB virtual (%.0f MiB allocated) in %.2f s: %.0f MB/s virtual, %.0f MB/s of allocated data\n",
         v / 1048576, a / 1048576, s, v / s / 1e6, a / s / 1e6
  printf "demo: qcow2 target file allocates %.0f MiB; qemu-img compare: identical; qemu-img check: clean\n", ta / 1048576
}'
