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
#  4. writethrough mode returns the error on the write itself.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh
require_filter_version
CO=$(filter_so coalesce)
ERR="$T/err"

serve ()
{
  local name=$1; shift
  truncate -s 16M "$T/$name.img"
  start_nbdkit $name -v --filter="$CO" --filter=error file "$T/$name.img" \
    error-pwrite=EIO error-pwrite-rate=100% error-pwrite-file="$ERR" "$@"
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
echo "coalesce errors: OK"
