#!/usr/bin/env bash
# nbdstack-nbd against the real qemu-nbd on block devices (loop
# devices), as vdsm serves block storage: its command line with the
# host_device driver, and the plain-filename form.  Same nbdinfo view,
# same result of the same request stream, exit 0 on SIGTERM; the
# 'file' driver on a block device is refused by both.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
. "$srcdir/nbd-functions.sh"
require nbdinfo
require losetup
require_filter_version
require_loop_devices

size=$((32 * 1024 * 1024))
truncate -s $size "$T/base.img"
dd if=/dev/urandom of="$T/base.img" bs=1M count=4 seek=2 conv=notrunc status=none
declare -A dev=()
for k in qemu ours; do
  cp "$T/base.img" "$T/$k.img"
  dev[$k]=$(losetup -f --show "$T/$k.img") || fail "losetup failed"
  # Servers first, then the devices (hooks run last-registered first).
  on_exit "losetup -d '${dev[$k]}'"
done
on_exit stop_all_servers

seed=0
for form in vdsm plain; do
  seed=$((seed + 1))
  for k in qemu ours; do
    s=$T/$form-$k.sock
    case $form in
      vdsm)
        start_fg $k $form-$k --socket "$s" --persistent --shared=8 --export-name= \
          --cache=none --aio=native --discard=unmap \
          "json:{\"driver\": \"raw\", \"file\": {\"driver\": \"host_device\", \"filename\": \"${dev[$k]}\"}}" ;;
      plain)
        start_fg $k $form-$k -t -k "$s" -f raw --discard=unmap --detect-zeroes=unmap "${dev[$k]}" ;;
    esac
    export_view "nbd+unix:///?socket=$s" "$WRITE_FIELDS" >"$T/$form-$k.view"
    python3 "$srcdir/nbd-opstream.py" "nbd+unix:///?socket=$s" $seed 300 >"$T/$form-$k.ops" ||
      fail "$form: $k: the request stream failed"
    stop_fg $form-$k
    [ "$exit_status" = 0 ] || fail "$form: $k: exit status $exit_status"
  done
  diff -u "$T/$form-qemu.view" "$T/$form-ours.view" ||
    fail "$form: nbdinfo's view differs (- qemu-nbd, + nbdstack-nbd)"
  cmp "$T/qemu.img" "$T/ours.img" || fail "$form: the devices differ after the same requests"
  echo "$form: same view and data on block devices"
done

for prog in "$QEMU_NBD" "$NBDSTACK_NBD"; do
  rc=$(status_of "$prog" -k "$T/x.sock" \
    "json:{\"driver\": \"raw\", \"file\": {\"driver\": \"file\", \"filename\": \"${dev[ours]}\"}}")
  [ "$rc" = 1 ] || fail "$prog: the file driver on a block device: exit status $rc, expected 1"
done
