#!/usr/bin/env bash
# A sample made like a used disk, beside bench/make-sample.sh's long
# runs: an ext4 filesystem image holding a tree of files of mixed sizes,
# some of them deleted and their space partly reused.
#
#   bench/make-used-sample.sh OUTPUT
#
# How: a first generation of files (log-uniform sizes, most small, a
# few large; incompressible bytes from a seeded generator) is copied
# into a fresh ext4 filesystem mounted on a loop device (root needed),
# so that the kernel's allocator spreads the directories over the block
# groups as on a real disk; then about a third of the files are deleted
# and fstrim punches their blocks out of the image (as a guest's weekly
# fstrim does; TRIM=0: not, the blocks keep their old bytes, as on a
# disk nobody discards), and a second generation is written into the
# freed space, where it fragments.  Without root, `mkfs.ext4 -d` and
# debugfs do the same, but lay the files out back to back: a few long
# runs, not a used disk (the line printed says which way it was made).
# The same SIZE, FILL and SEED give the same files; the layout is the
# kernel's.
#
# Environment: TRIM=1, SIZE=4G (virtual size), FILL=1200M (bytes of files of
# the first generation; the second adds about a third of that),
# SEED=1, TMPDIR=/var/tmp (the file tree is staged there, about FILL).
#
# Prints one line: virtual size, allocated bytes, the number of data
# extents as `qemu-img map` sees them and the ext4 extent count of the
# image file (filefrag).
# SPDX-License-Identifier: BSD-3-Clause
set -euo pipefail
PATH=/usr/bin:/usr/sbin:/bin:/sbin:$PATH
export LC_ALL=C

die () { echo "make-used-sample: $*" >&2; exit 1; }
[ $# -eq 1 ] || die "usage: make-used-sample.sh OUTPUT"
output=$1
size=${SIZE:-4G}
fill=${FILL:-1200M}
seed=${SEED:-1}
trim=${TRIM:-1}
for p in mkfs.ext4 debugfs python3 qemu-img filefrag numfmt; do
  command -v "$p" >/dev/null || die "$p is not installed"
done
bytes=$(numfmt --from=iec "$size") || die "SIZE=$size: not a size"
fill_bytes=$(numfmt --from=iec "$fill") || die "FILL=$fill: not a size"
[[ $seed =~ ^[0-9]+$ ]] || die "SEED=$seed: expected a non-negative integer"
[ "$fill_bytes" -lt $((bytes / 2)) ] || die "FILL must be below half of SIZE"

tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/make-used-sample.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# The two generations of files and the debugfs script that deletes and
# adds.  File sizes: 80% 1K-64K, 18% 64K-4M, 2% 4M-64M (log-uniform in
# each band), 40 files per directory, every directory at the top level
# (the kernel spreads those over the block groups).
python3 - "$tmp" "$fill_bytes" "$seed" <<'PY'
import math, os, random, sys
tmp, fill, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
def size():
    r = rng.random()
    lo, hi = (1 << 10, 64 << 10) if r < 0.80 else \
             (64 << 10, 4 << 20) if r < 0.98 else (4 << 20, 64 << 20)
    return int(math.exp(rng.uniform(math.log(lo), math.log(hi))))
def tree(root, budget, prefix):
    files, n, total = [], 0, 0
    while total < budget:
        s = min(size(), budget - total)
        path = os.path.join(root, "d%d" % (n // 40))
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "f%d" % (n % 40)), "wb") as f:
            left = s
            while left:
                k = min(left, 1 << 20)
                f.write(rng.randbytes(k))
                left -= k
        files.append(("d%d/f%d" % (n // 40, n % 40), s))
        total += s
        n += 1
    return files
gen1 = tree(os.path.join(tmp, "tree"), fill, "")
# The second generation is staged outside the filesystem's tree.
gen2 = tree(os.path.join(tmp, "new"), fill // 3, "")
dele = [name for name, s in gen1 if rng.random() < 0.33]
with open(os.path.join(tmp, "debugfs.cmd"), "w") as cmd:
    for name in dele:
        cmd.write("rm /%s\n" % name)
    for name, s in gen2:
        cmd.write("write %s/new/%s /%s.new\n"
                  % (tmp, name, name.replace("/", "_")))
with open(os.path.join(tmp, "delete.txt"), "w") as f:
    for name in dele:
        f.write(name + "\n")
with open(os.path.join(tmp, "new.txt"), "w") as f:
    for name, s in gen2:
        f.write("%s %s.new\n" % (name, name.replace("/", "_")))
print("make-used-sample: %d files (%d bytes), then about a third deleted "
      "and %d files (%d bytes) written into the space" %
      (len(gen1), sum(s for _, s in gen1), len(gen2),
       sum(s for _, s in gen2)), file=sys.stderr)
PY

rm -f "$output"
if [ "$(id -u)" = 0 ] && command -v losetup >/dev/null; then
  how="loop mount"
  # Without flex_bg every block group keeps its own metadata and the
  # allocator spreads directories over all of them, as on older disks.
  mkfs.ext4 -q -F -b 4096 -O ^flex_bg "$output" "$((bytes / 1024))k" >/dev/null ||
    die "mkfs.ext4 failed"
  dev=$(losetup --find --show "$output") || die "losetup failed"
  mkdir "$tmp/mnt"
  trap 'umount "$tmp/mnt" 2>/dev/null; losetup -d "$dev"; rm -rf "$tmp"' EXIT
  mount -t ext4 "$dev" "$tmp/mnt" || die "mount failed"
  cp -a "$tmp/tree/." "$tmp/mnt/"
  sync -f "$tmp/mnt"
  (cd "$tmp/mnt" && xargs rm -f <"$tmp/delete.txt")
  sync -f "$tmp/mnt"
  # A guest with discard (fstrim.timer) punches the deleted files' blocks
  # out of its disk image: they become holes between the live files.
  [ "$trim" = 0 ] || fstrim "$tmp/mnt" || die "fstrim failed"
  while read -r src dst; do
    cp "$tmp/new/$src" "$tmp/mnt/$dst"
  done <"$tmp/new.txt"
  umount "$tmp/mnt"
  losetup -d "$dev"
  trap 'rm -rf "$tmp"' EXIT
else
  how="mkfs.ext4 -d + debugfs"
  mkfs.ext4 -q -F -b 4096 -E lazy_itable_init=1,lazy_journal_init=1 \
    -d "$tmp/tree" "$output" "$((bytes / 1024))k" >/dev/null ||
    die "mkfs.ext4 failed"
  debugfs -w -f "$tmp/debugfs.cmd" "$output" >/dev/null 2>"$tmp/debugfs.err" ||
    die "debugfs failed: $(tail -n 3 "$tmp/debugfs.err")"
  if grep -v '^debugfs ' "$tmp/debugfs.err" | grep -q .; then
    die "debugfs: $(grep -v '^debugfs ' "$tmp/debugfs.err" | head -n 3)"
  fi
fi
sync "$output"

alloc=$(( $(stat -c '%b * %B' "$output") ))
data_extents=$(qemu-img map --output=json -f raw "$output" |
  grep -c '"data": true')
frags=$(filefrag "$output" | sed -E 's/.*: ([0-9]+) extents? found/\1/')
echo "used sample $output ($how): virtual $(numfmt --to=iec "$bytes"), allocated $(numfmt --to=iec "$alloc") ($alloc bytes), $data_extents data extents (qemu-img map), $frags file extents (filefrag)"
