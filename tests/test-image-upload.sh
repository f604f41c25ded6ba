#!/usr/bin/env bash
# image plugin, raw: real uploads into the export, as a client would do
# them: qemu-img convert -n -W and nbdcopy, into a sparse new target
# (create=true) and into one full of garbage (so that every hole in the
# source must really be zeroed), in both cache modes, verified with
# qemu-img compare against the file and over NBD.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdcopy

# Source: 48M virtual, data extents of varied sizes at unaligned-ish
# places, a written run of zeroes, holes elsewhere, data in the last
# sector.
src=$T/src.img
size=$((48 * 1024 * 1024))
truncate -s $size "$src"
w () { dd if=/dev/urandom of="$src" bs=512 seek="$1" count="$2" conv=notrunc status=none; }
w 0 8; w 100 1; w 2048 4096; w 20001 77; w 40000 12000; w $((size / 512 - 1)) 1
dd if=/dev/zero of="$src" bs=1M seek=30 count=3 conv=notrunc status=none

n=0
for cache in writeback none; do
  for client in convert nbdcopy; do
    for target in sparse garbage; do
      n=$((n + 1))
      dst=$T/dst-$n.img
      if [ $target = sparse ]; then
        args=(file="$dst" create=true size=$size)
      else
        head -c $size /dev/urandom >"$dst"
        args=(file="$dst")
      fi
      name=up-$n
      start_nbdkit $name "$IMAGE_PLUGIN" "${args[@]}" cache=$cache
      case $client in
        convert) "$QEMU_IMG" convert -n -W -f raw -O raw "$src" "$(uri $name)" ;;
        nbdcopy) nbdcopy --flush "$src" "$(uri $name)" ;;
      esac
      "$QEMU_IMG" compare -q -f raw -F raw "$src" "$dst" ||
        fail "$cache/$client/$target: file differs from the source"
      "$QEMU_IMG" compare -q -f raw -F raw "$src" "$(uri $name)" ||
        fail "$cache/$client/$target: export differs from the source"
      [ "$(stat -c %s "$dst")" -eq $size ] || fail "$cache/$client/$target: size changed"
      # Holes in the source stay holes in a sparse target.
      if [ $target = sparse ]; then
        used=$(( $(stat -c %b "$dst") * 512 ))
        [ $used -lt $((16 * 1024 * 1024)) ] ||
          fail "$cache/$client/$target: target not sparse ($used bytes used)"
      fi
    done
  done
done
