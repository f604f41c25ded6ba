#!/usr/bin/env bash
# qcow2 linear layout: a guest cluster rewritten after a trim or a zero
# that unmaps, with or without a flush between, goes back to its home
# (its host offset is data_start + guest offset): after 5 rounds over
# 64 clusters the file is the 2 MiB of metadata plus the 4 MiB of data,
# one guest->host delta, 0% fragmented, clean, reading what was written.
# A home shared with a snapshot is not taken back: the snapshot keeps
# its data.  Before the fix, every rewrite without a flush between went
# past the span (a 73 MB file instead of 6 MB).
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require qemu-img
require nbdsh
cd "$T"

for mode in trim-noflush trim-flush zero-noflush zero-flush mixed-noflush; do
  rm -f l.qcow2 model.raw
  "$NBDKIT" -U - "$IMAGE_PLUGIN" file=l.qcow2 format=qcow2 create=true \
    size=64M --run true || fail "create failed"
  MODE=$mode "$NBDKIT" -U - "$IMAGE_PLUGIN" file=l.qcow2 --run 'nbdsh -u "$uri" -c "
import os, random
C = 65536
mode = os.environ[\"MODE\"]
r = random.Random(3)
model = bytearray(64 * C)
for g in range(64):
    d = os.urandom(C)
    h.pwrite(d, g * C)
    model[g * C:(g + 1) * C] = d
h.flush()
for rnd in range(5):
    for g in range(64):
        how = mode if not mode.startswith(\"mixed\") else r.choice([\"trim\", \"zero\"])
        if how.startswith(\"trim\"):
            h.trim(C, g * C)
        else:
            h.zero(C, g * C)
        if mode.endswith(\"-flush\"):
            h.flush()
        # Part of the cluster only, half the time: the rest reads zeroes.
        n = C if r.random() < 0.5 else C // 2
        d = os.urandom(n)
        h.pwrite(d, g * C)
        model[g * C:g * C + n] = d
        model[g * C + n:(g + 1) * C] = bytes(C - n)
    h.flush()
assert h.pread(64 * C, 0) == model
open(\"model.raw\", \"wb\").write(model)
"' || fail "$mode: the rewrites failed"
  "$QEMU_IMG" check l.qcow2 >check.out 2>&1 ||
    fail "$mode: qemu-img check: $(cat check.out)"
  grep -q ' 0.00% fragmented' check.out || fail "$mode: $(cat check.out)"
  size=$(stat -c %s l.qcow2)
  [ "$size" -le $((6 * 1024 * 1024)) ] || fail "$mode: file of $size bytes"
  "$QEMU_IMG" compare -q -f qcow2 -F raw l.qcow2 model.raw ||
    fail "$mode: differs from the model"
  deltas=$("$QEMU_IMG" map --output=json l.qcow2 | /usr/bin/python3 -c '
import json, sys
m = [e for e in json.load(sys.stdin) if e["data"]]
print(len(set(e["offset"] - e["start"] for e in m)))')
  [ "$deltas" = 1 ] || fail "$mode: $deltas guest->host deltas"
  echo "$mode: file $size, 1 delta, $(grep -o '[0-9.]*% fragmented' check.out)"
done

# A snapshot shares the homes: a trimmed and rewritten cluster gets a
# new cluster, the snapshot keeps its data.
rm -f l.qcow2
"$NBDKIT" -U - "$IMAGE_PLUGIN" file=l.qcow2 format=qcow2 create=true \
  size=8M --run 'nbdsh -u "$uri" -c "h.pwrite(b\"\\x5a\" * (8 << 20), 0); h.flush()"'
"$QEMU_IMG" snapshot -c snap l.qcow2
"$NBDKIT" -U - "$IMAGE_PLUGIN" file=l.qcow2 --run 'nbdsh -u "$uri" -c "
C = 65536
for g in range(0, 128, 2):
    h.trim(C, g * C)
    h.pwrite(b\"\\xa5\" * C, g * C)
h.flush()
"'
"$QEMU_IMG" check l.qcow2 >check.out 2>&1 || fail "snapshot: $(cat check.out)"
"$QEMU_IMG" convert -l snap -O raw l.qcow2 snap.raw
head -c $((8 << 20)) /dev/zero | tr '\0' '\132' >want.raw
cmp snap.raw want.raw || fail "snapshot: its data changed"
echo "OK"
