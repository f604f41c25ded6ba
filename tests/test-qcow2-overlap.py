#!/usr/bin/python3
"""Crafted qcow2 images opened writable, whose L1, L2 or refcount table
entries point at metadata, or whose tables overlap (issue 18.1).  Run by
test-qcow2-overlap.sh, which sets the environment: IMAGE_PLUGIN, NBDKIT,
QEMU_IMG, QEMU_IO, T (scratch directory).

Each case is served by the image plugin and gets a few writes and a
flush.  What must hold for us:
  - the open is refused with the expected one-line error, or the first
    write (or the flush) that would touch metadata fails with EIO and the
    log says "Preventing invalid write|free on metadata";
  - every watched metadata region is byte-for-byte unchanged;
  - qemu-img check finds no more errors than in the crafted image.
The same operations then run through qemu-io on a copy: where qemu
refuses them ("Preventing invalid write on metadata"), the test checks
that it does (a differential: we refuse what qemu refuses).  Where qemu
lets the write through, its answer is printed, not asserted.
"""
import os, re, shutil, signal, struct, subprocess, sys, time

sys.dont_write_bytecode = True  # the source tree may be read-only
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from importlib import import_module
Q = import_module('test-qcow2-poke').Q
import nbd

PLUG = os.environ['IMAGE_PLUGIN']
NBDKIT = os.environ.get('NBDKIT', 'nbdkit')
QEMU_IMG = os.environ.get('QEMU_IMG', 'qemu-img')
QEMU_IO = os.environ.get('QEMU_IO', 'qemu-io')
D = os.environ['T']
ONLY = sys.argv[1] if len(sys.argv) > 1 else None
CS = 65536
failures = []


def sh(args):
    return subprocess.run(args, capture_output=True, text=True)


def must(args):
    r = sh(args)
    assert r.returncode == 0, f'{args}: {r.stdout}{r.stderr}'
    return r


def mk(path, opts='cluster_size=65536', size='4M',
       writes=((0, 0x11, 65536), (65536, 0x22, 65536), (131072, 0x33, 65536))):
    if os.path.exists(path):
        os.unlink(path)
    must([QEMU_IMG, 'create', '-q', '-f', 'qcow2', '-o', opts, path, size])
    cmds = []
    for off, pat, ln in writes:
        cmds += ['-c', f'write -P {pat} {off} {ln}']
    must([QEMU_IO, '-f', 'qcow2', *cmds, path])


def check_errors(img):
    """Errors qemu-img check reports (leaks are not errors)."""
    r = sh([QEMU_IMG, 'check', img])
    out = r.stdout + r.stderr
    m = re.search(r'(\d+) errors were found', out)
    if m:
        return int(m.group(1)), out
    if 'No errors were found' in out or r.returncode in (0, 3):
        return 0, out
    return 10 ** 9, out  # check itself failed: worse than anything


def serve_ops(img, ops):
    """Start the plugin on img (writable), run ops, stop it.
    Returns (started, results, log)."""
    sock = f'{D}/sock'
    pidfile = f'{D}/nbdkit.pid'
    logpath = f'{D}/nbdkit.log'
    for f in (sock, pidfile):
        if os.path.exists(f):
            os.unlink(f)
    with open(logpath, 'w') as log:
        p = subprocess.Popen([NBDKIT, '-f', '--log=stderr', '-U', sock,
                              '-P', pidfile, PLUG, f'file={img}',
                              'format=qcow2'],
                             stdout=log, stderr=subprocess.STDOUT)
    # nbdkit writes the pid file once it listens on the socket.
    for _ in range(1200):
        if (os.path.exists(pidfile) and os.path.getsize(pidfile) > 0) \
                or p.poll() is not None:
            break
        time.sleep(0.05)
    res = []
    started = p.poll() is None
    if started:
        h = nbd.NBD()
        h.connect_unix(sock)
        for op in ops:
            try:
                if op[0] == 'w':
                    h.pwrite(bytes([op[3]]) * op[2], op[1])
                elif op[0] == 't':
                    h.trim(op[2], op[1])
                elif op[0] == 'f':
                    h.flush()
                res.append('ok')
            except nbd.Error as e:
                res.append(f'errno {e.errno}')
        h.shutdown()
        p.send_signal(signal.SIGTERM)
    try:
        p.wait(60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        raise
    with open(logpath) as f:
        return started, res, f.read().strip()


def qemu_ops(img, ops):
    cmds = []
    for op in ops:
        if op[0] == 'w':
            cmds += ['-c', f'write -P {op[3]} {op[1]} {op[2]}']
        elif op[0] == 't':
            cmds += ['-c', f'discard {op[1]} {op[2]}']
        elif op[0] == 'f':
            cmds += ['-c', 'flush']
    r = sh([QEMU_IO, '-f', 'qcow2', *cmds, img])
    return r.stdout + r.stderr


def read_regions(path, regions):
    with open(path, 'rb') as f:
        data = f.read()
    # A table at the end of the file may end before its cluster does.
    return {n: data[o:o + l].ljust(l, b'\0') for n, o, l in regions}


def run(name, craft, ops, watch, ours, qemu_refuses):
    """ours: ('refused', REGEX) the open fails with REGEX in the log, or
    ('eio', REGEX) a request fails with EIO and the log matches REGEX.
    qemu_refuses: qemu-io must say "Preventing invalid write on
    metadata"; if False, qemu's answer is only printed."""
    if ONLY and not re.search(ONLY, name):
        return
    mine, theirs = f'{D}/ours.qcow2', f'{D}/qemu.qcow2'
    craft(mine)
    shutil.copy(mine, theirs)
    q = Q(mine)
    regions = watch(q)
    q.close()
    before = read_regions(mine, regions)
    errors_before, _ = check_errors(mine)

    started, res, log = serve_ops(mine, ops)
    after = read_regions(mine, regions)
    errors_after, check_out = check_errors(mine)
    qout = qemu_ops(theirs, ops)
    qchanged = [n for n, o, l in regions
                if read_regions(theirs, regions)[n] != before[n]]

    bad = []
    kind, regex = ours
    if kind == 'refused':
        if started:
            bad.append(f'the open was not refused (results {res})')
    else:
        if not started:
            bad.append(f'the open was refused: {log}')
        elif 'errno EIO' not in res:
            bad.append(f'no request failed with EIO: {res}')
        elif any(r != 'ok' and r != 'errno EIO' for r in res):
            bad.append(f'a request failed with another error: {res}')
    if not re.search(regex, log):
        bad.append(f'the log lacks /{regex}/: {log}')
    lines = [l for l in log.splitlines() if 'error:' in l]
    if kind == 'refused' and len(lines) != 1:
        bad.append(f'the refusal is not one line: {log}')
    for n, o, l in regions:
        if after[n] != before[n]:
            diff = [i for i in range(l) if after[n][i] != before[n][i]]
            bad.append(f'{n} at {o:#x} changed: {len(diff)} bytes, '
                       f'+{diff[0]:#x}: {before[n][diff[0]:diff[0] + 8].hex()}'
                       f' -> {after[n][diff[0]:diff[0] + 8].hex()}')
    if errors_after > errors_before:
        bad.append(f'qemu-img check: {errors_after} errors, '
                   f'{errors_before} before: {check_out.strip()[:300]}')
    qemu_says = 'Preventing invalid write on metadata' in qout
    if qemu_refuses and not qemu_says:
        bad.append(f'qemu-io did not refuse: {qout.strip()[:300]}')
    first = lines[0].split('error: ', 1)[-1] if lines else ''
    status = 'refused at open' if not started else f'results {res}'
    print(f'{"FAIL" if bad else "ok"}: {name}: {status}: {first[:200]}')
    print(f'    qemu-io: {"refuses (Preventing invalid write on metadata)" if qemu_says else "does not refuse"}'
          f'{", changes " + ", ".join(qchanged) if qchanged else ""};'
          f' check errors before {errors_before}, after ours {errors_after}')
    for b in bad:
        print(f'    FAIL: {b}')
    if bad:
        failures.append(name)


PREVENT_W = r'Preventing invalid write on metadata: host range 0x[0-9a-f]+\+0x[0-9a-f]+ overlaps the '
PREVENT_F = r'Preventing invalid free on metadata: host range 0x[0-9a-f]+\+0x[0-9a-f]+ overlaps the '
REFUSE_W = r'refusing to write this image: the '


def snap(p):
    must([QEMU_IMG, 'snapshot', '-c', 's1', p])


def snap_l1(q):
    return struct.unpack('>Q', q.rd(q.snap_off, 8))[0]


def bitmap_dir(q):
    """Offset of the bitmap directory, from the bitmaps header extension."""
    off = q.hlen
    while True:
        t, ln = struct.unpack('>II', q.rd(off, 8))
        if t == 0:
            raise AssertionError('no bitmaps extension')
        if t == 0x23852875:
            return struct.unpack('>Q', q.rd(off + 8 + 16, 8))[0]
        off += 8 + ((ln + 7) & ~7)


def compressed_entry(q, host, nsect=1):
    # v3 compressed: bit 62, offset bits [0, x), sectors - 1 in [x, 62)
    x = 62 - (q.cbits - 8)
    return (1 << 62) | ((nsect - 1) << x) | host


def l2_off(q, i=0):
    return q.l1(i) & 0xfffffffffe00


W5 = [('w', 5 * CS, CS, 0xAA), ('f',)]
W0 = [('w', 0, CS, 0xAA), ('f',)]
W10 = [('w', 10 * CS, CS, 0xAA), ('f',)]

# ---- tables overlapping one another: refused at open ----


def c_l1_rt(p):
    mk(p)
    q = Q(p)
    q.wr(40, struct.pack('>Q', q.rt_off))
    q.close()


run('L1 table offset = refcount table offset', c_l1_rt, W10,
    lambda q: [('refcount table', q.rt_off, 512)],
    ('refused', r'the (refcount|active L1) table at 0x10000 overlaps the (refcount|active L1) table at 0x10000$'),
    qemu_refuses=True)


def c_snap_rt(p):
    mk(p)
    snap(p)
    q = Q(p)
    q.wr(64, struct.pack('>Q', q.rt_off))
    q.close()


run('snapshot table offset = refcount table offset', c_snap_rt, W10,
    lambda q: [('refcount table', q.rt_off, 512)],
    ('refused', r'the (refcount|snapshot) table at 0x[0-9a-f]+ overlaps the (refcount|snapshot) table at 0x[0-9a-f]+$'),
    qemu_refuses=False)


def c_snapl1_l1(p):
    mk(p)
    snap(p)
    q = Q(p)
    q.wr(q.snap_off, struct.pack('>Q', q.l1_off))
    q.close()


run("a snapshot's L1 table offset = the active L1's", c_snapl1_l1, W0,
    lambda q: [('L1', q.l1_off, 512)],
    ('refused', r'the (snapshot|active) L1 table at 0x[0-9a-f]+ overlaps the (snapshot|active) L1 table at 0x[0-9a-f]+$'),
    qemu_refuses=False)

# ---- L1 or refcount table entries naming another table: a writable
# open is refused ----


def c_l1_rb(p):
    mk(p)
    q = Q(p)
    q.set_l1(0, q.rt(0) | (1 << 63))
    q.close()


run('L1[0] -> refcount block (COPIED)', c_l1_rb, W5,
    lambda q: [('refcount block', q.rt(0), CS)],
    ('refused', REFUSE_W + r'active L2 table at 0x20000 would overlap the refcount block there'),
    qemu_refuses=True)


def c_l1_l1(p):
    mk(p)
    q = Q(p)
    q.set_l1(0, q.l1_off | (1 << 63))
    q.close()


run('L1[0] -> L1 table itself', c_l1_l1, W5,
    lambda q: [('L1', q.l1_off, 512)],
    ('refused', REFUSE_W + r'active L2 table at 0x[0-9a-f]+ would overlap the active L1 table there'),
    qemu_refuses=True)


def c_l1_snap(p):
    mk(p)
    snap(p)
    q = Q(p)
    q.set_l1(0, q.snap_off | (1 << 63))
    q.close()


run('L1[0] -> snapshot table', c_l1_snap, W5,
    lambda q: [('snapshot table', q.snap_off, 512)],
    ('refused', REFUSE_W + r'active L2 table at 0x[0-9a-f]+ would overlap the snapshot table there'),
    qemu_refuses=True)


def c_rb_l2(p):
    mk(p)
    q = Q(p)
    q.set_rt(1, l2_off(q))
    q.close()


run('refcount table[1] -> the L2 table', c_rb_l2, W10,
    lambda q: [('L2 table', l2_off(q), CS)],
    ('refused', REFUSE_W + r'active L2 table at 0x[0-9a-f]+ would overlap the refcount block there'),
    qemu_refuses=False)

# ---- L2 entries pointing at metadata: the write fails with EIO ----


def c_l2_self(p):
    mk(p)
    q = Q(p)
    q.set_l2(0, l2_off(q) | (1 << 63))
    q.close()


run('L2[0] -> its own L2 table (COPIED)', c_l2_self, W0,
    lambda q: [('L2 table', l2_off(q), CS)],
    ('eio', PREVENT_W + r'active L2 table at 0x[0-9a-f]+; the image is now read-only'),
    qemu_refuses=True)


def c_l2_snapl1(p):
    mk(p)
    snap(p)
    q = Q(p)
    q.set_l2(0, (snap_l1(q) & ~0xffff) | (1 << 63))
    q.close()


run("L2[0] -> a snapshot's L1 table (COPIED)", c_l2_snapl1, W0,
    lambda q: [("snapshot's L1 table", snap_l1(q) & ~0xffff, CS)],
    ('eio', PREVENT_W + r'snapshot L1 table at 0x[0-9a-f]+'),
    qemu_refuses=True)


def c_l2_bitmaps(p):
    mk(p)
    must([QEMU_IMG, 'bitmap', '--add', p, 'b0'])
    q = Q(p)
    q.set_l2(0, bitmap_dir(q) | (1 << 63))
    q.close()


run('L2[0] -> the bitmap directory (COPIED)', c_l2_bitmaps, W0,
    lambda q: [('bitmap directory', bitmap_dir(q), 512)],
    ('eio', PREVENT_W + r'bitmap directory at 0x[0-9a-f]+'),
    qemu_refuses=True)


def c_l2_rb_copied(p):
    mk(p)
    q = Q(p)
    q.set_l2(0, q.rt(0) | (1 << 63))
    q.close()


run('L2[0] -> refcount block (COPIED)', c_l2_rb_copied, W0,
    lambda q: [('refcount block', q.rt(0), CS)],
    ('eio', PREVENT_W + r'refcount block at 0x[0-9a-f]+'),
    qemu_refuses=True)

# An entry without COPIED (or compressed) is copied on write, and its old
# cluster freed: freeing metadata is refused before anything is written.
OPS_REL = W0 + [('w', g * CS, CS, 0xAA) for g in range(4, 12)] + [('f',)]


def mk_release(target, compressed):
    def craft(p):
        mk(p)
        q = Q(p)
        t = target(q)
        q.set_l2(0, compressed_entry(q, t) if compressed else t)
        q.close()
    return craft


for nm, tf, wf, ol, qr in [
        ('refcount table', lambda q: q.rt_off,
         lambda q: [('refcount table', q.rt_off, 512)], 'refcount table', True),
        ('L1 table', lambda q: q.l1_off,
         lambda q: [('L1', q.l1_off, 512)], 'active L1 table', True),
        ('refcount block', lambda q: q.rt(0),
         lambda q: [('refcount block', q.rt(0), 512)], 'refcount block', False),
        ('L2 table', lambda q: l2_off(q),
         lambda q: [('L2', l2_off(q) + 64, 512)], 'active L2 table', True)]:
    for compressed in (False, True):
        what = 'compressed entry inside' if compressed else 'no COPIED'
        run(f'L2[0] -> {nm} ({what}), full overwrite + more writes',
            mk_release(tf, compressed), OPS_REL, wf,
            ('eio', PREVENT_F + ol + r' at 0x[0-9a-f]+; the image is now read-only'),
            qemu_refuses=qr)

# ---- a refcount block missing: a trim must not make one over data ----


def c_rt_missing(p):
    mk(p, opts='cluster_size=512',
       writes=[(i * 4096, 0x10 + i % 200, 4096) for i in range(128)])
    q = Q(p)
    q.set_rt(1, 0)
    q.close()


run('refcount table[1] zeroed (clusters 256-511 uncounted), trim one of them',
    c_rt_missing, [('t', 126464, 512), ('f',)],
    lambda q: [('host cluster 256 (guest data)', 256 * 512, 512)],
    ('eio', r'refcount of cluster 0x20000 would be out of range \(0 -1, it has no refcount block\)'),
    qemu_refuses=False)

# Not here: entries that make two guest clusters share one data cluster,
# or a refcount block that is a data cluster.  Neither is metadata
# under guest data, and qemu writes both too (hostile-writable.py).

if failures:
    print(f'{len(failures)} case(s) failed: {failures}')
    sys.exit(1)
print('all cases passed')
