#!/usr/bin/env bash
# zerodetect and discard stacked in both orders: the requests reaching the
# plugin show which filter acts on what (the order matters for
# discard-zero-trim), and differential tests through both stacks over
# memory, file and image must match their reference byte for byte.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh
require_filter_version
ZD=$(filter_so zerodetect)
DF=$(filter_so discard)
[ -x "$RANDOPS" ] || fail "$RANDOPS is not built"
ZERO_RUNS=$(cat "$srcdir/test-zerodetect-zero-runs.py")

# run_case NAME SCRIPT FILTERS... -- PARAMS...: log filter right above
# the memory plugin.
run_case ()
{
  local name=$1 script=$2
  shift 2
  local filters=()
  while [ "$1" != "--" ]; do filters+=("$1"); shift; done
  shift
  start_nbdkit "$name" "${filters[@]}" --filter=log \
    memory 4M logfile="$T/$name-requests.log" "$@"
  nbdsh -u "$(uri "$name")" -c "$script"
  log_requests "$T/$name-requests.log" >"$T/$name.got"
}
expect ()
{
  cat >"$T/$1.want"
  diff -u "$T/$1.want" "$T/$1.got" || fail "$1: unexpected requests at the plugin"
}

SCRIPT='
h.pwrite(bytes(0x10000), 0)                  # zero write
h.zero(0x10000, 0)                           # client zero, MAY_TRIM
h.trim(0x20000, 0x8000)                      # trim, unaligned
'
PARAMS=(zerodetect=unmap discard=zero discard-granularity=64K
        discard-zero-trim=never)

# zerodetect above discard: discard sees zerodetect's zero requests too,
# so never strips MAY_TRIM from them; trims pass zerodetect untouched.
run_case zd-over-df "$SCRIPT" --filter="$ZD" --filter="$DF" -- "${PARAMS[@]}"
expect zd-over-df <<'EOF'
Zero offset=0x0 count=0x10000 trim=0 fua=0 fast=0
Zero offset=0x0 count=0x10000 trim=0 fua=0 fast=0
Zero offset=0x8000 count=0x8000 trim=0 fua=0 fast=0
Zero offset=0x10000 count=0x10000 trim=0 fua=0 fast=0
Zero offset=0x20000 count=0x8000 trim=0 fua=0 fast=0
EOF

# discard above zerodetect: zerodetect's zero requests are made below
# discard and keep MAY_TRIM (unmap); the client's zero and the zero made
# from the trim pass through zerodetect untouched.
run_case df-over-zd "$SCRIPT" --filter="$DF" --filter="$ZD" -- "${PARAMS[@]}"
expect df-over-zd <<'EOF'
Zero offset=0x0 count=0x10000 trim=1 fua=0 fast=0
Zero offset=0x0 count=0x10000 trim=0 fua=0 fast=0
Zero offset=0x8000 count=0x8000 trim=0 fua=0 fast=0
Zero offset=0x10000 count=0x10000 trim=0 fua=0 fast=0
Zero offset=0x20000 count=0x8000 trim=0 fua=0 fast=0
EOF

# discard=refuse under zerodetect: trim is not advertised through the
# whole stack; discard=ignore: advertised, nothing reaches the plugin.
run_case refuse "
assert not h.can_trim()
h.pwrite(bytes(0x1000), 0)
" --filter="$ZD" --filter="$DF" -- discard=refuse
expect refuse <<'EOF'
Zero offset=0x0 count=0x1000 trim=0 fua=0 fast=0
EOF
run_case ignore "
assert h.can_trim()
h.trim(0x10000, 0)
h.pwrite(bytes(0x1000), 0)
" --filter="$ZD" --filter="$DF" -- discard=ignore zerodetect=unmap
expect ignore <<'EOF'
Zero offset=0x0 count=0x1000 trim=1 fua=0 fast=0
EOF

# ---- differential, both orders, over memory and one file-backed plugin
n=0
for order in zd-df:memory zd-df:file df-zd:memory df-zd:image; do
  plugin=${order#*:}
  order=${order%:*}
  case $order in
    zd-df) filters=(--filter="$ZD" --filter="$DF") ;;
    df-zd) filters=(--filter="$DF" --filter="$ZD") ;;
  esac
  {
    n=$((n + 1))
    case $plugin in
      memory) pargs=(memory 8M) ;;
      file) truncate -s 8M "$T/s$n.img"; pargs=(file file="$T/s$n.img") ;;
      image) truncate -s 8M "$T/s$n.img"
             pargs=("$IMAGE_PLUGIN" format=raw file="$T/s$n.img") ;;
    esac
    start_nbdkit "s$n" "${filters[@]}" "${pargs[@]}" \
      zerodetect=unmap zerodetect-granularity=4K \
      discard=zero discard-granularity=64K discard-max=256K
    nbdsh -u "$(uri "s$n")" -c "seed = $n" -c "trim_zero = True" -c "$ZERO_RUNS" ||
      fail "$order $plugin: zero-run differential failed (seed $n)"
    "$RANDOPS" -c 2 -n 200 -s "$n" --trim-reads-zero "$(uri "s$n")" >"$T/s$n.randops" ||
      fail "$order $plugin: randops failed (seed $n)"
    echo "$order $plugin: ok"
  }
done
echo "PASS: zerodetect and discard stack in both orders"
