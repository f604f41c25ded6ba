# nbdstack tests: the client of the exit-after-the-last-client tests.
# SPDX-License-Identifier: BSD-3-Clause
#
#   python3 probe-until-gone.py SOCKET [--during] [--refused-fails]
#
# One NBD client connects to SOCKET, reads 512 bytes, sends NBD_CMD_DISC
# and closes.  Connections are then made back to back (each closed at
# once) until the socket has gone (ENOENT), for at most 10 s; with
# --during they start 20 ms before the client leaves instead.  Prints
# what the connections met (accepted=N ENOENT=1 ...).  Exit status 2 if
# the socket never went away; with --refused-fails, 1 if a connection
# was refused (ECONNREFUSED).
import errno
import socket
import sys
import threading
import time

import nbd

path = sys.argv[1]
during = "--during" in sys.argv[2:]
refused_fails = "--refused-fails" in sys.argv[2:]
seen = {}


def probe():
    deadline = time.time() + 10
    while time.time() < deadline:
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(path)
            seen["accepted"] = seen.get("accepted", 0) + 1
        except OSError as e:
            name = errno.errorcode.get(e.errno, str(e.errno))
            seen[name] = seen.get(name, 0) + 1
            if e.errno == errno.ENOENT:
                break
        finally:
            s.close()


h = nbd.NBD()
h.connect_unix(path)
h.pread(512, 0)
t = threading.Thread(target=probe)
if during:
    t.start()
    time.sleep(0.02)
h.shutdown()
del h
if not during:
    t.start()
t.join()
print(" ".join("%s=%d" % kv for kv in sorted(seen.items())))
if refused_fails and "ECONNREFUSED" in seen:
    sys.exit(1)
if "ENOENT" not in seen:
    sys.exit(2)
