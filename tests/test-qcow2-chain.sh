#!/usr/bin/env bash
# Backing chains (raw and qcow2, several levels, shorter backing files),
# backing=refuse|none|follow with the backing-dir containment rule, loop
# and depth limits; external data files; internal snapshots, with the
# snapshot table wherever qemu puts it.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
. "$srcdir/test-qcow2-functions.sh"
require qemu-img
require qemu-io
require nbdsh
cd "$T"
mkdir d

qio () { "$QEMU_IO" -f qcow2 "$@" >/dev/null; }

n=0
# serve IMG [PARAMS...]: start a server for IMG, name in $srv.
serve ()
{
  local img=$1
  shift
  n=$((n + 1))
  srv=c$n
  start_nbdkit $srv "$IMAGE_PLUGIN" file="$img" "$@"
}

# same IMG REFERENCE [PARAMS...]: our export of IMG reads like REFERENCE
# (a qcow2 read by qemu-img with its whole chain, or a raw file) and,
# for qcow2 references, maps like it.
same ()
{
  local img=$1 ref=$2 fmt=qcow2
  shift 2
  case $ref in *.raw) fmt=raw ;; esac
  serve "$img" "$@"
  "$QEMU_IMG" compare -q -f $fmt -F raw "$ref" "$(uri $srv)" ||
    fail "$img $*: contents differ from $ref"
  if [ $fmt = qcow2 ]; then
    check_map "$ref" "$(uri $srv)"
  fi
  stop_async $srv
  echo "ok: $img $* reads like $ref"
}

# ---- a three-level chain: raw <- qcow2 <- qcow2 ----
# The raw base is shorter than the overlays and has a hole.
head -c 1M /dev/urandom >d/base.raw
truncate -s 2M d/base.raw
head -c 1M /dev/urandom >>d/base.raw
"$QEMU_IMG" create -q -f qcow2 -b base.raw -F raw d/mid.qcow2 4M
qio -c 'write -P 0x11 512k 64k' -c 'write -z 1M 128k' -c 'write -P 0x12 3M 8k' \
  d/mid.qcow2
"$QEMU_IMG" create -q -f qcow2 -o cluster_size=4k -b mid.qcow2 -F qcow2 \
  d/top.qcow2
qio -c 'write -P 0x21 0 4k' -c 'write -z 520k 4k' -c 'write -z -u 2M 16k' \
  -c 'write -P 0x22 3070k 4k' d/top.qcow2
same d/top.qcow2 d/top.qcow2 backing=follow
same d/mid.qcow2 d/mid.qcow2 backing=follow
# Extended L2 overlay: unallocated subclusters show the backing file.
"$QEMU_IMG" create -q -f qcow2 -o extended_l2=on -b mid.qcow2 -F qcow2 \
  d/ext.qcow2
qio -c 'write -P 0x31 2k 2k' -c 'write -z 70k 2k' d/ext.qcow2
same d/ext.qcow2 d/ext.qcow2 backing=follow

# backing=none: the top layer alone, unallocated reads as zeroes.
cp d/top.qcow2 alone.qcow2
"$QEMU_IMG" rebase -q -u -b '' alone.qcow2
same d/top.qcow2 alone.qcow2 backing=none

# The default refuses, naming the file.
refused d/top.qcow2 "image has a backing file 'mid.qcow2'; refusing it \\(use backing=follow \\[backing-dir=DIR\\] to open it, or backing=none to serve this layer alone\\)"

# ---- containment ----
head -c 1M /dev/urandom >outside.raw
"$QEMU_IMG" create -q -f qcow2 -b ../outside.raw -F raw d/escape.qcow2 1M
refused d/escape.qcow2 "backing file '../outside.raw' resolves to $T/outside.raw, outside the allowed directory $T/d \\(see backing-dir\\)" backing=follow
# ... allowed when backing-dir covers it.
same d/escape.qcow2 outside.raw backing=follow backing-dir="$T"
ln -s ../outside.raw d/link.raw
"$QEMU_IMG" create -q -f qcow2 -b link.raw -F raw d/symlink.qcow2 1M
refused d/symlink.qcow2 "backing file 'link.raw' resolves to $T/outside.raw, outside the allowed directory $T/d \\(see backing-dir\\)" backing=follow
"$QEMU_IMG" create -q -f qcow2 -b "$T/outside.raw" -F raw d/absolute.qcow2 1M
refused d/absolute.qcow2 "backing file '$T/outside.raw' resolves to $T/outside.raw, outside the allowed directory $T/d \\(see backing-dir\\)" backing=follow
"$QEMU_IMG" create -q -f qcow2 -b base.raw -F raw d/missing.qcow2 1M
mv d/base.raw d/base.raw.away
refused d/missing.qcow2 "backing file 'base.raw' cannot be opened: No such file or directory" backing=follow
mv d/base.raw.away d/base.raw

# ---- loops and depth ----
"$QEMU_IMG" create -q -f qcow2 d/loop-a.qcow2 1M
"$QEMU_IMG" create -q -f qcow2 -b loop-a.qcow2 -F qcow2 d/loop-b.qcow2
"$QEMU_IMG" rebase -q -u -b loop-b.qcow2 -F qcow2 d/loop-a.qcow2
refused d/loop-a.qcow2 "backing chain loop: $T/d/loop-a.qcow2 is already in the chain" backing=follow
"$QEMU_IMG" create -q -f qcow2 d/self.qcow2 1M
"$QEMU_IMG" rebase -q -u -b self.qcow2 -F qcow2 d/self.qcow2
refused d/self.qcow2 "backing chain loop: $T/d/self.qcow2 is already in the chain" backing=follow
"$QEMU_IMG" create -q -f qcow2 d/l0.qcow2 1M
for i in 1 2 3 4; do
  "$QEMU_IMG" create -q -f qcow2 -b l$((i - 1)).qcow2 -F qcow2 d/l$i.qcow2
  qio -c "write -P $i $((i * 64))k 64k" d/l$i.qcow2
done
same d/l4.qcow2 d/l4.qcow2 backing=follow
same d/l4.qcow2 d/l4.qcow2 backing=follow backing-max-depth=4
refused d/l4.qcow2 "backing chain is deeper than 3 files \\(see backing-max-depth\\)" backing=follow backing-max-depth=3

# ---- external data files ----
# qemu-img resolves a relative data file name from its current
# directory, we from the image's directory (like backing files): run
# qemu from d/ so that both mean the same file.
for raw in off on; do
  (
    cd d
    "$QEMU_IMG" create -q -f qcow2 \
      -o data_file=data-$raw.bin,data_file_raw=$raw ext-$raw.qcow2 4M
    qio -c 'write -P 0x41 0 64k' -c 'write -P 0x42 100k 3k' \
      -c 'write -z 1M 128k' -c 'write -P 0x43 4091k 5k' ext-$raw.qcow2
    "$QEMU_IMG" convert -f qcow2 -O raw ext-$raw.qcow2 ../ext-$raw.raw
  )
  same d/ext-$raw.qcow2 ext-$raw.raw
  serve d/ext-$raw.qcow2
  (cd d && check_map ext-$raw.qcow2 "$(uri $srv)")
  stop_async $srv
  echo "ok: d/ext-$raw.qcow2 maps like qemu-img map"
done
(cd d && "$QEMU_IMG" create -q -f qcow2 -o data_file=../outside.bin \
  ext-out.qcow2 1M)
refused d/ext-out.qcow2 "external data file '../outside.bin' resolves to $T/outside.bin, outside the allowed directory $T/d \\(see backing-dir\\)"

# ---- internal snapshots ----
"$QEMU_IMG" create -q -f qcow2 snap.qcow2 4M
qio -c 'write -P 0x51 0 1M' snap.qcow2
"$QEMU_IMG" snapshot -c s1 snap.qcow2
qio -c 'write -P 0x52 512k 1M' -c 'write -z 3M 64k' snap.qcow2
"$QEMU_IMG" snapshot -c s2 snap.qcow2
"$QEMU_IMG" resize -q snap.qcow2 8M
qio -c 'write -P 0x53 7M 64k' -c 'discard 0 64k' snap.qcow2
same snap.qcow2 snap.qcow2
for s in s1 s2; do
  "$QEMU_IMG" convert -f qcow2 -l snapshot.name=$s -O raw snap.qcow2 $s.raw
  same snap.qcow2 $s.raw snapshot=$s
done
same snap.qcow2 s1.raw snapshot=1
same snap.qcow2 s2.raw snapshot=2
refused snap.qcow2 "snapshot 'nope' not found" snapshot=nope

# Snapshot tables among the data.  qemu writes a new table at the first
# free clusters whenever a snapshot is taken or deleted, so guest data,
# L2 tables and snapshot L1 tables end up after it (the table's size is
# only known from its entries), or the table ends up last in the file.

# every_snapshot IMG [by-id]: each snapshot (by name, and by ID too
# when asked) and the active layer read like qemu reads them.
every_snapshot ()
{
  local img=$1 id name
  same "$img" "$img"
  "$QEMU_IMG" info --output=json -f qcow2 "$img" |
    /usr/bin/python3 -c '
import json, sys
for s in json.load(sys.stdin).get("snapshots", []):
    print(s["id"], s["name"])' >snaps.txt
  [ -s snaps.txt ] || fail "$img: no snapshots"
  while read -r id name; do
    "$QEMU_IMG" convert -f qcow2 -l snapshot.name="$name" -O raw "$img" \
      snap-ref.raw
    same "$img" snap-ref.raw snapshot="$name"
    if [ "${2-}" = by-id ]; then
      same "$img" snap-ref.raw snapshot="$id"
    fi
  done <snaps.txt
}

# table_is IMG after|last: the layout the case is about really is there:
# guest data or L1/L2 tables after the snapshot table, or nothing after it.
table_is ()
{
  /usr/bin/python3 - "$1" "$2" <<'PY' || fail "$1: snapshot table is not $2"
import os, struct, sys
path, want = sys.argv[1], sys.argv[2]
f = open(path, "rb")
hdr = f.read(72)
cs = 1 << struct.unpack_from(">I", hdr, 20)[0]
nb, tab = struct.unpack_from(">IQ", hdr, 60)
size = os.path.getsize(path)
# Any cluster after the table's first cluster is something else.
after = (tab // cs + 1) * cs < size
sys.exit(0 if nb and after == (want == "after") else 1)
PY
}

# The reported case: snapshot A deleted, so B's table went to A's freed
# clusters, before B's L2 table and the data written after A.
"$QEMU_IMG" create -q -f qcow2 del-first.qcow2 64M
qio -c 'write -P 1 0 1M' del-first.qcow2
"$QEMU_IMG" snapshot -c A del-first.qcow2
qio -c 'write -P 2 4M 1M' del-first.qcow2
"$QEMU_IMG" snapshot -c B del-first.qcow2
"$QEMU_IMG" snapshot -d A del-first.qcow2
table_is del-first.qcow2 after
every_snapshot del-first.qcow2 by-id
# ... then more data, and a new snapshot: the table moves to the end.
cp del-first.qcow2 at-end.qcow2
qio -c 'write -P 3 8M 1M' at-end.qcow2
"$QEMU_IMG" snapshot -c C at-end.qcow2
table_is at-end.qcow2 last
every_snapshot at-end.qcow2 by-id

# Several snapshots, data written after each, some deleted, over the
# layouts that change the table's place and size: v2, 512-byte clusters
# (a table of long names spans several clusters), extended L2.
long=$(printf 'name%.0s' {1..40})
for opts in compat=0.10 cluster_size=512 extended_l2=on,cluster_size=16k; do
  img=many-${opts%%,*}.qcow2
  img=${img/=/-}
  "$QEMU_IMG" create -q -f qcow2 -o "$opts" "$img" 8M
  qio -c 'write -P 0x61 0 1M' -c 'write -P 0x62 3M 5k' "$img"
  "$QEMU_IMG" snapshot -c first "$img"
  qio -c 'write -P 0x63 512k 1M' -c 'write -z 3M 64k' "$img"
  "$QEMU_IMG" snapshot -c "second-$long" "$img"
  qio -c 'write -P 0x64 5M 1M' -c 'discard 0 64k' "$img"
  "$QEMU_IMG" snapshot -c third "$img"
  "$QEMU_IMG" snapshot -c "fourth-$long" "$img"
  "$QEMU_IMG" snapshot -d first "$img"
  qio -c 'write -P 0x65 7M 1M' -c 'write -P 0x66 100k 3k' "$img"
  "$QEMU_IMG" snapshot -c "fifth-$long" "$img"
  "$QEMU_IMG" snapshot -d third "$img"
  qio -c 'write -P 0x67 6M 256k' -c 'write -z 5M 64k' "$img"
  table_is "$img" after
  every_snapshot "$img"
done
