#!/usr/bin/python3
"""Minimal qcow2 poking helper (header, L1/L2, refcounts), for the tests
that craft hostile images (test-qcow2-overlap.py)."""
import struct, sys

class Q:
    def __init__(s, path):
        s.path = path
        s.f = open(path, 'r+b')
        h = s.rd(0, 112)
        (s.magic, s.version, s.bfo, s.bfs, s.cbits, s.size, s.crypt, s.l1_size, s.l1_off,
         s.rt_off, s.rt_clusters, s.nsnap, s.snap_off) = struct.unpack('>IIQIIQIIQQIIQ', h[:72])
        s.cs = 1 << s.cbits
        if s.version >= 3:
            s.incompat, s.compat, s.autoclear, s.rorder, s.hlen = struct.unpack('>QQQII', h[72:104])
        else:
            s.incompat = 0; s.rorder = 4
        s.rbits = 1 << s.rorder
        s.ext_l2 = bool(s.incompat & 16)
        s.l2e = 16 if s.ext_l2 else 8
        s.l2_entries = s.cs // s.l2e
    def rd(s, off, n):
        s.f.seek(off); return s.f.read(n)
    def wr(s, off, b):
        s.f.seek(off); s.f.write(b); s.f.flush()
    def l1(s, i):
        return struct.unpack('>Q', s.rd(s.l1_off + 8 * i, 8))[0]
    def set_l1(s, i, v):
        s.wr(s.l1_off + 8 * i, struct.pack('>Q', v))
    def l2_addr(s, gc):
        l1e = s.l1(gc // s.l2_entries) & 0x00fffffffffffe00
        return l1e + (gc % s.l2_entries) * s.l2e if l1e else None
    def l2(s, gc):
        a = s.l2_addr(gc)
        return struct.unpack('>Q', s.rd(a, 8))[0] if a else None
    def set_l2(s, gc, v, bm=None):
        a = s.l2_addr(gc)
        s.wr(a, struct.pack('>Q', v))
        if bm is not None:
            s.wr(a + 8, struct.pack('>Q', bm))
    def rt(s, i):
        return struct.unpack('>Q', s.rd(s.rt_off + 8 * i, 8))[0]
    def set_rt(s, i, v):
        s.wr(s.rt_off + 8 * i, struct.pack('>Q', v))
    def per_block(s):
        return s.cs * 8 // s.rbits
    def refcount(s, hc):
        blk = s.rt(hc // s.per_block())
        if not blk:
            return 0
        idx = hc % s.per_block()
        if s.rbits >= 8:
            nb = s.rbits // 8
            return int.from_bytes(s.rd(blk + idx * nb, nb), 'big')
        bitoff = idx * s.rbits
        byte = s.rd(blk + bitoff // 8, 1)[0]
        return (byte >> (bitoff % 8)) & ((1 << s.rbits) - 1)
    def set_refcount(s, hc, v):
        blk = s.rt(hc // s.per_block())
        idx = hc % s.per_block()
        if s.rbits >= 8:
            nb = s.rbits // 8
            s.wr(blk + idx * nb, v.to_bytes(nb, 'big'))
        else:
            bitoff = idx * s.rbits
            byte = s.rd(blk + bitoff // 8, 1)[0]
            m = ((1 << s.rbits) - 1) << (bitoff % 8)
            byte = (byte & ~m) | ((v << (bitoff % 8)) & m)
            s.wr(blk + bitoff // 8, bytes([byte]))
    def set_incompat(s, v):
        s.wr(72, struct.pack('>Q', v))
    def close(s):
        s.f.close()

if __name__ == '__main__':
    q = Q(sys.argv[1])
    print(f"v{q.version} cs={q.cs} size={q.size} l1_size={q.l1_size} l1_off={q.l1_off:#x} rt_off={q.rt_off:#x} rt_clusters={q.rt_clusters} rbits={q.rbits} incompat={q.incompat:#x} ext_l2={q.ext_l2} snaps={q.nsnap}")
    for i in range(min(q.l1_size, 4)):
        print(f"L1[{i}]={q.l1(i):#x}")
    for gc in range(min(8, q.size // q.cs)):
        print(f"L2[{gc}]={q.l2(gc) if q.l2(gc) is None else hex(q.l2(gc))}")
