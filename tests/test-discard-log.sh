#!/usr/bin/env bash
# discard: the exact requests that reach the plugin and what is
# advertised, for every mode and option, granularity and discard-max
# edges, unaligned and tiny trims, and FUA (native and emulated).
# nbdkit's log filter sits right below the discard filter; the requests
# above it are the ones this script sends.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh
require_filter_version
DF=$(filter_so discard)
# nbdkit takes about a second to exit: signal every server at once.

PY='
import os
PAT = bytes(range(256)) * 256            # 64K of non-zero-ish data
def readback(off, n):
    return h.pread(n, off)
'

# run_case NAME SCRIPT [FILTERS-BELOW...] -- [PLUGIN ARGS...]: see
# run_log_case in functions.sh; expect NAME <<EOF: exactly these requests.
run_case () { run_log_case "$DF" "$PY" "$@"; }
expect () { expect_requests "$@"; }

# ---- pass (default): trims and zeroes go down unchanged
run_case pass "
assert h.can_trim() and h.can_zero() and h.can_fast_zero()
h.trim(0x1000, 0)
h.trim(0x1001, 3)                                # unaligned, odd size
h.trim(1, 0x3fffff)                              # last byte
h.zero(0x1000, 0)
h.zero(0x1000, 0, nbd.CMD_FLAG_NO_HOLE)
h.zero(0x1000, 0, nbd.CMD_FLAG_FAST_ZERO)
h.trim(0x1000, 0, nbd.CMD_FLAG_FUA)
" --
expect pass <<'EOF'
Trim offset=0x0 count=0x1000 fua=0
Trim offset=0x3 count=0x1001 fua=0
Trim offset=0x3fffff count=0x1 fua=0
Zero offset=0x0 count=0x1000 trim=1 fua=0 fast=0
Zero offset=0x0 count=0x1000 trim=0 fua=0 fast=0
Zero offset=0x0 count=0x1000 trim=1 fua=0 fast=1
Trim offset=0x0 count=0x1000 fua=1
EOF
stop_nbdkit pass
grep -Eq 'discard: mode=pass granularity=0 max=0 zero-trim=keep trims=4 trim_bytes=12290 trim_reqs=4 trimmed_bytes=12290 zeroed_reqs=0 zeroed_bytes=0 dropped_bytes=0 zeroes=3 zero_bytes=12288 may_trim_cleared=0 may_trim_set=0$' \
  "$(logfile pass)" || fail "discard counters missing or wrong in $(logfile pass)"

# ---- ignore: advertised, succeeds, data untouched (also with FUA)
run_case ignore "
assert h.can_trim()
h.pwrite(PAT, 0x10000)
h.trim(0x10000, 0x10000)
h.trim(0x10000, 0x10000, nbd.CMD_FLAG_FUA)
h.trim(1, 0x10005)
assert readback(0x10000, 0x10000) == PAT, 'ignore changed the data'
" -- discard=ignore
expect ignore <<'EOF'
Write offset=0x10000 count=0x10000 fua=0
EOF

# ---- zero: trim becomes zero with MAY_TRIM; reads return zeroes after
run_case zero "
assert h.can_trim()
h.pwrite(PAT, 0x10000)
h.trim(0x10000, 0x10000)
assert readback(0x10000, 0x10000) == bytes(0x10000), 'not zero after trim'
h.pwrite(PAT, 0x10000)
h.trim(3, 0x10001, nbd.CMD_FLAG_FUA)
assert readback(0x10000, 0x10000) == PAT[:1] + bytes(3) + PAT[4:]
" -- discard=zero
expect zero <<'EOF'
Write offset=0x10000 count=0x10000 fua=0
Zero offset=0x10000 count=0x10000 trim=1 fua=0 fast=0
Write offset=0x10000 count=0x10000 fua=0
Zero offset=0x10001 count=0x3 trim=1 fua=1 fast=0
EOF

# ---- refuse: trim not advertised; the server rejects it
run_case refuse "
assert not h.can_trim()
assert h.can_zero()
h.pwrite(PAT, 0)
try:
    h.trim(0x1000, 0)
    raise Exception('trim succeeded on discard=refuse')
except nbd.Error:
    pass
h.zero(0x1000, 0)
" -- discard=refuse
expect refuse <<'EOF'
Write offset=0x0 count=0x10000 fua=0
Zero offset=0x0 count=0x1000 trim=1 fua=0 fast=0
EOF

# ---- granularity in pass mode: shrink inward, drop what is left over
run_case gpass "
h.trim(0x30000, 0x8000)          # head and tail partial
h.trim(0x1000, 0x1000)           # no whole block: dropped
h.trim(0x10000, 0x10000)         # exactly one block
h.trim(0x1ffff, 0x10001)         # [0x10001, 0x30000)
h.trim(0x20000, 0x3e0000)        # up to the end of the export
h.trim(0x10, 0x3ffff0)           # tail of the export, no whole block
h.trim(1, 5)                     # tiny
h.trim(0x400000, 0)              # the whole export
" -- discard-granularity=64K
expect gpass <<'EOF'
Trim offset=0x10000 count=0x20000 fua=0
Trim offset=0x10000 count=0x10000 fua=0
Trim offset=0x20000 count=0x10000 fua=0
Trim offset=0x3e0000 count=0x20000 fua=0
Trim offset=0x0 count=0x400000 fua=0
EOF

# ---- granularity in zero mode: the unaligned edges are zeroed without
# MAY_TRIM, the aligned middle with it
run_case gzero "
h.pwrite(PAT * 4, 0)
h.trim(0x30000, 0x8000)
assert readback(0, 0x40000) == PAT[:0x8000] + bytes(0x30000) + PAT[0x8000:]
h.trim(0x1000, 0x1000)
h.trim(0x10000, 0x10000)
h.trim(0x10, 0x3ffff0)
" -- discard=zero discard-granularity=64K
expect gzero <<'EOF'
Write offset=0x0 count=0x40000 fua=0
Zero offset=0x8000 count=0x8000 trim=0 fua=0 fast=0
Zero offset=0x10000 count=0x20000 trim=1 fua=0 fast=0
Zero offset=0x30000 count=0x8000 trim=0 fua=0 fast=0
Zero offset=0x1000 count=0x1000 trim=0 fua=0 fast=0
Zero offset=0x10000 count=0x10000 trim=1 fua=0 fast=0
Zero offset=0x3ffff0 count=0x10 trim=0 fua=0 fast=0
EOF

# ---- discard-max: split into pieces of at most M
run_case max "
h.trim(0x30000, 0x1000)
h.trim(0x100, 0)
h.trim(0x10001, 0)
" -- discard-max=64K
expect max <<'EOF'
Trim offset=0x1000 count=0x10000 fua=0
Trim offset=0x11000 count=0x10000 fua=0
Trim offset=0x21000 count=0x10000 fua=0
Trim offset=0x0 count=0x100 fua=0
Trim offset=0x0 count=0x10000 fua=0
Trim offset=0x10000 count=0x1 fua=0
EOF

run_case gmax "
h.trim(0x50000, 0x8000)
h.trim(0x50000, 0x8000, nbd.CMD_FLAG_FUA)      # FUA native: on every piece
" -- discard-granularity=64K discard-max=128K
expect gmax <<'EOF'
Trim offset=0x10000 count=0x20000 fua=0
Trim offset=0x30000 count=0x20000 fua=0
Trim offset=0x10000 count=0x20000 fua=1
Trim offset=0x30000 count=0x20000 fua=1
EOF

run_case gmaxzero "
h.trim(0x50000, 0x8000)
" -- discard=zero discard-granularity=64K discard-max=128K
expect gmaxzero <<'EOF'
Zero offset=0x8000 count=0x8000 trim=0 fua=0 fast=0
Zero offset=0x10000 count=0x20000 trim=1 fua=0 fast=0
Zero offset=0x30000 count=0x20000 trim=1 fua=0 fast=0
Zero offset=0x50000 count=0x8000 trim=0 fua=0 fast=0
EOF

# ---- FUA emulated below: pieces without FUA, one flush after the last;
# no flush when everything was dropped
run_case fuaemu "
h.trim(0x20000, 0, nbd.CMD_FLAG_FUA)
h.trim(0x800, 0x800, nbd.CMD_FLAG_FUA)
h.trim(0x1000, 0, nbd.CMD_FLAG_FUA)
" --filter=fua -- fuamode=emulate discard-max=64K discard-granularity=4K
expect fuaemu <<'EOF'
Trim offset=0x0 count=0x10000 fua=0
Trim offset=0x10000 count=0x10000 fua=0
Flush
Trim offset=0x0 count=0x1000 fua=0
Flush
EOF

# ---- discard-zero-trim
run_case never "
h.zero(0x1000, 0)
h.zero(0x1000, 0, nbd.CMD_FLAG_NO_HOLE)
h.zero(0x1000, 0, nbd.CMD_FLAG_FAST_ZERO | nbd.CMD_FLAG_FUA)
h.trim(0x1000, 0)                # zero mode: MAY_TRIM removed as well
" -- discard=zero discard-zero-trim=never
expect never <<'EOF'
Zero offset=0x0 count=0x1000 trim=0 fua=0 fast=0
Zero offset=0x0 count=0x1000 trim=0 fua=0 fast=0
Zero offset=0x0 count=0x1000 trim=0 fua=1 fast=1
Zero offset=0x0 count=0x1000 trim=0 fua=0 fast=0
EOF
stop_nbdkit never
grep -q 'may_trim_cleared=3 may_trim_set=0$' "$(logfile never)" ||
  fail "discard counters wrong in $(logfile never)"

run_case always "
h.zero(0x1000, 0)
h.zero(0x1000, 0, nbd.CMD_FLAG_NO_HOLE)
h.trim(0x1000, 0)                # pass mode: trim stays trim
" -- discard-zero-trim=always
expect always <<'EOF'
Zero offset=0x0 count=0x1000 trim=1 fua=0 fast=0
Zero offset=0x0 count=0x1000 trim=1 fua=0 fast=0
Trim offset=0x0 count=0x1000 fua=0
EOF

# ---- zero mode needs zero requests below: without them, no trim
run_case zero-nozero "
assert not h.can_trim()
" --filter=nozero -- discard=zero zeromode=none
expect zero-nozero </dev/null
run_case zero-emulated "
assert h.can_trim()
h.pwrite(PAT, 0)
h.trim(0x1000, 0)
assert readback(0, 0x1000) == bytes(0x1000)
" --filter=nozero -- discard=zero zeromode=emulate
# nbdkit itself turns a zero request to a layer that only emulates
# zeroing into a write of zeroes.
expect zero-emulated <<'EOF'
Write offset=0x0 count=0x10000 fua=0
Write offset=0x0 count=0x1000 fua=0
EOF

# ---- read-only: nothing is advertised, whatever the mode
start_nbdkit ro -r --filter="$DF" memory 1M discard=ignore
nbdsh -u "$(uri ro)" -c 'assert h.is_read_only() and not h.can_trim()'

echo "PASS: discard requests are as expected"
