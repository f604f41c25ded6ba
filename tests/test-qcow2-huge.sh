#!/usr/bin/env bash
# qcow2: creating and first opening an image cost nothing per virtual
# terabyte, and an upload allocates its data plus the metadata it needs.
# For 1T, 16T, 1P and 64P at 64 KiB and 2 MiB clusters (64P at 64 KiB:
# refused, as qemu-img refuses it; 64P is too large for the linear
# layout: create=true layout=linear refuses it naming layout=compact,
# layout=auto makes it compact, and a qemu-made one stays compact):
#  - create=true: the allocated bytes of the new image stay below 16 MiB;
#  - a qemu-img-made image, first writable open (which gives it the
#    linear layout): at most 8 MiB + 4 clusters more than qemu-img made;
#  - then one cluster written at 8 places spread over the first 4 TiB
#    (the linear layout puts guest offset g at D + g: ext4 files end at
#    16 TiB) and a flush: at most 3 clusters per place (data, L2 table, refcount block)
#    + 4 more; the image is clean, reads what was written, and maps
#    every cluster at one guest->host delta (the linear layout).
# And the end of a disk larger than the file system's largest file
# (32T: ext4 ends files at 16 TiB): a write at 30T succeeds, qemu reads
# it back and the image is clean (the linear layout, whose homes would
# lie past the limit, is not used there, for create=true and for a
# qemu-made image alike).  Before: the write failed with EFBIG and the
# image was failed.
# Each step runs under a 120 s limit that only catches a hang (the
# times are printed, not judged).  Before the fix: 1T made 32 MiB of
# refcount blocks at the open, 16T 513 MiB, 64P wrote for minutes.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require qemu-img
require qemu-io
require nbdsh
require timeout
cd "$T"

allocated () { echo $(($(stat -c '%b * %B' "$1"))); }
# The largest file this file system holds (ext4: 16 TiB - 4K): lseek
# past it fails.  A linear layout must end below it, so larger disks
# stay compact here.
fsmax=$(/usr/bin/python3 -c '
import os
fd = os.open("fsmax.probe", os.O_RDWR | os.O_CREAT)
lo, hi = 0, 1 << 63
while hi - lo > 1:
    mid = (lo + hi) // 2
    try:
        os.lseek(fd, mid, os.SEEK_SET); lo = mid
    except OSError:
        hi = mid
print(lo)')
rm -f fsmax.probe
echo "largest file here: $fsmax bytes"
# linear_fits SIZE: 1 if a disk of SIZE (qemu-img's suffixes) can have
# the linear layout here (1 GiB of room for the metadata below it).
linear_fits ()
{
  local b
  b=$(numfmt --from=iec "$1")
  [ "$b" -lt $((fsmax - (1 << 30))) ] && [ "$b" -lt $((1 << 55)) ] && echo 1 || echo 0
}
MiB=$((1024 * 1024))

# run LABEL ARGS...: nbdkit over x.qcow2 with a client writing one
# cluster at 8 places (if WRITE=1) or only asking the size.
run ()
{
  local label=$1 t0 t1; shift
  t0=$(date +%s.%N)
  CS=$cs WRITE=${WRITE:-0} timeout 120 "$NBDKIT" -U - "$IMAGE_PLUGIN" \
    file=x.qcow2 "$@" --run 'nbdsh -u "$uri" -c "
import os
cs = int(os.environ[\"CS\"])
size = min(h.get_size(), 4 << 40)
if os.environ[\"WRITE\"] == \"1\":
    for i in range(8):
        off = (size // 8 * i + 12345 * cs) // cs * cs
        h.pwrite(bytes([i + 1]) * cs, off)
    h.flush()
"' >run.out 2>&1 || fail "$label: $(tail -5 run.out)"
  t1=$(date +%s.%N)
  elapsed=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
}

verify ()
{
  local label=$1
  "$QEMU_IMG" check x.qcow2 >check.out 2>&1 ||
    fail "$label: qemu-img check: $(head -5 check.out)"
  CS=$cs LINEAR=$2 /usr/bin/python3 - <<'PY' || fail "$label: the data read back differs"
import os, subprocess
cs = int(os.environ["CS"])
info = subprocess.run(["qemu-img", "info", "--output=json", "x.qcow2"],
                      capture_output=True, text=True, check=True).stdout
import json
size = min(json.loads(info)["virtual-size"], 4 << 40)
for i in range(8):
    off = (size // 8 * i + 12345 * cs) // cs * cs
    out = subprocess.run(["qemu-io", "-f", "qcow2", "-c",
                          "read -P %d %d %d" % (i + 1, off, cs), "x.qcow2"],
                         capture_output=True, text=True).stdout
    assert "Pattern verification failed" not in out and "read " in out, out
# The linear layout: every cluster at one guest->host delta.
m = json.loads(subprocess.run(["qemu-img", "map", "--output=json", "x.qcow2"],
                              capture_output=True, text=True,
                              check=True).stdout)
deltas = set(e["offset"] - e["start"] for e in m if e["data"])
assert len(deltas) == (1 if os.environ["LINEAR"] == "1" else 8), deltas
PY
}

for cs in 65536 2097152; do
  for size in 1T 16T 1P 64P; do
    if [ $cs = 65536 ] && [ $size = 64P ]; then
      rm -f x.qcow2
      ! "$QEMU_IMG" create -q -f qcow2 -o cluster_size=$cs x.qcow2 $size \
        2>/dev/null || fail "qemu-img made a 64P image at 64K clusters"
      ! "$NBDKIT" -U - "$IMAGE_PLUGIN" file=x.qcow2 format=qcow2 \
        create=true size=$size cluster-size=$cs --run true 2>err.out ||
        fail "create=true made a 64P image at 64K clusters"
      echo "64P, 64K: refused by both ($(tail -1 err.out))"
      continue
    fi

    # 64P: D + 64P is past the 2^56 bytes an L2 entry can address, so
    # no linear layout (refused for create=true on a file, not given to
    # a qemu-made image).
    if [ $size = 64P ]; then
      rm -f x.qcow2
      ! "$NBDKIT" -U - "$IMAGE_PLUGIN" file=x.qcow2 format=qcow2 \
        create=true size=$size cluster-size=$cs layout=linear --run true 2>err.out ||
        fail "a linear 64P image was made"
      grep -q 'layout=compact' err.out || fail "64P: $(cat err.out)"
    fi
    rm -f x.qcow2
    run "create=true $size $cs" format=qcow2 create=true size=$size \
      cluster-size=$cs
    a=$(allocated x.qcow2)
    echo "create=true $size, cs $cs: $elapsed s, allocated $a"
    [ "$a" -le $((16 * MiB)) ] ||
      fail "create=true $size cs $cs: $a bytes allocated"

    rm -f x.qcow2
    "$QEMU_IMG" create -q -f qcow2 -o cluster_size=$cs x.qcow2 $size
    q=$(allocated x.qcow2)
    run "qemu-made $size $cs: open"
    a=$(allocated x.qcow2)
    echo "qemu-made $size, cs $cs: first open $elapsed s, allocated $q -> $a"
    [ "$a" -le $((q + 8 * MiB + 4 * cs)) ] ||
      fail "qemu-made $size cs $cs: the open made $q -> $a bytes allocated"

    WRITE=1 run "qemu-made $size $cs: upload"
    b=$(allocated x.qcow2)
    echo "  8 clusters written: $elapsed s, allocated $a -> $b"
    [ "$b" -le $((a + 8 * 3 * cs + 4 * cs)) ] ||
      fail "qemu-made $size cs $cs: 8 clusters took $a -> $b bytes"
    verify "qemu-made $size cs $cs" "$(linear_fits $size)"
  done
done

for how in create qemu; do
  rm -f x.qcow2
  args=()
  if [ $how = create ]; then args=(format=qcow2 create=true size=32T)
  else "$QEMU_IMG" create -q -f qcow2 x.qcow2 32T; fi
  timeout 120 "$NBDKIT" -U - "$IMAGE_PLUGIN" file=x.qcow2 "${args[@]}" \
    --run 'nbdsh -u "$uri" -c "h.pwrite(b\"\\x5a\" * 65536, 30 << 40); h.flush()"' \
    >end.out 2>&1 || fail "32T ($how): a write at 30T failed: $(tail -3 end.out)"
  "$QEMU_IMG" check -q x.qcow2 || fail "32T ($how): qemu-img check failed"
  "$QEMU_IO" -f qcow2 -c 'read -P 0x5a 30T 64k' x.qcow2 | grep -q 'verification failed' &&
    fail "32T ($how): qemu reads other data at 30T"
  echo "32T ($how): a write at 30T: ok, allocated $(allocated x.qcow2)"
done
echo OK
