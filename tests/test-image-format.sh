#!/usr/bin/env bash
# image plugin: format=auto never serves a qcow2 container as raw;
# format=raw serves any file byte for byte, qcow2 included.
#
# Written to keep passing once qcow2 support lands: format=auto on a
# qcow2 file must then serve the guest contents (checked against
# qemu-img convert), and until then refuse with a clear error.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdcopy

q=$T/disk.qcow2
"$QEMU_IMG" create -q -f qcow2 "$q" 4M
"$QEMU_IO" -f qcow2 -c 'write -P 0x5a 0 64k' -c 'write -P 0xa5 1M 8k' "$q" >/dev/null
"$QEMU_IMG" convert -f qcow2 -O raw "$q" "$T/guest.raw"

# format=raw: the container bytes exactly.
nbdkit -U - "$IMAGE_PLUGIN" file="$q" format=raw \
  --run "nbdcopy \"\$uri\" '$T/container.out'"
cmp "$q" "$T/container.out" || fail "format=raw did not serve the file as is"

# format=auto (the default) and format=qcow2.
for fmt in auto qcow2; do
  if nbdkit -U - "$IMAGE_PLUGIN" file="$q" format=$fmt \
      --run "nbdcopy \"\$uri\" '$T/$fmt.out'" 2>"$T/$fmt.err"; then
    # qcow2 support exists: the guest view, never the container.
    cmp "$T/guest.raw" "$T/$fmt.out" ||
      fail "format=$fmt served something other than the guest contents"
  else
    grep -q "is a qcow2 image" "$T/$fmt.err" ||
      fail "format=$fmt: unclear refusal: $(cat "$T/$fmt.err")"
    [ "$(grep -c . "$T/$fmt.err")" -eq 1 ] ||
      fail "format=$fmt: more than one error line: $(cat "$T/$fmt.err")"
  fi
  if [ -s "$T/$fmt.out" ] && cmp -s "$q" "$T/$fmt.out"; then
    fail "format=$fmt served the qcow2 metadata as raw"
  fi
done

# A plain raw file is sniffed as raw.
head -c 1M /dev/urandom >"$T/plain.raw"
printf 'not qcow2' | dd of="$T/plain.raw" conv=notrunc status=none
nbdkit -U - "$IMAGE_PLUGIN" file="$T/plain.raw" \
  --run "nbdcopy \"\$uri\" '$T/plain.out'"
cmp "$T/plain.raw" "$T/plain.out" || fail "format=auto on a raw file"

# A file shorter than the magic is raw too.
printf 'QF' >"$T/tiny.raw"
nbdkit -U - "$IMAGE_PLUGIN" file="$T/tiny.raw" \
  --run 'nbdsh -u "$uri" -c "assert h.pread(2, 0) == b\"QF\""' ||
  fail "format=auto on a 2-byte file"
