#!/usr/bin/env bash
# A signal the caller blocked stays blocked in the server, as in
# qemu-nbd: imageio's qemu_nbd_test.py::test_block_signals blocks SIGINT
# and SIGHUP in the child and expects the server to keep serving after
# them, and SIGTERM to stop it.  With nothing blocked, SIGINT and SIGHUP
# stop both servers.  Each server with a client connected.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
. "$abs_top_srcdir/tests/nbd-functions.sh"
require nbdsh
require qemu-nbd
cd "$T"
truncate -s 1M img

/usr/bin/python3 - "$QEMU_NBD" "$NBDSTACK_NBD" "$T" <<'PY' || fail "see above"
import os, signal, subprocess, sys, time
qemu, ours, t = sys.argv[1:]
sock = os.path.join(t, "s.sock")
bad = 0

def run(prog, blocked, signals):
    if os.path.exists(sock):
        os.unlink(sock)
    p = subprocess.Popen(
        [prog, "-f", "raw", "-t", "-k", sock, os.path.join(t, "img")],
        preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_BLOCK, blocked))
    for _ in range(400):
        if os.path.exists(sock):
            break
        time.sleep(0.05)
    else:
        p.kill()
        raise SystemExit("%s did not start" % prog)
    # A connected client, idle, as imageio's.
    c = subprocess.Popen(["nbdsh", "-u", "nbd+unix:///?socket=" + sock,
                          "-c", "import time; time.sleep(60)"])
    time.sleep(1)
    res = []
    for s in signals:
        p.send_signal(s)
        try:
            rc = p.wait(3)
        except subprocess.TimeoutExpired:
            rc = None
        res.append((s.name, rc))
        if rc is not None:
            break
    if p.poll() is None:
        p.kill()
        p.wait()
    c.kill()
    c.wait()
    return res

for name, prog in (("qemu-nbd", qemu), ("nbdstack-nbd", ours)):
    r = run(prog, {signal.SIGINT, signal.SIGHUP},
            (signal.SIGINT, signal.SIGHUP, signal.SIGTERM))
    print("%s, SIGINT and SIGHUP blocked: %s" % (name, r))
    if r != [("SIGINT", None), ("SIGHUP", None), ("SIGTERM", 0)]:
        print("FAIL: %s: blocked signals acted on, or SIGTERM did not stop it" % name)
        bad += 1
    for s in (signal.SIGINT, signal.SIGHUP):
        r = run(prog, set(), (s,))
        print("%s, nothing blocked: %s" % (name, r))
        if r[0][1] is None:
            print("FAIL: %s: %s did not stop it" % (name, s.name))
            bad += 1
sys.exit(1 if bad else 0)
PY
echo "ok: blocked signals stay blocked, as in qemu-nbd"
