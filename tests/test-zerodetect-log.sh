#!/usr/bin/env bash
# zerodetect: the exact requests that reach the plugin, for every mode,
# granularity edges, unaligned and tiny writes, FUA (native and emulated)
# and a layer below that only emulates zeroing.  nbdkit's log filter sits
# right below zerodetect; the requests above it are the ones this script
# sends.  (nbdkit 1.32 cannot stack two log filters with separate files:
# both instances share one .so and the outer one consumes logfile=.)
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh
require_filter_version
ZD=$(filter_so zerodetect)
# nbdkit takes about a second to exit: signal every server at once.

# Python helpers for the nbdsh scripts: buf(n, [i...]) is n zero bytes
# with a 1 at each index i.
PY='
import os
def buf(n, data_at=()):
    b = bytearray(n)
    for i in data_at:
        b[i] = 1
    return bytes(b)
'

# run_case NAME SCRIPT [FILTERS-BELOW...] -- [PLUGIN ARGS...]:
# run_case NAME SCRIPT [FILTERS-BELOW...] -- [PLUGIN ARGS...]: see
# run_log_case in functions.sh; expect NAME <<EOF: exactly these requests.
run_case () { run_log_case "$ZD" "$PY" "$@"; }
expect () { expect_requests "$@"; }

# The 2M write of the issue: data in 64K block 1 (byte 70000) and block
# 22 (byte 1500000), zeroes elsewhere.
TWO_MEG='h.pwrite(buf(0x200000, [70000, 1500000]), 0'

# ---- default: zerodetect=on, granularity 64K
run_case on "
h.pwrite(buf(0x40000), 0)                    # all zero, aligned
h.pwrite(buf(1), 3)                          # tiny and unaligned
$TWO_MEG)
h.pwrite(buf(0x20000, [0]), 0x101000)        # unaligned, data in the head
h.pwrite(buf(0x30000, [0x8000]), 0x208000)   # partial zero head and tail
h.pwrite(os.urandom(0x20000), 0x300000)      # plain data
b = bytearray(os.urandom(0x30000)); b[0x10000:0x20000] = bytes(0x10000)
h.pwrite(bytes(b), 0x300000)                 # one zero block in data
h.pwrite(buf(0x30000, [0x2ffff]), 0x340000)  # data in the very last byte
h.pwrite(buf(0x12345), 0x380001)             # all zero, unaligned, odd size
h.pwrite(buf(0x30000, [0, 0x1ffff]), 0x3b0000) # block edges after data
h.zero(0x1000, 0x3a0000)                     # client zeroes pass untouched
h.zero(0x1000, 0x3a0000, nbd.CMD_FLAG_NO_HOLE)
h.zero(0x1000, 0x3a0000, nbd.CMD_FLAG_FAST_ZERO | nbd.CMD_FLAG_FUA)
h.trim(0x1000, 0x3a0000)
h.pwrite(buf(0x10000, [0xffff]), 0x3f0000)   # last block of the export
h.pwrite(buf(0x800), 0x3ff800)               # zeroes up to the end
$TWO_MEG, nbd.CMD_FLAG_FUA)                  # FUA, native below
h.flush()
" --
expect on <<'EOF'
Zero offset=0x0 count=0x40000 trim=0 fua=0 fast=0
Zero offset=0x3 count=0x1 trim=0 fua=0 fast=0
Zero offset=0x0 count=0x10000 trim=0 fua=0 fast=0
Write offset=0x10000 count=0x10000 fua=0
Zero offset=0x20000 count=0x140000 trim=0 fua=0 fast=0
Write offset=0x160000 count=0x10000 fua=0
Zero offset=0x170000 count=0x90000 trim=0 fua=0 fast=0
Write offset=0x101000 count=0xf000 fua=0
Zero offset=0x110000 count=0x10000 trim=0 fua=0 fast=0
Write offset=0x120000 count=0x1000 fua=0
Write offset=0x208000 count=0x18000 fua=0
Zero offset=0x220000 count=0x10000 trim=0 fua=0 fast=0
Write offset=0x230000 count=0x8000 fua=0
Write offset=0x300000 count=0x20000 fua=0
Write offset=0x300000 count=0x10000 fua=0
Zero offset=0x310000 count=0x10000 trim=0 fua=0 fast=0
Write offset=0x320000 count=0x10000 fua=0
Zero offset=0x340000 count=0x20000 trim=0 fua=0 fast=0
Write offset=0x360000 count=0x10000 fua=0
Zero offset=0x380001 count=0x12345 trim=0 fua=0 fast=0
Write offset=0x3b0000 count=0x20000 fua=0
Zero offset=0x3d0000 count=0x10000 trim=0 fua=0 fast=0
Zero offset=0x3a0000 count=0x1000 trim=1 fua=0 fast=0
Zero offset=0x3a0000 count=0x1000 trim=0 fua=0 fast=0
Zero offset=0x3a0000 count=0x1000 trim=1 fua=1 fast=1
Trim offset=0x3a0000 count=0x1000 fua=0
Write offset=0x3f0000 count=0x10000 fua=0
Zero offset=0x3ff800 count=0x800 trim=0 fua=0 fast=0
Zero offset=0x0 count=0x10000 trim=0 fua=1 fast=0
Write offset=0x10000 count=0x10000 fua=1
Zero offset=0x20000 count=0x140000 trim=0 fua=1 fast=0
Write offset=0x160000 count=0x10000 fua=1
Zero offset=0x170000 count=0x90000 trim=0 fua=1 fast=0
Flush
EOF
# Counters are logged at exit (-v).
stop_nbdkit on
grep -q 'zerodetect: mode=on granularity=65536 writes=13 ' "$(logfile on)" ||
  fail "zerodetect counters missing or wrong in $(logfile on)"

# ---- unmap: the same pieces, with MAY_TRIM
run_case unmap "
$TWO_MEG)
h.pwrite(buf(0x1000), 0x1000)
" -- zerodetect=unmap
expect unmap <<'EOF'
Zero offset=0x0 count=0x10000 trim=1 fua=0 fast=0
Write offset=0x10000 count=0x10000 fua=0
Zero offset=0x20000 count=0x140000 trim=1 fua=0 fast=0
Write offset=0x160000 count=0x10000 fua=0
Zero offset=0x170000 count=0x90000 trim=1 fua=0 fast=0
Zero offset=0x1000 count=0x1000 trim=1 fua=0 fast=0
EOF
stop_nbdkit unmap
grep -Eq 'zerodetect: mode=unmap granularity=65536 writes=2 write_bytes=2101248 passed=0 whole_zero=1 split=1 zero_reqs=4 zero_bytes=1970176 data_reqs=2 data_bytes=131072$' \
  "$(logfile unmap)" || fail "zerodetect counters wrong in $(logfile unmap)"

# ---- off: writes pass unchanged
run_case off "
$TWO_MEG)
h.pwrite(buf(0x1000), 0x1000)
" -- zerodetect=off
expect off <<'EOF'
Write offset=0x0 count=0x200000 fua=0
Write offset=0x1000 count=0x1000 fua=0
EOF

# ---- granularity 0: whole requests only (what qemu does)
run_case g0 "
$TWO_MEG)
h.pwrite(buf(0x1000), 0x1000)
" -- zerodetect-granularity=0
expect g0 <<'EOF'
Write offset=0x0 count=0x200000 fua=0
Zero offset=0x1000 count=0x1000 trim=0 fua=0 fast=0
EOF

# ---- small granularities, aligned to the absolute offset
run_case g4k "
b = bytearray(0x10000); b[0x1000:0x2000] = os.urandom(0x1000)
h.pwrite(bytes(b), 0)
" -- zerodetect-granularity=4K
expect g4k <<'EOF'
Zero offset=0x0 count=0x1000 trim=0 fua=0 fast=0
Write offset=0x1000 count=0x1000 fua=0
Zero offset=0x2000 count=0xe000 trim=0 fua=0 fast=0
EOF

run_case g512 "
h.pwrite(buf(0x800, [0x300]), 0x100)
" -- zerodetect-granularity=512
expect g512 <<'EOF'
Write offset=0x100 count=0x100 fua=0
Zero offset=0x200 count=0x200 trim=0 fua=0 fast=0
Write offset=0x400 count=0x200 fua=0
Zero offset=0x600 count=0x200 trim=0 fua=0 fast=0
Write offset=0x800 count=0x100 fua=0
EOF

# Larger than any request: a partly zero write is never split.
run_case g64m "
$TWO_MEG)
" -- zerodetect-granularity=64M
expect g64m <<'EOF'
Write offset=0x0 count=0x200000 fua=0
EOF

# ---- FUA emulated below: pieces go without FUA, then exactly one flush
run_case fuaemu "
$TWO_MEG, nbd.CMD_FLAG_FUA)
h.pwrite(buf(0x1000), 0x1000, nbd.CMD_FLAG_FUA)
h.pwrite(os.urandom(0x1000), 0x1000, nbd.CMD_FLAG_FUA)
" --filter=fua -- fuamode=emulate
expect fuaemu <<'EOF'
Zero offset=0x0 count=0x10000 trim=0 fua=0 fast=0
Write offset=0x10000 count=0x10000 fua=0
Zero offset=0x20000 count=0x140000 trim=0 fua=0 fast=0
Write offset=0x160000 count=0x10000 fua=0
Zero offset=0x170000 count=0x90000 trim=0 fua=0 fast=0
Flush
Zero offset=0x1000 count=0x1000 trim=0 fua=0 fast=0
Flush
Write offset=0x1000 count=0x1000 fua=0
Flush
EOF

# ---- zeroing only emulated below: writes pass unchanged
for zm in emulate none; do
  run_case "nozero-$zm" "
h.pwrite(buf(0x40000), 0)
$TWO_MEG, nbd.CMD_FLAG_FUA)
" --filter=nozero -- zeromode=$zm
  expect "nozero-$zm" <<'EOF'
Write offset=0x0 count=0x40000 fua=0
Write offset=0x0 count=0x200000 fua=1
EOF
done

# ---- the data must be intact whatever the splitting: read back the 2M
# write made through each configuration above against the reference
start_nbdkit check --filter="$ZD" memory 4M zerodetect-granularity=512
nbdsh -u "$(uri check)" -c "$PY" -c '
import random
r = random.Random(7)
ref = bytearray(4 << 20)
for i in range(200):
    off = r.randrange(0, (4 << 20) - 1)
    n = r.randrange(1, min(300000, (4 << 20) - off) + 1)
    b = bytearray(n)
    # data bytes scattered sparsely so many 512 blocks stay zero
    for j in range(r.randrange(0, 8)):
        b[r.randrange(0, n)] = r.randrange(1, 256)
    h.pwrite(bytes(b), off)
    ref[off:off + n] = b
assert h.pread(4 << 20, 0) == ref, "contents differ from the reference"
'
echo "PASS: zerodetect requests are as expected"
