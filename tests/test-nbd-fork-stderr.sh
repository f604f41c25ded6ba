#!/usr/bin/env bash
# nbdstack-nbd --fork: once it has returned, the daemon holds none of the
# caller's descriptors, as with qemu-nbd, so a caller that reads the
# command's output to its end returns at once:
#  - x=$(SERVER --fork ... 2>&1) returns (within 20 s; the time is
#    printed) with exit status 0 and no output;
#  - Python's subprocess.run(..., capture_output=True) returns, and the
#    pipes it made reach end of file: no process (the daemon, or the
#    nbdkit under ours) still has them open.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
. "$srcdir/nbd-functions.sh"
require nbdinfo
require_filter_version

img=$T/disk.img
truncate -s 4M "$img"

for k in qemu ours; do
  prog=$(server_prog $k)
  t0=$(date +%s%N)
  rc=0
  timeout 20 bash -c 'x=$("$@" 2>&1) || exit 3; [ -z "$x" ] || { echo "output: $x"; exit 4; }' \
    sh "$prog" --fork --pid-file="$T/a-$k.pid" -t -k "$T/a-$k.sock" -f raw "$img" || rc=$?
  t1=$(date +%s%N)
  [ $rc != 124 ] || fail "$k: x=\$(... --fork ... 2>&1) still waiting after 20 s"
  [ $rc = 0 ] || fail "$k: x=\$(... --fork ... 2>&1): status $rc"
  echo "$k: x=\$(... --fork ... 2>&1) returned in $(( (t1 - t0) / 1000000 )) ms"
  [ "$(nbdinfo --size "nbd+unix:///?socket=$T/a-$k.sock")" = 4194304 ] ||
    fail "$k: the forked server does not serve"

  python3 - "$T/b-$k.pid" "$prog" --fork --pid-file="$T/b-$k.pid" -t -k "$T/b-$k.sock" \
    -f raw "$img" <<'PY' || fail "$k: capture_output: see above"
import os, select, subprocess, sys, time
pidfile, argv = sys.argv[1], sys.argv[2:]
r, w = os.pipe()
ino = os.fstat(r).st_ino
t0 = time.time()
try:
    p = subprocess.run(argv, stdout=w, stderr=w, timeout=20)
except subprocess.TimeoutExpired:
    sys.exit("subprocess.run did not return in 20 s")
os.close(w)
ready, _, _ = select.select([r], [], [], 5)
if not ready or os.read(r, 4096) != b"":
    holders = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            for fd in os.listdir("/proc/%s/fd" % pid):
                if os.readlink("/proc/%s/fd/%s" % (pid, fd)) == "pipe:[%d]" % ino:
                    holders.append(open("/proc/%s/comm" % pid).read().strip() + "[" + pid + "]")
        except OSError:
            pass
    sys.exit("the caller's pipe is still open in: %s" % " ".join(holders))
if p.returncode != 0:
    sys.exit("exit status %d" % p.returncode)
print("capture_output-style run returned in %.3f s, pipe at end of file" % (time.time() - t0))
PY
  for p in "$T/a-$k.pid" "$T/b-$k.pid"; do stop_pids "$(cat "$p")"; rm -f "$p"; done
done
