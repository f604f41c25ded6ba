#!/usr/bin/env bash
# zerodetect: the effect on a real file, through nbdkit's file plugin and
# our image plugin (raw): with unmap only the non-zero data ends up
# allocated (qemu-img map, stat); with on, zeroes written over data keep
# the space allocated; with off, zeroes are written as data.  The
# contents always read back as written.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh
require filefrag
require_filter_version
ZD=$(filter_so zerodetect)

# The data extents of a raw file as "start+length" lines (qemu-img map
# asks the file system with SEEK_DATA/SEEK_HOLE).
data_extents ()
{
  "$QEMU_IMG" map -f raw --output=json "$1" |
    python3 -c '
import json, sys
for e in json.load(sys.stdin):
    if e["data"]:
        print("%d+%d" % (e["start"], e["length"]))'
}
# Bytes in extents allocated but unwritten (reading as zero): what
# fallocate(ZERO_RANGE) leaves behind.
unwritten ()
{
  filefrag -v "$1" |
    awk -F: '/unwritten/ { split($4, l, " "); n += l[1] } END { print n * 4096 }'
}
# Allocated bytes of a file.
allocated () { echo $(($(stat -c '%b' "$1") * 512)); }

# A 2M write with 64K of random data at 64K and at 1408K, zero elsewhere;
# the same bytes are kept in $T/expected to compare with.
WRITE='
data = bytearray(0x200000)
data[0x10000:0x20000] = os.urandom(0x10000)
data[0x160000:0x170000] = os.urandom(0x10000)
h.pwrite(bytes(data), 0x100000)
open(expected, "r+b").write(bytes(0x100000) + bytes(data))
'

n=0
for plugin in file image; do
  case $plugin in
    file) pargs=(file) ;;
    image) pargs=("$IMAGE_PLUGIN" format=raw) ;;
  esac
  for mode in unmap on off; do
    n=$((n + 1))
    img="$T/$plugin-$mode.img"
    truncate -s 8M "$img"
    truncate -s 8M "$T/expected"
    start_nbdkit "a$n" --filter="$ZD" "${pargs[@]}" file="$img" zerodetect=$mode
    nbdsh -u "$(uri "a$n")" -c 'import os' -c "expected = '$T/expected'" -c "$WRITE"
    cmp "$img" "$T/expected" || fail "$plugin $mode: contents differ"
    ext=$(data_extents "$img" | tr '\n' ' ')
    uw=$(unwritten "$img")
    case $mode in
      unmap)
        # Only the data was written: exactly the two 64K extents.
        [ "$ext" = "1114112+65536 2490368+65536 " ] ||
          fail "$plugin $mode: data extents are '$ext', expected only the two data blocks"
        ;;
      on)
        # Space allocated for all of it, but the zeroes were never
        # written: allocated-unwritten extents.
        [ "$ext" = "1048576+2097152 " ] ||
          fail "$plugin $mode: data extents are '$ext', expected the whole write"
        [ "$uw" -ge $((1024 * 1024)) ] ||
          fail "$plugin on: only $uw bytes allocated-unwritten, zeroes were written as data"
        ;;
      off)
        [ "$ext" = "1048576+2097152 " ] ||
          fail "$plugin $mode: data extents are '$ext', expected the whole write"
        [ "$uw" -eq 0 ] || fail "$plugin off: $uw bytes unwritten: zeroes were not written"
        ;;
    esac

    # Now overwrite the data blocks with zeroes: unmap frees them, on
    # keeps them allocated (and reading as zero), off writes zeroes.
    before=$(allocated "$img")
    nbdsh -u "$(uri "a$n")" -c "
h.pwrite(bytes(0x200000), 0x100000)
assert h.pread(0x200000, 0x100000) == bytes(0x200000)
"
    after=$(allocated "$img")
    cmp "$img" <(head -c 8M /dev/zero) || fail "$plugin $mode: not all zero"
    case $mode in
      unmap)
        [ "$after" -eq 0 ] ||
          fail "$plugin unmap: $after bytes still allocated after writing zeroes"
        ;;
      on)
        # (compared with the 2M written, not with $before: ext4 may
        # count an extent-tree block in one and not the other)
        [ "$after" -ge $((2 * 1024 * 1024)) ] ||
          fail "$plugin on: allocation shrank from $before to $after"
        ;;
      off)
        [ "$after" -ge $((2 * 1024 * 1024)) ] ||
          fail "$plugin off: only $after bytes allocated after writing 2M"
        ;;
    esac
    echo "$plugin $mode: ok (allocated $before -> $after)"
  done
done
echo "PASS: zerodetect allocation is as expected"
