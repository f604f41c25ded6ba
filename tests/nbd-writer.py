#!/usr/bin/env python3
# A client for the nbdstack-nbd lifecycle tests (test-nbd-sigterm.sh,
# test-nbd-sigkill.sh).  SPDX-License-Identifier: BSD-3-Clause
#
#   nbd-writer.py idle URI READY SECS
#       write 16 blocks of 64K (no flush), touch READY, stay connected
#       and idle for SECS seconds
#   nbd-writer.py busy URI READY ACKED [INFLIGHT]
#       write 64K blocks at ascending offsets, INFLIGHT (default 8) at a
#       time, until the server goes; touch READY after the first 32
#       replies.  Then write ACKED: one line "acked OFFSET" per write the
#       server acknowledged and one "error ERRNO" per request that failed.
#   nbd-writer.py hold URI READY RESULT
#       send 4 writes, touch READY, and wait for their replies or for the
#       connection to go; then write RESULT as for busy
#
# Block N holds the byte (N % 251) + 1 repeated: pattern() below.
import errno
import os
import sys
import time

import nbd

BLOCK = 65536


def pattern(n):
    return bytes([(n % 251) + 1]) * BLOCK


def touch(path):
    with open(path, "w"):
        pass


def idle(uri, ready, secs):
    h = nbd.NBD()
    h.connect_uri(uri)
    for n in range(16):
        h.pwrite(pattern(n), n * BLOCK)
    touch(ready)
    time.sleep(float(secs))


def busy(uri, ready, acked_path, inflight=8):
    h = nbd.NBD()
    h.connect_uri(uri)
    size = h.get_size()
    pending = {}  # cookie -> (block number, buffer)
    acked, errors = [], []
    n = 0
    ready_done = False
    try:
        while True:
            while len(pending) < inflight and (n + 1) * BLOCK <= size:
                buf = nbd.Buffer.from_bytearray(bytearray(pattern(n)))
                pending[h.aio_pwrite(buf, n * BLOCK)] = (n, buf)
                n += 1
            if not pending:
                n = 0  # wrap round: same data at the same places
                continue
            h.poll(1)
            for cookie in list(pending):
                try:
                    done = h.aio_command_completed(cookie)
                except nbd.Error as e:
                    errors.append(e.errno or 0)
                    del pending[cookie]
                    continue
                if done:
                    acked.append(pending.pop(cookie)[0])
            if not ready_done and len(acked) >= 32:
                touch(ready)
                ready_done = True
    except nbd.Error as e:
        errors.append(e.errno or 0)
    for cookie in pending:
        try:
            if h.aio_command_completed(cookie):
                acked.append(pending[cookie][0])
        except nbd.Error as e:
            errors.append(e.errno or 0)
    with open(acked_path, "w") as f:
        for a in acked:
            f.write("acked %d\n" % (a * BLOCK))
        for e in errors:
            f.write("error %s\n" % errno.errorcode.get(e, str(e)))


def hold(uri, ready, result_path):
    h = nbd.NBD()
    h.connect_uri(uri)
    pending = {}
    acked, errors = [], []
    for n in range(4):
        buf = nbd.Buffer.from_bytearray(bytearray(pattern(n)))
        pending[h.aio_pwrite(buf, n * BLOCK)] = (n, buf)
    touch(ready)
    try:
        while pending:
            h.poll(1)
            for cookie in list(pending):
                try:
                    if h.aio_command_completed(cookie):
                        acked.append(pending.pop(cookie)[0])
                except nbd.Error as e:
                    errors.append(e.errno or 0)
                    del pending[cookie]
    except nbd.Error as e:
        errors.append(e.errno or 0)
    with open(result_path, "w") as f:
        for a in acked:
            f.write("acked %d\n" % (a * BLOCK))
        for e in errors:
            f.write("error %s\n" % errno.errorcode.get(e, str(e)))


if __name__ == "__main__":
    if sys.argv[1] == "idle":
        idle(*sys.argv[2:5])
    elif sys.argv[1] == "busy":
        busy(sys.argv[2], sys.argv[3], sys.argv[4],
             int(sys.argv[5]) if len(sys.argv) > 5 else 8)
    elif sys.argv[1] == "hold":
        hold(*sys.argv[2:5])
    elif sys.argv[1] == "check":
        # check IMAGE ACKED: every acknowledged block reads back (IMAGE raw)
        img, acked_path = sys.argv[2], sys.argv[3]
        bad = 0
        with open(img, "rb") as f, open(acked_path) as a:
            for line in a:
                w = line.split()
                if w[0] != "acked":
                    continue
                off = int(w[1])
                f.seek(off)
                if f.read(BLOCK) != pattern(off // BLOCK):
                    bad += 1
        print(bad)
    else:
        sys.exit("usage: see the header")
