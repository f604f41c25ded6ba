#!/usr/bin/env bash
# Backing chains (raw and qcow2, several levels, shorter backing files),
# backing=refuse|none|follow with the backing-dir containment rule, loop
# and depth limits; external data files; internal snapshots.
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

refused ()
{
  local img=$1 msg=$2
  shift 2
  n=$((n + 1))
  expect_error "error: $msg\$" \
    start_refused c$n "$IMAGE_PLUGIN" file="$img" "$@"
  echo "ok: $img $* refused: $msg"
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
refused d/top.qcow2 "$T/d/top.qcow2: image has a backing file 'mid.qcow2'; refusing it \\(use backing=follow \\[backing-dir=DIR\\] to open it, or backing=none to serve this layer alone\\)"

# ---- containment ----
head -c 1M /dev/urandom >outside.raw
"$QEMU_IMG" create -q -f qcow2 -b ../outside.raw -F raw d/escape.qcow2 1M
refused d/escape.qcow2 "$T/d/escape.qcow2: backing file '../outside.raw' resolves to $T/outside.raw, outside the allowed directory $T/d \\(see backing-dir\\)" backing=follow
# ... allowed when backing-dir covers it.
same d/escape.qcow2 outside.raw backing=follow backing-dir="$T"
ln -s ../outside.raw d/link.raw
"$QEMU_IMG" create -q -f qcow2 -b link.raw -F raw d/symlink.qcow2 1M
refused d/symlink.qcow2 "$T/d/symlink.qcow2: backing file 'link.raw' resolves to $T/outside.raw, outside the allowed directory $T/d \\(see backing-dir\\)" backing=follow
"$QEMU_IMG" create -q -f qcow2 -b "$T/outside.raw" -F raw d/absolute.qcow2 1M
refused d/absolute.qcow2 "$T/d/absolute.qcow2: backing file '$T/outside.raw' resolves to $T/outside.raw, outside the allowed directory $T/d \\(see backing-dir\\)" backing=follow
"$QEMU_IMG" create -q -f qcow2 -b base.raw -F raw d/missing.qcow2 1M
mv d/base.raw d/base.raw.away
refused d/missing.qcow2 "$T/d/missing.qcow2: backing file 'base.raw' cannot be opened: No such file or directory" backing=follow
mv d/base.raw.away d/base.raw

# ---- loops and depth ----
"$QEMU_IMG" create -q -f qcow2 d/loop-a.qcow2 1M
"$QEMU_IMG" create -q -f qcow2 -b loop-a.qcow2 -F qcow2 d/loop-b.qcow2
"$QEMU_IMG" rebase -q -u -b loop-b.qcow2 -F qcow2 d/loop-a.qcow2
refused d/loop-a.qcow2 "$T/d/loop-a.qcow2: backing chain loop: $T/d/loop-a.qcow2 is already in the chain" backing=follow
"$QEMU_IMG" create -q -f qcow2 d/self.qcow2 1M
"$QEMU_IMG" rebase -q -u -b self.qcow2 -F qcow2 d/self.qcow2
refused d/self.qcow2 "$T/d/self.qcow2: backing chain loop: $T/d/self.qcow2 is already in the chain" backing=follow
"$QEMU_IMG" create -q -f qcow2 d/l0.qcow2 1M
for i in 1 2 3 4; do
  "$QEMU_IMG" create -q -f qcow2 -b l$((i - 1)).qcow2 -F qcow2 d/l$i.qcow2
  qio -c "write -P $i $((i * 64))k 64k" d/l$i.qcow2
done
same d/l4.qcow2 d/l4.qcow2 backing=follow
same d/l4.qcow2 d/l4.qcow2 backing=follow backing-max-depth=4
refused d/l4.qcow2 "$T/d/l4.qcow2: backing chain is deeper than 3 files \\(see backing-max-depth\\)" backing=follow backing-max-depth=3

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
refused d/ext-out.qcow2 "$T/d/ext-out.qcow2: external data file '../outside.bin' resolves to $T/outside.bin, outside the allowed directory $T/d \\(see backing-dir\\)"

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
refused snap.qcow2 "$T/snap.qcow2: snapshot 'nope' not found" snapshot=nope
