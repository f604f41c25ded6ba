#!/usr/bin/env bash
# zerodetect, discard and the coalesce filter stacked in several orders
# over memory, file and image: differential tests (the zero-run client
# with trims that must read back as zero, and $RANDOPS) must match
# their reference byte for byte, and with zerodetect=unmap above the
# write-back buffer only the non-zero data ends up allocated.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh
require_filter_version
ZD=$(filter_so zerodetect)
DF=$(filter_so discard)
CO=$(filter_so coalesce)
[ -x "$RANDOPS" ] || fail "$RANDOPS is not built"
[ -f "$CO" ] || fail "$CO is not built"
ZERO_RUNS=$(cat "$srcdir/test-zerodetect-zero-runs.py")
PARAMS=(zerodetect=unmap zerodetect-granularity=4K
        discard=zero discard-granularity=64K discard-max=256K)

n=0
for stack in zd-co-df:memory co-zd-df:file df-co-zd:image zd-df-co:memory; do
  plugin=${stack#*:}
  stack=${stack%:*}
  filters=()
  for f in ${stack//-/ }; do
    case $f in
      zd) filters+=(--filter="$ZD") ;;
      df) filters+=(--filter="$DF") ;;
      co) filters+=(--filter="$CO") ;;
    esac
  done
  n=$((n + 1))
  case $plugin in
    memory) pargs=(memory 8M) ;;
    file) truncate -s 8M "$T/c$n.img"; pargs=(file file="$T/c$n.img") ;;
    image) truncate -s 8M "$T/c$n.img"
           pargs=("$IMAGE_PLUGIN" format=raw file="$T/c$n.img") ;;
  esac
  start_nbdkit "c$n" "${filters[@]}" "${pargs[@]}" "${PARAMS[@]}"
  nbdsh -u "$(uri "c$n")" -c "seed = $n" -c "trim_zero = True" -c "$ZERO_RUNS" ||
    fail "$stack $plugin: zero-run differential failed (seed $n)"
  "$RANDOPS" -c 2 -n 200 -s "$n" --trim-reads-zero "$(uri "c$n")" >"$T/c$n.randops" ||
    fail "$stack $plugin: randops failed (seed $n)"
  echo "$stack $plugin: ok"
done

# zerodetect=unmap above coalesce, over a file: after a flush only the
# two 64K data blocks of a 2M write are allocated.
img=$T/alloc.img
truncate -s 8M "$img"
start_nbdkit alloc --filter="$ZD" --filter="$CO" file file="$img" zerodetect=unmap
nbdsh -u "$(uri alloc)" -c '
import os
data = bytearray(0x200000)
data[0x10000:0x20000] = os.urandom(0x10000)
data[0x160000:0x170000] = os.urandom(0x10000)
h.pwrite(bytes(data), 0x100000)
h.flush()
assert h.pread(0x200000, 0x100000) == data
'
alloc=$(($(stat -c %b "$img") * 512))
[ "$alloc" -eq $((128 * 1024)) ] ||
  fail "zerodetect over coalesce: $alloc bytes allocated, expected 131072"
echo "PASS: zerodetect, discard and coalesce stack"
