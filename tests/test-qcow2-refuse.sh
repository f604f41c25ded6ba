#!/usr/bin/env bash
# Images we must refuse at start-up, each with its own one-line reason:
# encryption (AES, LUKS), unknown incompatible features (named from the
# image's feature name table), the corrupt bit, bad magic and version,
# unsupported cluster and refcount sizes, a backing file by default.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
. "$srcdir/test-qcow2-functions.sh"
require qemu-img
cd "$T"

good () { "$QEMU_IMG" create -q -f qcow2 "$@"; }

good -o cluster_size=4k base.qcow2 1M

"$QEMU_IMG" create -q --object secret,id=s0,data=abc -f qcow2 \
  -o encrypt.format=aes,encrypt.key-secret=s0 aes.qcow2 1M
refused aes.qcow2 'encrypted images are not supported \(AES encryption\)'
# qemu times its PBKDF and can fail under load ("Unable to get accurate
# CPU usage"): retry, and as a last resort mark a plain image as LUKS
# (the refusal only looks at the header's crypt_method).
for i in 1 2 3; do
  "$QEMU_IMG" create -q --object secret,id=s0,data=abc -f qcow2 \
    -o encrypt.format=luks,encrypt.key-secret=s0,encrypt.iter-time=100 \
    luks.qcow2 1M 2>luks.err && break
  rm -f luks.qcow2
done
if [ ! -f luks.qcow2 ]; then
  echo "qemu-img could not make a LUKS image: $(cat luks.err); patching one"
  cp base.qcow2 luks.qcow2
  patch luks.qcow2 field 32 I 2
fi
refused luks.qcow2 'encrypted images are not supported \(LUKS encryption\)'

cp base.qcow2 incompat.qcow2
patch incompat.qcow2 field 72 Q '1 << 10 | 1 << 40'
refused incompat.qcow2 'unsupported incompatible feature: bit 10, bit 40'
cp base.qcow2 incompat-named.qcow2
patch incompat-named.qcow2 field 72 Q '1 << 10'
patch incompat-named.qcow2 featname 10 frobnication
refused incompat-named.qcow2 \
  'unsupported incompatible feature: frobnication \(bit 10\)'

cp base.qcow2 corrupt.qcow2
patch corrupt.qcow2 field 72 Q 2
refused corrupt.qcow2 \
  'image is marked corrupt \(repair it with qemu-img check -r all\)'

head -c 1M /dev/urandom >raw.img
refused raw.img 'not a qcow2 image \(bad magic\)' format=qcow2
cp base.qcow2 magic.qcow2
patch magic.qcow2 field 0 I 0x514649fa
refused magic.qcow2 'not a qcow2 image \(bad magic\)' format=qcow2
for v in 1 4; do
  cp base.qcow2 v$v.qcow2
  patch v$v.qcow2 field 4 I $v
  refused v$v.qcow2 \
    "unsupported qcow2 version $v \\(only 2 and 3 are supported\\)"
done
for cb in 8 22; do
  cp base.qcow2 cb$cb.qcow2
  patch cb$cb.qcow2 field 20 I $cb
  refused cb$cb.qcow2 \
    "unsupported cluster size 2\\^$cb \\(512 bytes to 2 MiB are supported\\)"
done
cp base.qcow2 rc7.qcow2
patch rc7.qcow2 field 96 I 7
refused rc7.qcow2 \
  'unsupported refcount width 2\^7 bits \(1 to 64 bits are supported\)'
cp base.qcow2 ct2.qcow2
patch ct2.qcow2 field 104 B 2
refused ct2.qcow2 'unknown compression type 2'
cp base.qcow2 ct-mismatch.qcow2
patch ct-mismatch.qcow2 field 104 B 1
refused ct-mismatch.qcow2 \
  'compression type 1 does not match the compression type feature bit'

# A backing file is refused by default, and named.
good -b base.qcow2 -F qcow2 overlay.qcow2
refused overlay.qcow2 "image has a backing file 'base.qcow2'; refusing it \\(use backing=follow \\[backing-dir=DIR\\] to open it, or backing=none to serve this layer alone\\)"
