#!/usr/bin/env bash
# zerodetect: differential random-operation tests.  Whatever the filter
# splits, the export must hold exactly what was written, byte for byte.
#  1. $RANDOPS (the shared client: writes, zeroes, trims, flushes, FUA,
#     several connections) through zerodetect over memory, file and image.
#  2. randops writes random data only, which never contains zero blocks,
#     so a second seeded client here writes buffers made of zero and
#     data runs (aligned and not, single stray bytes) at unaligned
#     offsets and checks them against an in-memory reference: this is
#     what drives the splitting code.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh
require_filter_version
ZD=$(filter_so zerodetect)
on_exit 'for p in "$T"/*.pid; do kill "$(cat "$p")" 2>/dev/null; done'
[ -x "$RANDOPS" ] || fail "$RANDOPS is not built"

SIZE=8M
ZERO_RUNS='
import random
r = random.Random(seed)
size = h.get_size()
ref = bytearray(h.pread(size, 0))
fua = h.can_fua()

def make_buf(off, n):
    b = bytearray(n)
    pos = 0
    while pos < n:
        unit = r.choice((512, 4096, 65536))
        run = r.choice((unit, 2 * unit, r.randrange(1, 3 * unit)))
        end = min(n, pos + run)
        if r.random() < 0.4:
            b[pos:end] = r.randbytes(end - pos)
        pos = end
    for _ in range(r.choice((0, 0, 1, 3))):      # stray bytes in zero runs
        b[r.randrange(n)] = r.randrange(1, 256)
    for _ in range(r.choice((0, 1, 2))):         # and at block edges
        unit = r.choice((512, 4096, 65536))
        edge = off + r.randrange(0, n + unit, unit)
        edge -= edge % unit
        i = edge - off + r.choice((-1, 0))
        if 0 <= i < n:
            b[i] = r.randrange(1, 256)
    return bytes(b)

for i in range(250):
    k = r.random()
    off = r.randrange(size)
    if r.random() < 0.3:
        off -= off % r.choice((512, 4096, 65536))
    n = r.randrange(1, min(size - off, 700000) + 1)
    if k < 0.7:
        buf = make_buf(off, n)
        flags = nbd.CMD_FLAG_FUA if fua and r.random() < 0.15 else 0
        h.pwrite(buf, off, flags)
        ref[off:off + n] = buf
    elif k < 0.8:
        h.zero(n, off, nbd.CMD_FLAG_NO_HOLE if r.random() < 0.5 else 0)
        ref[off:off + n] = bytes(n)
    elif k < 0.85:
        h.flush()
    else:
        got = h.pread(n, off)
        if got != ref[off:off + n]:
            raise Exception("seed %d op %d: read %d+%d differs" % (seed, i, off, n))
h.flush()
if h.pread(size, 0) != ref:
    raise Exception("seed %d: final contents differ from the reference" % seed)
'

n=0
# serve NAME PLUGIN [ARGS...]: start a server through zerodetect.
serve ()
{
  local name=$1 plugin=$2
  shift 2
  case $plugin in
    memory) start_nbdkit "$name" --filter="$ZD" memory $SIZE "$@" ;;
    file) truncate -s $SIZE "$T/$name.img"
          start_nbdkit "$name" --filter="$ZD" file file="$T/$name.img" "$@" ;;
    image) truncate -s $SIZE "$T/$name.img"
           start_nbdkit "$name" --filter="$ZD" "$IMAGE_PLUGIN" format=raw \
             file="$T/$name.img" "$@" ;;
  esac
}

# check PLUGIN RANDOPS(yes/no) PARAMS...
check ()
{
  local plugin=$1 randops=$2
  shift 2
  n=$((n + 1))
  serve "z$n" "$plugin" "$@"
  nbdsh -u "$(uri "z$n")" -c "seed = $n" -c "$ZERO_RUNS" ||
    fail "$plugin $*: zero-run differential failed (seed $n)"
  if [ "$randops" = yes ]; then
    "$RANDOPS" -c 2 -n 400 -s "$n" "$(uri "z$n")" >"$T/z$n.randops" ||
      fail "$plugin $*: randops failed (seed $n)"
  fi
  echo "$plugin $*: ok"
}

# Every mode and granularity edge over memory (fast); the modes that
# reach a file system over file and image.
check memory yes zerodetect=on
check memory no zerodetect=unmap zerodetect-granularity=4K
check memory no zerodetect=unmap zerodetect-granularity=512
check memory no zerodetect=on zerodetect-granularity=0
check memory no zerodetect=on zerodetect-granularity=64M
check memory no zerodetect=off
for plugin in file image; do
  check $plugin yes zerodetect=unmap zerodetect-granularity=4K
  check $plugin no zerodetect=on
done
echo "PASS: zerodetect keeps the data exact"
