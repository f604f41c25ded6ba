#!/usr/bin/env bash
# image plugin, raw: FUA is advertised and native (each FUA write is one
# pwritev2 with RWF_DSYNC, no fdatasync), FUA zero/trim and flush
# fdatasync, and every one of them lands in the file.  Checked with
# strace on the server, in both cache modes.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh
require strace

img=$T/disk.img
truncate -s 8M "$img"

for cache in writeback none; do
  strace -f -qq -o "$T/$cache.strace" -e trace=pwritev2,pwrite64,fdatasync,fsync \
    nbdkit -U - "$IMAGE_PLUGIN" file="$img" cache=$cache --run '
    IMG="'"$img"'" nbdsh -u "$uri" -c "
import os
h.set_strict_mode(h.get_strict_mode() & ~nbd.STRICT_ALIGN)
assert h.can_fua() and h.can_flush()
def on_disk(n, off):
    with open(os.environ[\"IMG\"], \"rb\") as f:
        f.seek(off)
        return f.read(n)
# Marker-delimited phases in the strace: FUA writes, then plain ones.
h.pwrite(b\"A\" * 65536, 1 << 20, nbd.CMD_FLAG_FUA)
h.pwrite(b\"B\" * 1000, 3 * 4096 + 17, nbd.CMD_FLAG_FUA)
assert on_disk(65536, 1 << 20) == b\"A\" * 65536
assert on_disk(1000, 3 * 4096 + 17) == b\"B\" * 1000
h.zero(4096, 1 << 20, nbd.CMD_FLAG_FUA)
assert on_disk(4096, 1 << 20) == bytes(4096)
h.trim(65536, 2 << 20, nbd.CMD_FLAG_FUA)
h.pwrite(b\"C\" * 4096, 5 << 20)
h.flush()
assert on_disk(4096, 5 << 20) == b\"C\" * 4096
"' || fail "cache=$cache: nbdsh checks failed"

  # Native FUA: the two FUA writes are pwritev2(..., RWF_DSYNC) (an
  # unaligned one with cache=none is a read-modify-write, whose write is
  # the FUA one), the plain write is not.
  dsync=$(grep -c 'pwritev2(.*RWF_DSYNC' "$T/$cache.strace" || true)
  [ "$dsync" -ge 2 ] ||
    fail "cache=$cache: expected >= 2 RWF_DSYNC writes, got $dsync: $(cat "$T/$cache.strace")"
  # fdatasync: FUA zero, FUA trim, flush, and nothing for the FUA writes.
  syncs=$(grep -c 'fdatasync(' "$T/$cache.strace" || true)
  [ "$syncs" -ge 3 ] ||
    fail "cache=$cache: expected >= 3 fdatasync, got $syncs: $(cat "$T/$cache.strace")"
  [ "$syncs" -le 4 ] ||
    fail "cache=$cache: FUA writes were emulated with fdatasync ($syncs): $(cat "$T/$cache.strace")"
done
