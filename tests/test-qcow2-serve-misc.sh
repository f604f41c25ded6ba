#!/usr/bin/env bash
# image plugin, qcow2 writable: the cases around the data path.
#  - writes into a qemu-made image with compressed clusters, zero
#    clusters and an internal snapshot: the snapshot reads the same
#    before and after, the active layer equals randops' model, clean;
#  - alternation: the same writes go to a raw reference, and to one qcow2
#    image through us, then qemu-io, then us again: identical;
#  - ENOSPC on a small tmpfs: the client sees ENOSPC, the image then
#    passes qemu-img check (exit 0 or 3: leaks allowed, see below);
#  - zerodetect and discard filters: zero runs written as data become
#    unallocated clusters, trims free clusters (qemu-img map and check);
#  - read-only: readonly=true, snapshot=, a read-only filesystem (with
#    readonly=true; writable connections refused without it), an external data file, and a
#    backing file under a written overlay are never written; a dirty
#    image is refused with one line naming qemu-img check -r all;
#  - create=true: cluster-size, extended-l2 and what qemu-img info says,
#    the refusals, create=true/force on an existing image, a block device
#    (compact layout);
#  - layout=: a qemu-made empty image gets the linear layout (default,
#    auto, linear) or not (compact); linear refused on a device.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require qemu-img
require_filter_version
require_root "mount -t tmpfs (ENOSPC and read-only cases)"
cd "$T"
mounts=()
on_exit 'for m in "${mounts[@]}"; do umount -l "$m" 2>/dev/null; done'
on_exit '[ -n "${loopdev:-}" ] && losetup -d "$loopdev"'

info () # IMAGE: qemu-img info as "key=value" lines for the fields we test
{
  "$QEMU_IMG" info -f qcow2 --output=json "$1" | /usr/bin/python3 -c '
import json, sys
i = json.load(sys.stdin)
d = i["format-specific"]["data"]
print("virtual-size=%d cluster-size=%d compat=%s extended-l2=%s refcount-bits=%d"
      % (i["virtual-size"], i["cluster-size"], d["compat"],
         str(d.get("extended-l2", False)).lower(), d["refcount-bits"]))'
}
clean () # IMAGE WHAT: qemu-img check exits 0, no leaks
{
  local out
  out=$("$QEMU_IMG" check -f qcow2 "$1" 2>&1) || fail "$2: qemu-img check: $out"
  ! grep -qi leak <<<"$out" || fail "$2: leaks: $out"
}

# ---- compressed clusters, zero clusters, an internal snapshot
head -c 16M /dev/urandom >r.raw
head -c 4M /dev/zero | tr '\0' 'a' | dd of=r.raw bs=1M seek=4 conv=notrunc status=none
"$QEMU_IMG" convert -q -c -f raw -O qcow2 -o cluster_size=64k r.raw comp.qcow2
"$QEMU_IO" -f qcow2 -c 'write -z 10M 1M' -c 'write -z -u 12M 512k' comp.qcow2 >/dev/null
"$QEMU_IMG" snapshot -c s1 comp.qcow2
"$QEMU_IMG" check comp.qcow2 | grep -q ' 0.00% compressed clusters' &&
  fail "comp: no compressed clusters to start with"
"$QEMU_IMG" convert -f qcow2 -O raw -l snapshot.name=s1 comp.qcow2 snap-before.raw
start_nbdkit comp "$IMAGE_PLUGIN" file="$T/comp.qcow2"
"$RANDOPS" -c 4 --interleave --stripe=4096 -n 1000 --seed=21 \
  --dump=comp.ref "$(uri comp)" || fail "comp: randops found a difference"
stop_nbdkit comp
"$QEMU_IMG" compare -q -f raw -F qcow2 comp.ref comp.qcow2 ||
  fail "comp: the active layer differs from randops' model"
"$QEMU_IMG" convert -f qcow2 -O raw -l snapshot.name=s1 comp.qcow2 snap-after.raw
cmp snap-before.raw snap-after.raw || fail "comp: the snapshot changed"
cmp snap-before.raw r.raw >/dev/null && fail "comp: the snapshot lost qemu's zero writes"
clean comp.qcow2 "compressed+zero+snapshot"
echo "ok: compressed, zero clusters and a snapshot: snapshot unchanged, clean"

# ---- alternation: us, qemu-io, us; each step also applied to raw.
head -c 8M /dev/urandom >alt.raw
"$QEMU_IMG" convert -q -f raw -O qcow2 -o cluster_size=4k alt.raw alt.qcow2
step_us ()
{
  start_nbdkit alt "$IMAGE_PLUGIN" file="$T/alt.qcow2"
  "$QEMU_IO" -f raw "$@" "$(uri alt)" >/dev/null
  "$QEMU_IO" -f raw "$@" alt.raw >/dev/null
  stop_nbdkit alt
}
step_qemu ()
{
  "$QEMU_IO" -f qcow2 "$@" alt.qcow2 >/dev/null
  "$QEMU_IO" -f raw "$@" alt.raw >/dev/null
}
step_us -c 'write -P 1 1000 70000' -c 'write -z 1M 100k' -c 'discard 2M 1M' -c 'write -P 2 7M 1M'
step_qemu -c 'write -P 3 0 5000' -c 'write -z 1050000 8192' -c 'write -P 4 2500000 3' -c 'write -z -u 6M 256k'
step_us -c 'write -P 5 4097 100' -c 'write -P 6 2M 10k' -c 'write -z 6100000 300000' -c 'write -P 7 8380000 8608'
"$QEMU_IMG" compare -q -f raw -F qcow2 alt.raw alt.qcow2 ||
  fail "alternation: the image differs from the raw reference"
clean alt.qcow2 alternation
echo "ok: alternation us / qemu-io / us equals raw"

# ---- ENOSPC on a 64M tmpfs: a 256M image we create, filled with
# random data until the filesystem is full.  The failed write fails the
# image (every later request gets EIO); at close, the clusters taken
# for the failed request may stay counted: qemu-img check may report
# leaks (exit 3), never corruption.
mkdir small
mount -t tmpfs -o size=64M nbdstack-test small || fail "cannot mount a tmpfs"
mounts+=("$T/small")
start_fg full "$IMAGE_PLUGIN" file="$T/small/full.qcow2" format=qcow2 \
  create=true size=256M
nbdsh -u "$(uri full)" -c '
import errno, os
buf = os.urandom(1 << 20)
try:
    for i in range(256):
        h.pwrite(buf, i << 20)
    h.flush()
    assert False, "256M of data fitted in a 64M filesystem"
except nbd.Error as e:
    assert e.errno in (errno.ENOSPC, "ENOSPC"), "expected ENOSPC, got %s (%s)" % (e.errno, e)
    print("ENOSPC after %d MiB: %s" % (i, e))
' || fail "ENOSPC: the client did not see ENOSPC"
stop_nbdkit full
grep -q "No space left on device" "$(logfile full)" ||
  fail "ENOSPC: the server log does not say why: $(cat "$(logfile full)")"
rc=0; out=$("$QEMU_IMG" check -f qcow2 small/full.qcow2 2>&1) || rc=$?
[ $rc = 0 ] || [ $rc = 3 ] || fail "ENOSPC: qemu-img check exited $rc: $out"
echo "ok: ENOSPC reached the client; qemu-img check exit $rc afterwards"
"$QEMU_IMG" check -q -r leaks small/full.qcow2 >/dev/null 2>&1 || :
"$QEMU_IO" -f qcow2 -c 'read 0 1M' small/full.qcow2 >/dev/null ||
  fail "ENOSPC: the image cannot be read after repair"

# ---- zerodetect + discard: allocation follows the data.
/usr/bin/python3 - <<'PY'
import os
cs = 64 << 10
with open("zd.raw", "wb") as f:
    for i in range(256):                  # 16M, one pattern per cluster
        k = i % 4
        if k == 0:   f.write(os.urandom(cs))            # data
        elif k == 1: f.write(bytes(cs))                 # zeroes, written
        elif k == 2: f.write(bytes(cs - 1) + b"x")      # one byte of data
        else:        f.write(bytes(cs // 2) + os.urandom(cs // 2))
PY
start_nbdkit zd --filter="$(filter_so zerodetect)" --filter="$(filter_so discard)" \
  "$IMAGE_PLUGIN" file="$T/zd.qcow2" format=qcow2 create=true size=16M
"$QEMU_IMG" convert -n -S 0 -W -f raw -O raw zd.raw "$(uri zd)"
data_bytes () # IMAGE: bytes of data clusters per qemu-img map
{
  "$QEMU_IMG" map -f qcow2 --output=json "$1" | /usr/bin/python3 -c '
import json, sys
print(sum(e["length"] for e in json.load(sys.stdin) if e.get("data")))'
}
host_clusters () # IMAGE: allocated host clusters per qemu-img check
{
  "$QEMU_IMG" check -f qcow2 --output=json "$1" | /usr/bin/python3 -c '
import json, sys
print(json.load(sys.stdin)["allocated-clusters"])'
}
nbdsh -u "$(uri zd)" -c 'h.flush()'
stop_nbdkit zd
got=$(data_bytes zd.qcow2)
[ "$got" -eq $((192 * 65536)) ] ||
  fail "zerodetect: $got bytes allocated, expected the 192 clusters with data"
"$QEMU_IMG" compare -q -f raw -F qcow2 zd.raw zd.qcow2 || fail "zerodetect: differs"
before=$(host_clusters zd.qcow2)
# Now zero 32 data clusters by writing zeroes, and trim 32 others.
start_nbdkit zd2 --filter="$(filter_so zerodetect)" --filter="$(filter_so discard)" \
  "$IMAGE_PLUGIN" file="$T/zd.qcow2"
nbdsh -u "$(uri zd2)" -c '
cs = 65536
for i in range(0, 128, 4):           # clusters 0, 4, ... 124: data
    h.pwrite(bytes(cs), i * cs)
h.trim(64 * cs, 128 * cs)            # clusters 128..191
h.flush()'
stop_nbdkit zd2
got=$(data_bytes zd.qcow2)
# Left: clusters 1..127 with data (96 of 128 minus the 32 zeroed: 64),
# and 192..255 (48): 112.
[ "$got" -eq $((112 * 65536)) ] ||
  fail "zerodetect/discard: $got bytes allocated, expected 112 clusters"
after=$(host_clusters zd.qcow2)
[ $((before - after)) -ge 48 ] ||
  fail "zerodetect/discard: only $((before - after)) host clusters freed (the trims alone free 48)"
clean zd.qcow2 zerodetect
echo "ok: zerodetect/discard: 192 -> 112 data clusters, $((before - after)) host clusters freed"

# ---- read-only cases: never written.
"$QEMU_IMG" create -q -f qcow2 ro.qcow2 8M
"$QEMU_IO" -f qcow2 -c 'write -P 9 0 1M' ro.qcow2 >/dev/null
"$QEMU_IMG" snapshot -c s1 ro.qcow2
ro_case () # NAME IMAGE PARAMS...: read-only export, image bytes unchanged
{
  local name=$1 img=$2 sum
  shift 2
  sum=$(md5sum <"$img")
  start_nbdkit "$name" "$IMAGE_PLUGIN" file="$T/$img" "$@"
  nbdsh -u "$(uri "$name")" -c '
assert h.is_read_only(), "not read-only"
try:
    h.pwrite(b"x" * 512, 0)
    assert False, "a write succeeded"
except nbd.Error:
    pass' || fail "$name: the export accepts writes"
  stop_nbdkit "$name"
  [ "$(md5sum <"$img")" = "$sum" ] || fail "$name: the image changed"
  echo "ok: $name: read-only, unchanged"
}
ro_case readonly ro.qcow2 readonly=true
ro_case snapshot ro.qcow2 snapshot=s1
"$QEMU_IMG" create -q -f qcow2 -o data_file=df.raw df.qcow2 8M
ro_case datafile df.qcow2
grep -q "served read-only: writing images with an external data file" \
  "$(logfile datafile)" || fail "datafile: no start-up message: $(cat "$(logfile datafile)")"
mkdir rofs
mount -t tmpfs -o size=16M nbdstack-test rofs
mounts+=("$T/rofs")
cp ro.qcow2 rofs/
mount -o remount,ro rofs
# On a read-only mount: a connection that is not read-only is refused
# (issue 19 item 7: never a read-only export in place of a writable
# one), and readonly=true serves it.
expect_error "ro.qcow2: cannot open for writing: Read-only file system" \
  nbdkit -U - "$IMAGE_PLUGIN" file="$T/rofs/ro.qcow2" \
  --run 'nbdsh -u "$uri" -c "h.get_size()"'
ro_case rofs rofs/ro.qcow2 readonly=true
# A backing file stays as it was under a written overlay.
"$QEMU_IMG" create -q -f qcow2 -b ro.qcow2 -F qcow2 top.qcow2
sum=$(md5sum <ro.qcow2)
start_nbdkit top "$IMAGE_PLUGIN" file="$T/top.qcow2" backing=follow
nbdsh -u "$(uri top)" -c 'h.pwrite(b"y" * 100000, 5000); h.zero(1 << 20, 0); h.trim(65536, 2 << 20); h.flush()'
stop_nbdkit top
[ "$(md5sum <ro.qcow2)" = "$sum" ] || fail "backing: the backing file changed"
"$QEMU_IO" -f qcow2 -c 'read -P 0 0 1M' top.qcow2 >/dev/null || fail "backing: zero lost"
clean top.qcow2 backing
echo "ok: backing file unchanged under a written overlay"
# A dirty image is refused, in one line.
"$QEMU_IMG" create -q -f qcow2 -o lazy_refcounts=on dirty.qcow2 8M
("$QEMU_IO" -f qcow2 -c 'write 0 64k' -c abort dirty.qcow2) >/dev/null 2>&1 || :
expect_error "dirty.qcow2: the image is dirty: repair it with qemu-img check -r all" \
  nbdkit -U - "$IMAGE_PLUGIN" file="$T/dirty.qcow2" --run true
[ "$(nbdkit -U - "$IMAGE_PLUGIN" file="$T/dirty.qcow2" --run true 2>&1 | grep -c error)" = 1 ] ||
  fail "dirty: more than one error line"
ro_case dirty-ro dirty.qcow2 readonly=true
echo "ok: a dirty image is refused for writing with one line"

# ---- create=true parameters, as qemu-img info reports them.
created () # NAME EXPECTED PARAMS...
{
  local name=$1 want=$2
  shift 2
  nbdkit -U - "$IMAGE_PLUGIN" file="$T/$name.qcow2" format=qcow2 create=true "$@" \
    --run 'nbdsh -u "$uri" -c "h.pwrite(b\"z\" * 70000, 1000); h.flush()"' ||
    fail "$name: create failed"
  got=$(info "$name.qcow2")
  [ "$got" = "$want" ] || fail "$name: qemu-img info says '$got', expected '$want'"
  clean "$name.qcow2" "$name"
  echo "ok: create $*: $got"
}
created c-default "virtual-size=10485760 cluster-size=65536 compat=1.1 extended-l2=false refcount-bits=16" size=10M
created c-512 "virtual-size=1048576 cluster-size=512 compat=1.1 extended-l2=false refcount-bits=16" size=1M cluster-size=512
created c-2m "virtual-size=104857600 cluster-size=2097152 compat=1.1 extended-l2=false refcount-bits=16" size=100M cluster-size=2M
created c-ext "virtual-size=10485760 cluster-size=65536 compat=1.1 extended-l2=true refcount-bits=16" size=10M extended-l2=on
created c-ext-off "virtual-size=10485760 cluster-size=16384 compat=1.1 extended-l2=false refcount-bits=16" size=10M extended-l2=off cluster-size=16k preallocation=off
# preallocation=metadata: every guest cluster mapped, in guest order at
# one offset, the file still sparse, and writes change no metadata.
for g in "cluster-size=64k" "extended-l2=on" "cluster-size=512"; do
  rm -f pre.qcow2
  nbdkit -U - "$IMAGE_PLUGIN" file="$T/pre.qcow2" format=qcow2 create=true \
    size=40M preallocation=metadata $g --run true
  clean pre.qcow2 "preallocation $g"
  c0=$("$QEMU_IMG" check -f qcow2 --output=json pre.qcow2 | /usr/bin/python3 -c '
import json, sys; print(json.load(sys.stdin)["allocated-clusters"])')
  nbdkit -U - "$IMAGE_PLUGIN" file="$T/pre.qcow2" --run \
    'nbdsh -u "$uri" -c "h.pwrite(b\"p\" * 300000, 12345); h.zero(20 << 20, 4096, nbd.CMD_FLAG_NO_HOLE); h.flush(); assert h.pread(20 << 20, 4096) == bytes(20 << 20)"'
  c1=$("$QEMU_IMG" check -f qcow2 --output=json pre.qcow2 | /usr/bin/python3 -c '
import json, sys; print(json.load(sys.stdin)["allocated-clusters"])')
  [ "$c0" = "$c1" ] || fail "preallocation $g: writes allocated ($c0 -> $c1 clusters)"
  "$QEMU_IMG" map -f qcow2 --output=json pre.qcow2 | /usr/bin/python3 -c '
import json, sys
m = json.load(sys.stdin)
assert all("offset" in e for e in m), "an unmapped extent"
d = {e["offset"] - e["start"] for e in m}
assert len(d) == 1, "not linear: %s" % d
assert m[-1]["start"] + m[-1]["length"] == 40 << 20' ||
    fail "preallocation $g: not every cluster mapped linearly"
  [ $(( $(stat -c %b pre.qcow2) * 512 )) -lt $((8 << 20)) ] ||
    fail "preallocation $g: the file is not sparse"
  clean pre.qcow2 "preallocation $g, written"
  echo "ok: preallocation=metadata $g: all mapped, linear, sparse, writes in place"
done
refused () # PATTERN PARAMS...
{
  local pattern=$1
  shift
  expect_error "$pattern" nbdkit -U - "$IMAGE_PLUGIN" "$@" --run true
}
refused "cluster-size must be a power of 2 from 512 to 2M" file="$T/x.qcow2" format=qcow2 create=true size=1M cluster-size=1000
refused "cluster-size must be a power of 2 from 512 to 2M" file="$T/x.qcow2" format=qcow2 create=true size=1M cluster-size=4M
refused "extended L2 entries need clusters of at least 16 KiB" file="$T/x.qcow2" format=qcow2 create=true size=1M cluster-size=4k extended-l2=on
refused "only used with create=true" file="$T/c-default.qcow2" cluster-size=4k
refused "create=true needs size=SIZE" file="$T/x.qcow2" format=qcow2 create=true
[ ! -e x.qcow2 ] || fail "a refused create left a file behind"
# An existing image: create=true keeps one of that size (untouched),
# refuses another size or a non-qcow2 file; create=force replaces.
sum=$(md5sum <c-default.qcow2)
nbdkit -U - "$IMAGE_PLUGIN" file="$T/c-default.qcow2" format=qcow2 create=true size=10M \
  --run 'nbdsh -u "$uri" -c "assert h.pread(3, 1000) == b\"zzz\""' ||
  fail "create=true on the same image did not keep it"
refused "already exists and is not a qcow2 image of size 20971520 \\(use create=force" \
  file="$T/c-default.qcow2" format=qcow2 create=true size=20M
refused "already exists and is not a qcow2 image" file="$T/r.raw" format=qcow2 create=true size=16M
nbdkit -U - "$IMAGE_PLUGIN" file="$T/c-default.qcow2" format=qcow2 create=force size=20M \
  cluster-size=4k --run 'nbdsh -u "$uri" -c "assert h.pread(3, 1000) == bytes(3)"' ||
  fail "create=force did not replace the image"
[ "$(info c-default.qcow2)" = "virtual-size=20971520 cluster-size=4096 compat=1.1 extended-l2=false refcount-bits=16" ] ||
  fail "create=force: $(info c-default.qcow2)"
# The linear layout on a file, the compact one on a block device.
"$QEMU_IMG" info c-ext.qcow2 >/dev/null
head -c 64M /dev/zero >dev.img
loopdev=$(losetup -f --show dev.img) || skip "no loop device"
start_nbdkit dev "$IMAGE_PLUGIN" file="$loopdev" format=qcow2 create=true size=48M
refused "metadata preallocation needs the linear layout" file="$loopdev" \
  format=qcow2 create=force size=48M preallocation=metadata
"$RANDOPS" -c 4 --interleave --stripe=4096 -n 500 --seed=22 --dump=dev.ref "$(uri dev)" ||
  fail "device: randops found a difference"
stop_nbdkit dev
"$QEMU_IMG" compare -q -f raw -F qcow2 dev.ref "$loopdev" || fail "device: differs"
clean "$loopdev" device
echo "ok: create=true on a block device (compact layout), randops, clean"
refused "layout=linear needs a regular file" file="$loopdev" format=qcow2 \
  create=force size=48M layout=linear
refused "the linear layout needs a regular file" file="$loopdev" format=qcow2 \
  layout=linear

# ---- cache=none: overwrites larger than the bounce buffer (4 MiB), at
# unaligned offsets and lengths, go through it in chunks, the partial
# blocks at either end read back from the file: the image must read
# back what a raw file given the same writes holds.
"$QEMU_IMG" create -q -f qcow2 big.qcow2 64M
truncate -s 64M big.raw
nbdkit -U - "$IMAGE_PLUGIN" file="$T/big.qcow2" cache=none --run '
  nbdsh -u "$uri" -c "
import os, random
random.seed(5)
ref = open(\"big.raw\", \"r+b\")
# First every cluster (new clusters are written whole, aligned), then
# overwrites in place: those reach the file unaligned.
for off, n in [(0, 64 << 20), (1000, 9 << 20 | 123), (4096, 12 << 20), (20 << 20, 5 << 20),
               (30 << 20 | 511, 4 << 20 | 1), (40 << 20 | 4095, 17 << 20)]:
    data = os.urandom(n)
    h.pwrite(data, off)
    ref.seek(off)
    ref.write(data)
ref.close()
h.flush()"' || fail "cache=none large writes failed"
"$QEMU_IMG" compare -q -f raw -F qcow2 big.raw big.qcow2 ||
  fail "cache=none: large unaligned writes differ"
clean big.qcow2 "cache=none large writes"
echo "ok: cache=none: large unaligned writes through the bounce chunks"

# ---- layout= on an image qemu-img made: 16 clusters written last to
# first.  auto (the default) and linear give the empty image our layout
# (guest order in the file: no inversions), compact appends in arrival
# order (15 inversions).
inversions () # IMAGE
{
  "$QEMU_IMG" map --output=json -f qcow2 "$1" | /usr/bin/python3 -c '
import json, sys
m = [e for e in json.load(sys.stdin) if e["data"]]
print(sum(1 for a, b in zip(m, m[1:]) if b["offset"] < a["offset"] + a["length"]))'
}
for layout in "" auto linear compact; do
  "$QEMU_IMG" create -q -f qcow2 lay.qcow2 64M
  nbdkit -U - "$IMAGE_PLUGIN" file="$T/lay.qcow2" ${layout:+layout=$layout} --run '
    nbdsh -u "$uri" -c "
for i in reversed(range(16)):
    h.pwrite(bytes([i + 1]) * 65536, i * 65536)
h.flush()"' || fail "layout=$layout: writing failed"
  clean lay.qcow2 "layout=$layout"
  inv=$(inversions lay.qcow2)
  want=0
  [ "$layout" != compact ] || want=15
  [ "$inv" = $want ] || fail "layout=${layout:-(default)}: $inv inversions, expected $want"
done
refused "layout" file="$T/lay.qcow2" layout=diagonal
echo "ok: layout= (default, auto, linear: 0 inversions; compact: 15), refusals"
echo "qcow2 serve misc: all cases passed"
