#!/usr/bin/env bash
# coalesce: a flush (or FUA write) covers every byte acknowledged before
# it, whatever happens to those bytes while it runs.  W1 is acknowledged
# into the buffer; a flush starts and is kept busy writing older data
# below (nbdkit's delay filter); meanwhile W1's bytes are overwritten,
# zeroed, or covered by a zero that then fails.  Once the flush has
# answered OK, kill -9: the file must hold W1 or what replaced it, never
# the bytes from before W1.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh
require_filter_version
CO=$(filter_so coalesce)

# race NAME [FILTER...] [-- PARAM...]: filters go below the delay filter.
race ()
{
  local name=$1; shift
  local filters=() params=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do filters+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  params=("$@")
  printf 'O%.0s' $(seq 4096) >"$T/block"
  for i in $(seq 1024); do cat "$T/block"; done >"$T/$name.img"
  start_nbdkit "$name" --filter="$CO" --filter=delay "${filters[@]}" \
    "$IMAGE_PLUGIN" file="$T/$name.img" coalesce-delay=3600000 \
    coalesce-threads=1 delay-write=1 delay-zero=1 "${params[@]}"
  CASE=$name URI="$(uri "$name")" nbdsh -c - <<'PY' || fail "$name: nbdsh failed"
import os, time
case = os.environ["CASE"]
h = nbd.NBD(); h.connect_uri(os.environ["URI"])
M = 1 << 20
def wait(c):
    while not h.aio_command_completed(c):
        h.poll(-1)
if case in ("overwrite", "fua"):
    h.pwrite(b"L" * 4096, 0)       # older: the flush writes it first (1 s)
    h.pwrite(b"A" * 4096, M)       # W1, acknowledged
    if case == "overwrite":
        c = h.aio_flush()
    else:
        c = h.aio_pwrite(b"F" * 512, 2 * M, flags=nbd.CMD_FLAG_FUA)
    time.sleep(0.2)
    h.pwrite(b"B" * 4096, M)       # replaces W1 while the flush is busy
    wait(c)
else:
    h.pwrite(b"A" * 4096, M)       # W1, acknowledged
    z = h.aio_zero(4096, M)        # 1 s below; fails in "zero-fails"
    time.sleep(0.2)
    h.flush()
PY
  kill -9 "$(pidof_srv "$name")"
  rm -f "$T/$name.pid"
  dd if="$T/$name.img" bs=4096 skip=256 count=1 status=none | head -c 8 \
    >"$T/$name.got"
  echo "$name: the file holds '$(tr '\0' 0 <"$T/$name.got")' at 1M"
}

race overwrite
grep -Eq '^(AAAAAAAA|BBBBBBBB)$' "$T/overwrite.got" ||
  fail "overwrite: acknowledged data lost behind a flush that said OK"
race fua
grep -Eq '^(AAAAAAAA|BBBBBBBB)$' "$T/fua.got" ||
  fail "fua: acknowledged data lost behind a FUA write that said OK"
race zero
[ "$(tr '\0' 0 <"$T/zero.got")" = 00000000 ] ||
  grep -q '^AAAAAAAA$' "$T/zero.got" ||
  fail "zero: acknowledged data lost behind a flush that said OK"
race zero-fails --filter=error -- error-zero=EIO error-zero-rate=100%
grep -q '^AAAAAAAA$' "$T/zero-fails.got" ||
  fail "zero-fails: a failed zero took acknowledged data out of the flush"
echo "coalesce flush race: OK"
