#!/usr/bin/env bash
# Zeroes written into a qcow2 layer served without its backing file
# (backing=none, or nbdstack-nbd's "backing": null as imageio's shallow
# upload serves it) must hide the backing file's data when the chain is
# read later, as with qemu-nbd (which records zero clusters).  Before,
# a zero request (or written zeroes turned into one by detect-zeroes)
# over an unallocated cluster was taken as "already zero", since the
# layer alone reads zeroes there, and through the chain the backing
# file's bytes showed again.  Zero requests, written zeroes under
# --detect-zeroes=unmap, whole and partial clusters, version 3 and 2,
# each beside qemu-nbd's result through qemu-io.  Where qemu-nbd
# deallocates (discard, which NBD allows to read anything afterwards;
# zeroes on version 2, which has no zero flag) the backing file shows
# again through qemu; ours records zeroes there too.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
. "$abs_top_srcdir/tests/nbd-functions.sh"
require nbdsh
require qemu-img
require qemu-io
require qemu-nbd
cd "$T"

"$QEMU_IMG" create -q -f raw base.raw 1M
"$QEMU_IO" -f raw -c 'write -P 0xaa 0 1M' base.raw >/dev/null
alone () { echo "json:{\"driver\": \"qcow2\", \"backing\": null, \"file\": {\"driver\": \"file\", \"filename\": \"$T/$1\"}}"; }

# Requests: a whole cluster at 0, one byte at 512K, 100 bytes across
# the cluster boundary at 192K.
ZERO='h.zero(65536, 0); h.zero(1, 524288); h.zero(100, 196558)'
WRITE='h.pwrite(bytes(65536), 0); h.pwrite(bytes(1), 524288); h.pwrite(bytes(100), 196558)'
TRIM='h.trim(65536, 0)'

# How many of the ranges read back as the backing file's bytes through
# the chain (qemu-io opens the whole chain).
shows_backing () # IMAGE HOW
{
  local checks=(-c 'read -P 0 0 64k')
  [ "$2" = trim ] || checks+=(-c 'read -P 0 524288 1' -c 'read -P 0 196558 100')
  "$QEMU_IO" -f qcow2 "${checks[@]}" "$1" 2>&1 | grep -ci 'pattern verification failed' || :
}

for compat in 1.1 0.10; do
  "$QEMU_IMG" create -q -f qcow2 -o compat=$compat -b base.raw -F raw top.qcow2 1M
  for how in zero write trim; do
    case $how in zero) py=$ZERO ;; write) py=$WRITE ;; trim) py=$TRIM ;; esac
    # qcow2 v2 has no zero flag: a discard there reads what it reads.
    [ $compat = 0.10 ] && [ $how = trim ] && continue
    for srv in qemu ours plugin; do
      img=$srv-$compat-$how.qcow2
      cp top.qcow2 "$img"
      case $srv in
        plugin)
          start_nbdkit p "$IMAGE_PLUGIN" file="$T/$img" backing=none
          nbdsh -u "$(uri p)" -c "$py; h.flush()" || fail "$srv $how: request failed"
          stop_nbdkit p ;;
        *)
          start_fg $srv s --persistent --socket="$T/s.sock" --cache=none \
            --discard=unmap --detect-zeroes=unmap "$(alone "$img")"
          nbdsh -u "nbd+unix:///?socket=$T/s.sock" -c "$py; h.flush()" ||
            fail "$srv $how: request failed"
          stop_fg s ;;
      esac
      "$QEMU_IMG" check -q "$img" || fail "$srv $compat $how: qemu-img check failed"
      n=$(shows_backing "$img" $how)
      echo "$srv, compat=$compat, zeroes by $how: $n ranges show the backing file"
      # qemu deallocates on discard (the backing file shows again, which
      # NBD allows) and, on version 2 (no zero flag), for zero requests
      # too; ours records zeroes in every case.
      [ $srv = qemu ] && { [ $how = trim ] || [ $compat = 0.10 ]; } && continue
      [ "$n" = 0 ] || fail "$srv, compat=$compat, $how: $n zeroed ranges show the backing file's data"
    done
  done
done
echo "ok: zeroes into a layer served alone hide its backing file, as with qemu-nbd"
