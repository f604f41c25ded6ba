#!/usr/bin/env bash
# image plugin, qcow2 writable, extended L2 (64 KiB clusters, 2 KiB
# subclusters): a zero request changes only the subcluster bitmap for
# the whole subclusters of the clusters it covers partially (zero bit
# set, allocation bit cleared, host cluster kept), as qemu does; only
# the pieces that cover a subcluster partially are written.  On an image
# made by qemu-img and on one we create:
#  - the same ops on a raw reference: qemu-img compare equal, check clean;
#  - the L2 entries say so (read from the file): bits, host offset and
#    COPIED kept; a cluster zeroed 32 subclusters at a time is released
#    (MAY_TRIM) or kept all zero (NO_HOLE); the disk's last partial
#    subcluster counts as whole; qemu-img map says zero, not data;
#  - FAST_ZERO of whole subclusters succeeds; with a partial subcluster
#    that does not read as zeroes, ENOTSUP and nothing changes;
#  - zeroing subclusters of an unallocated cluster allocates nothing.
# Over a backing file: zeroed subclusters read as zeroes, their
# neighbours still read the backing file, no cluster is allocated, the
# file does not grow.  A cluster shared with a snapshot gets its bits
# changed (the snapshot unchanged); a compressed cluster is written as
# before (and refuses FAST_ZERO).
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require qemu-img
require qemu-io
require nbdsh
cd "$T"

K=1024
CS=$((64 * K))
SIZE=$((8 * 1024 * K + 5 * K)) # the last cluster: 5 KiB, 2.5 subclusters

l2 () # IMAGE CLUSTER: its L2 entry, "host= copied= compressed= alloc= zero="
{
  /usr/bin/python3 - "$1" "$2" <<'EOF'
import struct, sys
f = open(sys.argv[1], "rb")
hdr = f.read(104)
cs = 1 << struct.unpack_from(">I", hdr, 20)[0]
l1 = struct.unpack_from(">Q", hdr, 40)[0]
assert struct.unpack_from(">Q", hdr, 72)[0] & 16, "no extended L2"
c, per = int(sys.argv[2]), cs // 16
f.seek(l1 + 8 * (c // per))
table = struct.unpack(">Q", f.read(8))[0] & 0x00fffffffffffe00
e = bm = 0
if table:
    f.seek(table + 16 * (c % per))
    e, bm = struct.unpack(">QQ", f.read(16))
comp = (e >> 62) & 1
print("host=%#x copied=%d compressed=%d alloc=%#x zero=%#x"
      % (0 if comp else e & 0x00fffffffffffe00, e >> 63, comp,
         bm & 0xffffffff, bm >> 32))
EOF
}
field () # IMAGE CLUSTER FIELD: one field of l2
{
  l2 "$1" "$2" | tr ' ' '\n' | sed -n "s/^$3=//p"
}
want_l2 () # IMAGE CLUSTER WHAT FIELD=VALUE...
{
  local img=$1 c=$2 what=$3 got f
  shift 3
  got=$(l2 "$img" "$c")
  for f in "$@"; do
    grep -qw -- "$f" <<<"$got" ||
      fail "$img: $what: cluster $c: expected $f, L2 entry $got"
  done
}
map_is () # IMAGE OFF LEN EXPECT: qemu-img map over [OFF, OFF+LEN)
{
  "$QEMU_IMG" map -f qcow2 --output=json "$1" | /usr/bin/python3 -c '
import json, sys
off, n, want = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
for e in json.load(sys.stdin):
    if e["start"] < off + n and off < e["start"] + e["length"]:
        got = "data=%s zero=%s" % (str(e["data"]).lower(), str(e["zero"]).lower())
        if got != want:
            sys.exit("map at %d+%d: %s, expected %s" % (off, n, e, want))
' "$2" "$3" "$4" || fail "$1: qemu-img map"
}
host_clusters () # IMAGE: allocated clusters per qemu-img check
{
  "$QEMU_IMG" check -f qcow2 --output=json "$1" | /usr/bin/python3 -c '
import json, sys
print(json.load(sys.stdin)["allocated-clusters"])'
}
clean () # IMAGE WHAT: qemu-img check exits 0, no leaks
{
  local out
  out=$("$QEMU_IMG" check -f qcow2 "$1" 2>&1) || fail "$2: qemu-img check: $out"
  ! grep -qi leak <<<"$out" || fail "$2: leaks: $out"
}
same () # QCOW2 RAW WHAT
{
  "$QEMU_IMG" compare -q -f qcow2 -F raw "$1" "$2" ||
    fail "$3: the image differs from the raw reference"
}

# Python run by nbdsh: each op on the export and on the raw file RAW.
OPS='
import errno
K = 1024
CS = 64 * K
ref = open(RAW, "r+b")
def zero(off, n, flags=0):
    h.zero(n, off, flags)
    ref.seek(off)
    ref.write(bytes(n))
def refused(off, n, flags=nbd.CMD_FLAG_FAST_ZERO):
    try:
        h.zero(n, off, flags)
    except nbd.Error as e:
        assert e.errnum == errno.ENOTSUP, e
    else:
        raise AssertionError("zero %d+%d succeeded" % (off, n))
'
ops () # NAME PYTHON [PARAMS]: run PYTHON on export NAME (NAME.qcow2, NAME.raw)
{
  local name=$1 py=$2
  shift 2
  start_nbdkit "$name" "$IMAGE_PLUGIN" file="$T/$name.qcow2" "$@"
  nbdsh -u "$(uri "$name")" -c "RAW='$T/$name.raw'" -c "$OPS" -c "$py" \
    -c 'h.flush(); ref.close()' || fail "$name: nbdsh"
  stop_nbdkit "$name"
}

# ---- no backing file: clusters 0-15 and the last (128) have data.
subzero () # NAME
{
  local name=$1 img=$1.qcow2 c before size h0 h2 h5 h8
  declare -A host
  for c in 0 1 2 3 4 5 6 7 8 128; do
    want_l2 "$img" $c "before" copied=1 alloc=$([ $c = 128 ] && echo '0x[0-9a-f]*' || echo 0xffffffff) zero=0x0
    host[$c]=$(field "$img" $c host)
  done
  [ "${host[0]}" != 0x0 ] || fail "$name: cluster 0 has no host cluster"
  want_l2 "$img" 40 "before" host=0x0 alloc=0x0 zero=0x0
  before=$(host_clusters "$img")
  size=$(stat -c %s "$img")

  ops "$name" '
zero(2 * K, 4 * K)                            # 0: subclusters 1-2 (MAY_TRIM)
zero(CS + 2 * K, 4 * K, nbd.CMD_FLAG_NO_HOLE) # 1: the same, keeping
zero(2 * CS + K, 6 * K)                       # 2: 1 KiB written, 1-2, 1 KiB written
zero(3 * CS + 60 * K, 8 * K)                  # 3: 30-31, and 4: 0-1
zero(5 * CS + 16 * K, 8 * K, nbd.CMD_FLAG_FAST_ZERO)   # 5: 8-11, fast
refused(6 * CS + 1000, 5000)                  # 6: partial subclusters, data
zero(40 * CS + 2 * K, 4 * K)                  # 40: unallocated
zero(41 * CS + 8 * K, 8 * K, nbd.CMD_FLAG_FAST_ZERO)
zero(7 * CS, 32 * K)                          # 7: 0-15, then 16-31: released
zero(7 * CS + 32 * K, 32 * K)
zero(8 * CS, 32 * K, nbd.CMD_FLAG_NO_HOLE)    # 8: the same, kept
zero(8 * CS + 32 * K, 32 * K, nbd.CMD_FLAG_NO_HOLE)
zero(128 * CS + 2 * K, 3 * K)                 # 128: 1 to the disk end
'
  same "$img" "$name.raw" "$name"
  clean "$img" "$name"
  want_l2 "$img" 0 "zero 2K+4K" host=${host[0]} copied=1 alloc=0xfffffff9 zero=0x6
  want_l2 "$img" 1 "zero 2K+4K no-hole" host=${host[1]} copied=1 alloc=0xfffffff9 zero=0x6
  want_l2 "$img" 2 "zero 1K+6K" host=${host[2]} copied=1 alloc=0xfffffff9 zero=0x6
  want_l2 "$img" 3 "zero across clusters" host=${host[3]} alloc=0x3fffffff zero=0xc0000000
  want_l2 "$img" 4 "zero across clusters" host=${host[4]} alloc=0xfffffffc zero=0x3
  want_l2 "$img" 5 "fast zero" host=${host[5]} copied=1 alloc=0xfffff0ff zero=0xf00
  want_l2 "$img" 6 "refused fast zero" host=${host[6]} alloc=0xffffffff zero=0x0
  want_l2 "$img" 7 "32 subclusters zeroed, may trim" host=0x0 alloc=0x0 zero=0x0
  want_l2 "$img" 8 "32 subclusters zeroed, no hole" host=${host[8]} copied=1 alloc=0x0 zero=0xffffffff
  want_l2 "$img" 128 "zero to the disk end" host=${host[128]} alloc=0x1 zero=0xfffffffe
  want_l2 "$img" 40 "unallocated" host=0x0 alloc=0x0 zero=0x0
  want_l2 "$img" 41 "unallocated, fast" host=0x0 alloc=0x0 zero=0x0
  map_is "$img" $((2 * K)) $((4 * K)) "data=false zero=true"
  map_is "$img" 0 $((2 * K)) "data=true zero=false"
  map_is "$img" $((6 * K)) $((58 * K)) "data=true zero=false"
  map_is "$img" $((5 * CS + 16 * K)) $((8 * K)) "data=false zero=true"
  # Only cluster 7 went (released once all its subclusters were zero).
  [ "$(host_clusters "$img")" -eq $((before - 1)) ] ||
    fail "$name: $(host_clusters "$img") allocated clusters, expected $((before - 1))"
  [ "$(stat -c %s "$img")" -le "$size" ] || fail "$name: the file grew"
  echo "ok: $name: subclusters zeroed by their bits, $before -> $((before - 1)) clusters"
}

"$QEMU_IMG" create -q -f qcow2 -o extended_l2=on,cluster_size=64k q.qcow2 $SIZE
truncate -s $SIZE q.raw
for f in "qcow2 q.qcow2" "raw q.raw"; do
  "$QEMU_IO" -f $f -c 'write -P 1 0 1M' -c 'write -P 2 8M 5k' >/dev/null
done
subzero q

# Ours: created by the plugin (linear layout), data written through it.
truncate -s $SIZE o.raw
"$QEMU_IO" -f raw -c 'write -P 1 0 1M' -c 'write -P 2 8M 5k' o.raw >/dev/null
nbdkit -U - "$IMAGE_PLUGIN" file="$T/o.qcow2" format=qcow2 create=true \
  size=$SIZE extended-l2=on \
  --run 'nbdsh -u "$uri" -c "h.pwrite(b\"\\x01\" * (1 << 20), 0); h.pwrite(b\"\\x02\" * 5120, 8 << 20); h.flush()"' ||
  fail "create: failed"
same o.qcow2 o.raw "create"
subzero o

# ---- over a backing file: cluster 0 written (the L2 table exists),
# clusters 5 and 6 unallocated and reading the backing file.
head -c 8M /dev/urandom >base.raw
"$QEMU_IMG" create -q -f qcow2 -o extended_l2=on,cluster_size=64k -b base.raw \
  -F raw b.qcow2
"$QEMU_IO" -f qcow2 -c 'write -P 7 0 64k' b.qcow2 >/dev/null
cp base.raw b.raw
"$QEMU_IO" -f raw -c 'write -P 7 0 64k' b.raw >/dev/null
before=$(host_clusters b.qcow2)
size=$(stat -c %s b.qcow2)
ops b '
zero(5 * CS + 2 * K, 4 * K)
zero(6 * CS + 8 * K, 8 * K, nbd.CMD_FLAG_FAST_ZERO)
refused(7 * CS + 2 * K, 3 * K)   # 1 KiB of a subcluster of backing data
' backing=follow
same b.qcow2 b.raw backing
clean b.qcow2 backing
want_l2 b.qcow2 5 "backing" host=0x0 alloc=0x0 zero=0x6
want_l2 b.qcow2 6 "backing, fast" host=0x0 alloc=0x0 zero=0xf0
want_l2 b.qcow2 7 "backing, refused" host=0x0 alloc=0x0 zero=0x0
map_is b.qcow2 $((5 * CS + 2 * K)) $((4 * K)) "data=false zero=true"
[ "$(host_clusters b.qcow2)" -eq "$before" ] ||
  fail "backing: $(host_clusters b.qcow2) allocated clusters, expected $before"
[ "$(stat -c %s b.qcow2)" -eq "$size" ] || fail "backing: the file grew"
"$QEMU_IMG" convert -f qcow2 -O raw b.qcow2 b-out.raw
/usr/bin/python3 - <<'EOF' || fail "backing: zeroed or neighbouring bytes wrong"
K, CS = 1024, 65536
out, base = open("b-out.raw", "rb").read(), open("base.raw", "rb").read()
for lo, hi in ((5 * CS + 2 * K, 5 * CS + 6 * K), (6 * CS + 8 * K, 6 * CS + 16 * K)):
    assert out[lo:hi] == bytes(hi - lo), "not zeroes at %d" % lo
    assert out[lo - 2 * K:lo] == base[lo - 2 * K:lo], "neighbour at %d" % lo
    assert out[hi:hi + 2 * K] == base[hi:hi + 2 * K], "neighbour at %d" % hi
    assert base[lo:hi] != bytes(hi - lo)
EOF
# Then a partial subcluster over the backing file: written (allocates).
ops b 'zero(9 * CS + K, 6 * K)' backing=follow
same b.qcow2 b.raw "backing, partial"
clean b.qcow2 "backing, partial"
want_l2 b.qcow2 9 "backing, partial" copied=1 alloc=0xfffffff9 zero=0x6
echo "ok: backing: subclusters zeroed by their bits, nothing allocated"

# ---- a cluster shared with an internal snapshot: its bits change in
# our (copied) L2 table, the snapshot reads as before.
"$QEMU_IMG" create -q -f qcow2 -o extended_l2=on,cluster_size=64k s.qcow2 4M
truncate -s 4M s.raw
for f in "qcow2 s.qcow2" "raw s.raw"; do
  "$QEMU_IO" -f $f -c 'write -P 3 0 256k' >/dev/null
done
"$QEMU_IMG" snapshot -c s1 s.qcow2
h0=$(field s.qcow2 0 host)
ops s 'zero(2 * K, 4 * K); zero(CS + 2 * K, 4 * K, nbd.CMD_FLAG_NO_HOLE)'
same s.qcow2 s.raw snapshot
clean s.qcow2 snapshot
want_l2 s.qcow2 0 "shared" host="$h0" copied=0 alloc=0xfffffff9 zero=0x6
"$QEMU_IMG" convert -f qcow2 -O raw -l snapshot.name=s1 s.qcow2 s1.raw
"$QEMU_IO" -f raw -c 'read -P 3 0 256k' s1.raw >/dev/null ||
  fail "snapshot: the snapshot changed"
echo "ok: snapshot: shared cluster's bits changed, snapshot unchanged"

# ---- compressed clusters have no bitmap: written as before.
head -c 1M /dev/urandom | base64 -w 0 | head -c 1M >c.raw
"$QEMU_IMG" convert -q -c -f raw -O qcow2 -o extended_l2=on,cluster_size=64k \
  c.raw c.qcow2
want_l2 c.qcow2 1 "compressed" compressed=1
want_l2 c.qcow2 2 "compressed" compressed=1
ops c 'zero(CS + 2 * K, 4 * K); refused(2 * CS + 2 * K, 4 * K)'
same c.qcow2 c.raw compressed
clean c.qcow2 compressed
want_l2 c.qcow2 1 "compressed, zeroed" compressed=0 copied=1 alloc=0xffffffff zero=0x0
want_l2 c.qcow2 2 "compressed, refused" compressed=1
echo "ok: compressed: zeroes written, fast zero refused"
