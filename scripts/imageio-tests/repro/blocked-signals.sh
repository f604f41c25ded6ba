#!/usr/bin/env bash
# A signal the caller blocked stays blocked in qemu-nbd (imageio's
# qemu_nbd_test.py::test_block_signals blocks SIGINT and SIGHUP and checks
# qemu-nbd keeps running; SIGTERM still stops it).  Prints, per server,
# the exit status after each signal (None: still running).
#   BUILD=$PWD/build bash scripts/imageio-tests/repro/blocked-signals.sh
set -u
export PATH=/usr/bin:$PATH
B=$(cd "${BUILD:-build}" && pwd)
d=$(mktemp -d /var/tmp/blocked-signals.XXXXXX)
trap 'rm -rf "$d"' EXIT
cd "$d"
python3 - "$B" <<'PY'
import os, signal, subprocess, sys, time
b = sys.argv[1]
open("img", "wb").truncate(1 << 20)
for name, cmd in (("qemu-nbd", ["qemu-nbd"]),
                  ("nbdstack-nbd", [b + "/nbd/nbdstack-nbd"])):
    if os.path.exists("s.sock"):
        os.unlink("s.sock")
    p = subprocess.Popen(
        cmd + ["-f", "raw", "-t", "-k", os.path.abspath("s.sock"), "img"],
        env=dict(os.environ, NBDSTACK_BUILDDIR=b),
        preexec_fn=lambda: signal.pthread_sigmask(
            signal.SIG_BLOCK, {signal.SIGINT, signal.SIGHUP}))
    for _ in range(100):
        if os.path.exists("s.sock"):
            break
        time.sleep(0.1)
    res = []
    for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        p.send_signal(s)
        try:
            rc = p.wait(0.5)
        except subprocess.TimeoutExpired:
            rc = None
        res.append("%s: %s" % (s.name, rc))
        if rc is not None:
            break
    print("%s (SIGINT, SIGHUP blocked): %s" % (name, ", ".join(res)))
    if p.poll() is None:
        p.kill()
        p.wait()
PY
