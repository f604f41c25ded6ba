#!/usr/bin/env bash
# coalesce: write errors from below (nbdkit's error filter, switched on
# and off by creating/removing a file) are never dropped:
#  1. a flush that cannot write the buffer fails, and keeps failing
#     while the errors last; once they stop the data is still there and
#     a flush succeeds and writes it;
#  2. a failure of the background writer is reported by the next
#     flush, once, even though that flush's retry succeeded;
#  3. a flood of writes into a full buffer while the plugin fails gets
#     errors instead of hanging, and every write that was acknowledged
#     is in the file after errors stop and a flush succeeds;
#  4. writethrough mode returns the error on the write itself;
#  5. writethrough with errors on a fifth of the writes below, from four
#     connections: no write answered OK loses its data;
#  6. once a retry has succeeded, writes into a full buffer wait for
#     write-back again instead of failing with the old error;
#  7. ... and write-back is not held off by the retry back-off (nor by
#     coalesce-delay) once the plugin works again;
#  8. a FUA write neither reports nor consumes a background failure: it
#     succeeds when its own write-back does, and the next flush reports.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh
require_filter_version
CO=$(filter_so coalesce)
ERR="$T/err"

# serve NAME [--filter=F...] [PARAM...]: extra filters go below the
# error filter.  Every write is buffered (-D coalesce.buffer_all=1):
# these cases are about buffered data; a write the filter sends down
# directly gets the plugin's error itself.
serve ()
{
  local name=$1; shift
  local filters=()
  while [ $# -gt 0 ] && [ "${1#--filter=}" != "$1" ]; do
    filters+=("$1"); shift
  done
  truncate -s 16M "$T/$name.img"
  start_nbdkit $name -v --filter="$CO" --filter=error "${filters[@]}" \
    file "$T/$name.img" error-pwrite=EIO error-pwrite-rate=100% \
    error-pwrite-file="$ERR" -D coalesce.buffer_all=1 "$@"
}
export ERR

# 1 and 2.
serve flush coalesce-delay=600000
serve bg coalesce-delay=50
URI1="$(uri flush)" URI2="$(uri bg)" DISK1="$T/flush.img" DISK2="$T/bg.img" \
timeout 60 nbdsh -c - <<'PY' || fail "cases 1-2 failed"
import os, time
def errs_on(): open(os.environ["ERR"], "w").close()
def errs_off(): os.remove(os.environ["ERR"])
def disk(name, off, n):
    with open(os.environ[name], "rb") as f:
        f.seek(off)
        return f.read(n)
def flush_fails(h):
    try:
        h.flush()
    except nbd.Error as e:
        assert e.errno == "EIO", "flush failed with %s" % e.errno
        return True
    return False

h = nbd.NBD(); h.connect_uri(os.environ["URI1"])
d = os.urandom(100000)
h.pwrite(d, 5000)          # acknowledged into the buffer
errs_on()
assert flush_fails(h), "flush succeeded although nothing could be written"
assert flush_fails(h), "second flush succeeded while errors persist"
assert h.pread(100000, 5000) == d, "failed data is no longer readable"
errs_off()
assert not flush_fails(h), "flush failed after errors stopped"
assert disk("DISK1", 5000, 100000) == d, "data lost after a failed flush"
assert not flush_fails(h)

g = nbd.NBD(); g.connect_uri(os.environ["URI2"])
errs_on()
d = os.urandom(70000)
g.pwrite(d, 123)
time.sleep(0.6)            # the background writer tries and fails
errs_off()
assert flush_fails(g), "background write error was dropped"
assert disk("DISK2", 123, 70000) == d, "retry did not write the data"
assert not flush_fails(g), "error reported twice after a good flush"
PY
grep -q "coalesce: writing .* failed" "$(logfile bg)" ||
  fail "background write error not logged"

# 3: flood a 1M buffer while the plugin fails.
serve flood coalesce-size=1M coalesce-delay=10
URI="$(uri flood)" DISK="$T/flood.img" \
timeout 120 nbdsh -c - <<'PY' || fail "case 3 failed (or hung)"
import os
h = nbd.NBD(); h.connect_uri(os.environ["URI"])
open(os.environ["ERR"], "w").close()
ref = bytearray(16 << 20)
acked = failed = 0
for i in range(256):
    d = os.urandom(16384)
    try:
        h.pwrite(d, i * 16384)
        ref[i * 16384:(i + 1) * 16384] = d
        acked += 1
    except nbd.Error as e:
        assert e.errno == "EIO", e.errno
        failed += 1
assert failed > 0, "no write failed: buffer not bounded?"
assert acked > 0
os.remove(os.environ["ERR"])
ok = False
for i in range(3):
    try:
        h.flush(); ok = True; break
    except nbd.Error:
        pass
assert ok, "flush never succeeded after errors stopped"
with open(os.environ["DISK"], "rb") as f:
    disk = f.read()
for i in range(256):
    s = slice(i * 16384, (i + 1) * 16384)
    if ref[s] != bytes(16384):
        assert disk[s] == ref[s], "acknowledged and flushed write %d missing" % i
print("flood: %d acked, %d failed" % (acked, failed))
PY

# 4: writethrough.
serve wt coalesce-mode=writethrough
URI="$(uri wt)" timeout 60 nbdsh -c - <<'PY' || fail "case 4 failed"
import os
h = nbd.NBD(); h.connect_uri(os.environ["URI"])
h.pwrite(b"a" * 512, 0)
open(os.environ["ERR"], "w").close()
try:
    h.pwrite(b"b" * 512, 512)
    assert False, "writethrough write succeeded although the plugin failed"
except nbd.Error as e:
    assert e.errno == "EIO"
os.remove(os.environ["ERR"])
h.pwrite(b"c" * 512, 1024)
h.flush()
PY
# 5: writethrough under random errors (stress.c: the client's model of
# every byte against what the export and a fresh connection read).
./stress --end=clean --secs=6 --errors-ok --errfile="$T/wt.on" \
  --socket="$T/wt5.sock" --log="$T/wt5.log" -- --filter="$CO" \
  --filter=error memory 4M coalesce-mode=writethrough coalesce-size=1M \
  coalesce-delay=0 coalesce-threads=1 coalesce-max-write=4096 \
  error-pwrite=EIO error-pwrite-rate=20% error-pwrite-file="$T/wt.on" ||
  fail "case 5: writethrough acknowledged a write whose data was dropped"
grep -q "injecting EIO" "$T/wt5.log" || fail "case 5: no error was injected"

# 6-8 switch errors on and off; nbdkit's error filter looks at its file
# about once a second, hence the pauses.
serve slow --filter=delay delay-write=20ms coalesce-size=1M \
  coalesce-delay=0 coalesce-threads=1
serve stall coalesce-size=1M coalesce-delay=60000 coalesce-threads=2
serve fua coalesce-delay=0 coalesce-threads=1
URI6="$(uri slow)" URI7="$(uri stall)" URI8="$(uri fua)" \
timeout 200 nbdsh -c - <<'PY' || fail "cases 6-8 failed"
import os, time
def errs(on):
    if on:
        open(os.environ["ERR"], "w").close()
    else:
        os.remove(os.environ["ERR"])
    time.sleep(1.2)
def scattered_writes(h, n, base):
    """n 4K writes 16K apart, 16 in flight; returns how many failed."""
    failed = 0
    cookies = []
    for i in range(n):
        cookies.append(h.aio_pwrite(b"x" * 4096, base + i * 16384))
        while h.aio_in_flight() >= 16:
            h.poll(-1)
    while h.aio_in_flight() > 0:
        h.poll(-1)
    for c in cookies:
        try:
            h.aio_command_completed(c)
        except nbd.Error:
            failed += 1
    return failed
def flush_errno(h):
    try:
        h.flush()
        return None
    except nbd.Error as e:
        return e.errno

# 6: one failed background write-back, then its retry succeeds.
h = nbd.NBD(); h.connect_uri(os.environ["URI6"])
errs(True)
h.pwrite(b"A" * 4096, 0)
time.sleep(0.5)            # the writer tries and fails
errs(False)
time.sleep(1.5)            # its retry after the back-off succeeds
failed = scattered_writes(h, 600, 1 << 20)
assert failed == 0, "case 6: %d of 600 writes failed after recovery" % failed
assert flush_errno(h) == "EIO", "case 6: the background failure was dropped"
assert flush_errno(h) is None

# 7: a failure, then a flush whose retry succeeds; write-back must not
# wait for the back-off or the 60 s coalesce-delay when the buffer fills.
g = nbd.NBD(); g.connect_uri(os.environ["URI7"])
errs(True)
g.pwrite(b"B" * 4096, 0)
assert flush_errno(g) == "EIO"
errs(False)
assert flush_errno(g) is None
t0 = time.monotonic()
failed = scattered_writes(g, 600, 1 << 20)
took = time.monotonic() - t0
assert failed == 0, "case 7: %d writes failed" % failed
assert took < 20, "case 7: writes stalled %.1f s after recovery" % took
print("case 7: 600 writes into a full buffer after recovery took %.2f s" % took)

# 8: a background failure, then a FUA write and flushes.
f = nbd.NBD(); f.connect_uri(os.environ["URI8"])
errs(True)
f.pwrite(b"C" * 4096, 0)
time.sleep(0.5)
errs(False)
f.pwrite(b"F" * 512, 1 << 20, nbd.CMD_FLAG_FUA)   # must succeed
assert flush_errno(f) == "EIO", "case 8: FUA consumed the background failure"
assert flush_errno(f) is None, "case 8: the failure was reported twice"
assert f.pread(4096, 0) == b"C" * 4096
PY
echo "coalesce errors: OK"
