#!/usr/bin/env bash
# The upload rows of bench/upload.sh on other file systems: ext4, XFS and
# btrfs, each made fresh on a loop device over a sparse file in TMPDIR,
# with the same sample (generated once, outside them), the same servers
# (our image plugin, the full stack = the image plugin behind our
# coalesce, zerodetect and discard filters, nbdkit file, qemu-nbd with
# oVirt imageio's options), raw and qcow2, cache=none and writeback,
# qemu-img convert -n -W and nbdcopy.  Every upload is verified by
# upload.sh (qemu-img compare; qemu-img check for qcow2); figures are
# medians of RUNS interleaved rounds in shuffled order.  Before the
# uploads, every file system is probed (bench/fs-probe.py: statx
# DIOALIGN, O_DIRECT alignment, PUNCH_HOLE, ZERO_RANGE, SEEK_DATA,
# reflink, copy-on-write) and so is our plugin (cache=none: opened with
# O_DIRECT?  unaligned writes, zero, trim, flush through it, checked).
# Needs root (losetup, mount).  Loop devices and mounts are always
# removed on exit.
#
#   sudo bench/filesystems.sh [> report.md]
#
# The report (markdown) goes to stdout; progress to stderr.
# Environment (all optional):
#   SIZE=4G RUNS=3     sample size and rounds (as upload.sh)
#   FILESYSTEMS="ext4 xfs btrfs"
#   MATRIX=trimmed     trimmed: the configurations listed in CONFIGS_TRIMMED
#                      below (to fit about 15 min for SIZE=4G RUNS=3 on a quiet
#                      machine; the report says what is left out); full: every
#                      target x mode x client (about 2x longer)
#   CLIENTS, MODES     the clients and modes of the full matrix
#   SETTLE=3 PREFAULT=0  passed to upload.sh (see there)
#   LOOP_DIO=on        losetup --direct-io (on: the loop device reads and
#                      writes its backing file with O_DIRECT, so the page
#                      cache is not used twice; off: buffered)
#   FS_SIZE            size of each file system (default: 3x the sample's
#                      allocation, at least 2 GiB)
#   BUILD=./build TMPDIR=/var/tmp
#   OUT=DIR            also keep every file system's upload.sh table, log
#                      and raw TSV files there
#
# SPDX-License-Identifier: BSD-3-Clause
set -euo pipefail
PATH=/usr/bin:/usr/sbin:/bin:/sbin:$PATH
export PATH LC_ALL=C

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
size=${SIZE:-4G}
runs=${RUNS:-3}
settle=${SETTLE:-3}
prefault=${PREFAULT:-0}
filesystems=${FILESYSTEMS:-ext4 xfs btrfs}
matrix=${MATRIX:-trimmed}
loop_dio=${LOOP_DIO:-on}
build=${BUILD:-$top/build}
build=$(cd "$build" 2>/dev/null && pwd) || { echo "filesystems: BUILD=$build: no such directory" >&2; exit 1; }

t_start=$EPOCHREALTIME
elapsed () { awk -v a="$t_start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%d", b - a }'; }
say () { printf '[%s %5ss] filesystems: %s\n' "$(date +%H:%M:%S)" "$(elapsed)" "$*" >&2; }
die () { echo "filesystems: ERROR: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (losetup, mkfs, mount)"
for p in losetup mount umount findmnt mkfs.ext4 mkfs.xfs mkfs.btrfs filefrag python3 \
         nbdkit nbdsh qemu-img qemu-nbd nbdcopy; do
  command -v "$p" >/dev/null || die "$p is not installed"
done
for fs in $filesystems; do
  case $fs in ext4 | xfs | btrfs) ;; *) die "FILESYSTEMS: $fs: expected ext4, xfs, btrfs" ;; esac
  grep -qw "$fs" /proc/filesystems || modprobe "$fs" 2>/dev/null ||
    die "the kernel has no $fs"
done
case $matrix in trimmed | full) ;; *) die "MATRIX=$matrix: expected trimmed or full" ;; esac
case $loop_dio in on | off) ;; *) die "LOOP_DIO=$loop_dio: expected on or off" ;; esac
plugin=$build/plugins/image/.libs/nbdkit-image-plugin.so
[ -f "$plugin" ] || die "$plugin not found: build first"
filters="coalesce zerodetect discard"
for f in $filters; do
  [ -f "$build/filters/$f/.libs/nbdkit-$f-filter.so" ] || die "filter $f not built in $build"
done

# ---- the matrix.  upload.sh adds target image+filters (raw), the full
# stack, because FILTERS is set.
targets="image file qemu-nbd-imageio image:qcow2 qemu-nbd-imageio:qcow2"
modes=${MODES:-none writeback}
clients=${CLIENTS:-convert-W nbdcopy}
# Trimmed: both clients where the peers differ most (raw cache=none
# against qemu-nbd's O_DIRECT; raw writeback against nbdkit file),
# convert -W only for qcow2 and the stack.
CONFIGS_TRIMMED="image/none/convert-W image/none/nbdcopy
  image/writeback/convert-W image/writeback/nbdcopy
  file/writeback/convert-W file/writeback/nbdcopy
  qemu-nbd-imageio/none/convert-W qemu-nbd-imageio/none/nbdcopy
  image+filters/none/convert-W
  image:qcow2/none/convert-W image:qcow2/writeback/convert-W
  qemu-nbd-imageio:qcow2/none/convert-W qemu-nbd-imageio:qcow2/writeback/convert-W"
if [ "$matrix" = trimmed ]; then
  only=$(echo $CONFIGS_TRIMMED)
  n_raw=9 n_qcow2=4
  trimmed_note="trimmed (MATRIX=trimmed; MATRIX=full runs them all): left out are nbdkit file with cache=none (on nbdkit 1.32 not O_DIRECT but page cache + sync_file_range), qemu-nbd raw writeback, the stack in writeback and in qcow2, qcow2 uploads with nbdcopy"
else
  only=
  targets="$targets image+filters:qcow2"
  nm=$(wc -w <<<"$modes") nc=$(wc -w <<<"$clients")
  n_raw=$((4 * nm * nc)) n_qcow2=$((3 * nm * nc))
  trimmed_note="full: ($targets image+filters) x ($modes) x ($clients)"
fi

# ---- scratch; everything we set up is undone on exit, in reverse order.
tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/nbdstack-fs.XXXXXX")
tmp=$(realpath "$tmp")
[ "$(stat -f -c %T "$tmp")" != tmpfs ] || die "$tmp is on tmpfs: set TMPDIR to a disk-backed directory"
mnt= loopdev= srvpid=
# Unmount $mnt: a server that just exited may hold it for a moment
# (deferred file release), so retry for 10 s, then detach it lazily.
unmount_fs ()
{
  local i
  for ((i = 0; i < 20; i++)); do
    mountpoint -q "$mnt" || return 0
    umount "$mnt" 2>/dev/null && return 0
    sleep 0.5
  done
  say "$mnt still busy after 10 s: $(fuser -vm "$mnt" 2>&1 | tail -n +2 | tr -s ' \n' ' '); lazy unmount"
  umount -l "$mnt"
}
cleanup ()
{
  local rc=$?
  set +e
  if [ -n "$srvpid" ]; then kill "$srvpid" 2>/dev/null; while kill -0 "$srvpid" 2>/dev/null; do sleep 0.05; done; fi
  [ -z "$mnt" ] || unmount_fs
  [ -z "$loopdev" ] || losetup -d "$loopdev"
  if [ $rc -ne 0 ] && [ -n "${OUT:-}" ] && [ -d "$tmp/res" ]; then
    mkdir -p "$OUT" && cp -r "$tmp/res"/. "$OUT"/ && echo "filesystems: partial results in $OUT" >&2
  fi
  rm -rf "$tmp"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# ---- the sample, once, outside the file systems under test.
sample=$tmp/sample.img
say "sample: SIZE=$size bench/make-sample.sh"
SIZE=$size BUILD=$build bash "$here/make-sample.sh" "$sample" >"$tmp/sample.txt" 2>&1 ||
  { cat "$tmp/sample.txt" >&2; die "cannot create the sample"; }
salloc=$(( $(stat -c '%b * %B' "$sample") ))
gib=$((1 << 30))
fs_size=${FS_SIZE:-$(( (3 * salloc + gib - 1) / gib ))G}
[ -n "${FS_SIZE:-}" ] || [ "${fs_size%G}" -ge 2 ] || fs_size=2G

# ---- the estimate: seconds per upload on a quiet 2-core VM, measured
# (512M samples here, 4G ones in upload.sh's README): about 2 s + 2.5 s
# per GiB allocated (upload, verify, start/stop, sync), qcow2 1.5 s per
# GiB more (check, map, cold read-back), plus SETTLE and PREFAULT (about
# 1.7 s per GiB touched); per file system 15 s (mkfs, probes, upload.sh's
# cache=none check, the page cache warm-up).
n_cfg=$((n_raw + n_qcow2 + 1))
est=$(awk -v r="$runs" -v nr="$((n_raw + 1))" -v nq="$n_qcow2" -v a="$salloc" -v s="$settle" \
  -v p="$prefault" -v nf="$(wc -w <<<"$filesystems")" 'BEGIN {
  g = a / 2^30; u = 2 + 2.5 * g + s + 1.7 * p
  printf "%d", nf * (15 + r * (nr * u + nq * (u + 1.5 * g)))
}')
say "$(wc -w <<<"$filesystems") file systems x $n_cfg configurations x $runs rounds" \
  "($matrix matrix), sample $(numfmt --to=iec "$salloc") allocated, file systems of $fs_size:" \
  "estimated $((est / 60)) min $((est % 60)) s on a quiet machine, about 1.5x that at a load" \
  "average of 5-10 (load now: $(cut -d' ' -f1-3 /proc/loadavg))"

# ---- our plugin on this file system: cache=none (O_DIRECT?), an
# unaligned write, a write, zero, trim and flush; read back by qemu-img
# against the same operations done on a plain file; the trim must free.
plugin_probe ()               # DIR FORMAT
{
  local d=$1 fmt=$2 t=$1/pprobe.img sock=$1/pprobe.sock pidf=$1/pprobe.pid fd ok=yes
  local expect=$tmp/pprobe-expect.img a1 res i
  rm -f "$t" "$sock" "$pidf"
  if [ "$fmt" = raw ]; then truncate -s 64M "$t"; else qemu-img create -q -f qcow2 "$t" 64M; fi
  if ! nbdkit -U "$sock" -P "$pidf" "$plugin" file="$t" cache=none 2>"$d/pprobe.log"; then
    echo "does not start: $(grep -m1 -i error "$d/pprobe.log")"
    return 0
  fi
  # nbdkit writes the pid file from its forked child: wait for it.
  for ((i = 0; i < 200; i++)); do
    [ -s "$pidf" ] && [ -S "$sock" ] && break
    sleep 0.05
  done
  srvpid=$(cat "$pidf") || { echo "no pid file"; return 0; }
  res="O_DIRECT no"
  for fd in /proc/"$srvpid"/fd/*; do
    [ "$(readlink "$fd")" = "$t" ] || continue
    (( 8#$(awk '/^flags:/ { print $2 }' "/proc/$srvpid/fdinfo/${fd##*/}") & 8#40000 )) &&
      res="O_DIRECT yes"
  done
  # Data, then zero (may trim) and trim over parts of it.
  if ! nbdsh -u "nbd+unix:///?socket=$sock" -c '
import random
r = random.Random(7)
d = bytes(r.getrandbits(8) for _ in range(1 << 20)) * 8
h.pwrite(d, 0)
h.pwrite(b"abc", 4097)
h.pwrite(d[:5000], 9 << 20 | 123)
h.flush()
h.zero(1 << 20, 1 << 20, nbd.CMD_FLAG_FUA)   # (count, offset)
h.zero(2 << 20 | 1000, 3000)
h.trim(3 << 20, 4 << 20)
h.flush()
' 2>"$d/pprobe.err"; then
    ok="no: $(tail -n 1 "$d/pprobe.err")"
  fi
  kill "$srvpid"
  while kill -0 "$srvpid" 2>/dev/null; do sleep 0.05; done
  srvpid=
  python3 -c '
import random, sys
r = random.Random(7)
d = bytes(r.getrandbits(8) for _ in range(1 << 20)) * 8
img = bytearray(64 << 20); img[:len(d)] = d
img[4097:4100] = b"abc"
img[9 << 20 | 123:(9 << 20 | 123) + 5000] = d[:5000]
img[1 << 20:2 << 20] = bytes(1 << 20)
img[3000:3000 + (2 << 20 | 1000)] = bytes(2 << 20 | 1000)
img[4 << 20:7 << 20] = bytes(3 << 20)   # trim: reads back zero here (both peers punch)
open(sys.argv[1], "wb").write(img)' "$expect"
  if [ "$ok" = yes ]; then
    if qemu-img compare -q -f raw -F "$fmt" "$expect" "$t" 2>/dev/null; then ok=verified
    else ok="CONTENT DIFFERS (qemu-img compare)"; fi
    if [ "$fmt" = qcow2 ] && ! qemu-img check -q "$t" >/dev/null 2>&1; then ok="$ok, QEMU-IMG CHECK FAILS"; fi
  fi
  a1=$(( $(stat -c '%b * %B' "$t") >> 10 ))
  echo "$res; unaligned write + zero + trim + flush: $ok; $a1 KiB allocated of 8 MiB written"
  rm -f "$t" "$expect"
}

# ---- per file system: make, mount, probe, upload.sh, undo.
res=$tmp/res
mkdir -p "$res"
for fs in $filesystems; do
  back=$tmp/$fs.fsimg
  mnt=$tmp/mnt-$fs
  mkdir -p "$mnt" "$res/$fs"
  truncate -s "$fs_size" "$back"
  loopdev=$(losetup --find --show --direct-io="$loop_dio" "$back")
  case $fs in
    ext4) mkfs_cmd=(mkfs.ext4 -q -F "$loopdev") ;;
    xfs) mkfs_cmd=(mkfs.xfs -q -f "$loopdev") ;;
    btrfs) mkfs_cmd=(mkfs.btrfs -q -f "$loopdev") ;;
  esac
  "${mkfs_cmd[@]}" >&2
  mount "$loopdev" "$mnt"
  {
    printf 'mkfs\t%s\n' "${mkfs_cmd[*]/$loopdev/\$LOOP}"
    printf 'loop\tlosetup --find --show --direct-io=%s $TMP/%s.fsimg (%s, %s); dio now: %s\n' \
      "$loop_dio" "$fs" "$fs_size" "$(stat -f -c %T "$tmp") under it" \
      "$(cat "/sys/block/${loopdev#/dev/}/loop/dio" 2>/dev/null || echo '?')"
    printf 'mount\t%s\n' "$(findmnt -no FSTYPE,OPTIONS "$mnt")"
  } >"$res/$fs/meta"
  say "$fs: $loopdev mounted on $mnt ($(findmnt -no OPTIONS "$mnt")); probing"
  python3 "$here/fs-probe.py" "$mnt" >"$res/$fs/probe" 2>&1 || echo "probe_failed	$(tail -n 1 "$res/$fs/probe")" >>"$res/$fs/probe"
  printf 'plugin_cache_none_raw\t%s\n' "$(plugin_probe "$mnt" raw)" >>"$res/$fs/probe"
  printf 'plugin_cache_none_qcow2\t%s\n' "$(plugin_probe "$mnt" qcow2)" >>"$res/$fs/probe"
  say "$fs: upload.sh"
  rc=0
  SAMPLE=$sample RUNS=$runs SETTLE=$settle PREFAULT=$prefault BUILD=$build TMPDIR=$mnt \
    TARGETS="$targets" MODES="$modes" CLIENTS="$clients" FILTERS="$filters" ONLY="$only" \
    RESULTS=$res/$fs/results.tsv LAYOUT=$res/$fs/layout.tsv CMDS=$res/$fs/cmds.tsv \
    bash "$here/upload.sh" >"$res/$fs/table.md" 2> >(tee "$res/$fs/log" >&2) || rc=$?
  if [ $rc -ne 0 ]; then
    printf 'upload_failed\texit %s: %s\n' "$rc" "$(grep -m1 'ERROR' "$res/$fs/log" || tail -n 1 "$res/$fs/log")" \
      >>"$res/$fs/probe"
    say "$fs: upload.sh FAILED (exit $rc)"
  fi
  grep -o 'skipped.*' "$res/$fs/table.md" | grep -v '^skipped *|' |
    sed 's/^/upload_skipped\t/' >>"$res/$fs/probe" || :
  unmount_fs
  mnt=
  losetup -d "$loopdev"
  loopdev=
  rm -f "$back"
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- the report
python3 - "$res" "$tmp" "$build" "$filesystems" <<'PY'
import os, statistics, sys
res, tmp, build, fss = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split()

def tsv(p):
    if not os.path.exists(p):
        return []
    return [l.rstrip("\n").split("\t") for l in open(p) if l.strip()]

med = lambda xs: statistics.median(xs) if xs else None
rows, cells, order = {}, {}, []
for fs in fss:
    runs = {}
    for r in tsv(f"{res}/{fs}/results.tsv"):
        k = (r[0], r[1], r[2])
        runs.setdefault(k, []).append(r)
        if k not in order:
            order.append(k)
    inv = {}
    for r in tsv(f"{res}/{fs}/layout.tsv"):
        inv.setdefault((r[0], r[1], r[2]), []).append(float(r[5]))
    for k, rs in runs.items():
        num = lambda i: [float(r[i]) for r in rs if r[i] not in ("-", "")]
        cells[fs, k] = dict(s=med(num(4)), cpu=med(num(5)), ext=med(num(6)),
                            alloc=med(num(7)), inv=med(inv.get(k, [])), n=len(rs))

def fmt_of(t):
    return t.split(":")[1] if ":" in t else ("raw")

def peer(t):
    return t.split(":")[0] in ("file", "qemu-nbd", "qemu-nbd-imageio")

order.sort(key=lambda k: (k[0] == "local", fmt_of(k[0]), not peer(k[0]), k[0], k[1], k[2]))
print("| target | format | mode | client | " + " | ".join(
    f"{fs} s | {fs} vs peer | {fs} CPU s | {fs} MiB | {fs} extents | {fs} inv." for fs in fss) + " |")
print("|---|---|---|---|" + "---:|" * 6 * len(fss))
for k in order:
    t, m, c = k
    line = [t.split(":")[0] if t != "local" else "local file (limit)", fmt_of(t), m, c]
    for fs in fss:
        x = cells.get((fs, k))
        if not x or x["s"] is None:
            line += ["-"] * 6
            continue
        best = [cells[fs, p]["s"] for p in order if (fs, p) in cells and peer(p[0])
                and fmt_of(p[0]) == fmt_of(t) and p[1] == m and p[2] == c]
        ratio = f"{min(best) / x['s']:.2f}" if best and t != "local" else "-"
        f = lambda v, spec: "-" if v is None else format(v, spec)
        line += [f(x["s"], ".2f"), ratio, f(x["cpu"], ".2f"), f(x["alloc"] and x["alloc"] / 2**20, ".0f"),
                 f(x["ext"], ".0f"), f(x["inv"], ".0f") if fmt_of(t) == "qcow2" else ""]
    print("| " + " | ".join(line) + " |")

print("\ns = median client wall seconds (final flush included); vs peer = best peer's median"
      " (nbdkit file, qemu-nbd-imageio; same file system, format, mode and client) / this"
      " median, > 1.00 is faster; CPU = median server user+system seconds; MiB = allocated"
      " size of the result (st_blocks); extents = filefrag; inv. = qcow2 inversions (data"
      " clusters whose host offset goes backwards in guest order).")
print("\n### File system behaviour (bench/fs-probe.py and the plugin probe)\n")
keys = []
probe = {}
for fs in fss:
    for r in tsv(f"{res}/{fs}/probe"):
        probe.setdefault(fs, {}).setdefault(r[0], []).append("\t".join(r[1:]))
        if r[0] not in keys:
            keys.append(r[0])
print("| probe | " + " | ".join(fss) + " |")
print("|---|" + "---|" * len(fss))
for key in keys:
    print(f"| {key} | " + " | ".join("; ".join(probe.get(fs, {}).get(key, ["-"])).replace("|", "/")
                                    for fs in fss) + " |")
print("\n### Setup and exact command lines\n")
for fs in fss:
    for r in tsv(f"{res}/{fs}/meta"):
        print(f"- {fs} {r[0]}: `{r[1]}`")
def clean(s, fs):
    s = s.replace(f"{tmp}/mnt-{fs}/", "$MNT/")
    s = s.replace(tmp, "$TMP").replace(build, "$BUILD")
    import re
    return re.sub(r"\$MNT/nbdstack-upload\.[A-Za-z0-9]+", "$MNT/$UP", s).strip()
print("\n$TMP = the scratch directory, $MNT = the file system's mount point, $UP = upload.sh's"
      " scratch directory in it; the same commands on every file system:\n")
seen = set()
for fs in fss:
    for r in tsv(f"{res}/{fs}/cmds.tsv"):
        line = f"{r[0]} {r[1]} {r[2]}: {clean(r[3], fs)}"
        if line not in seen:
            seen.add(line)
            print(f"    {line}")
PY
echo
echo "Sample: $(tail -n 1 "$tmp/sample.txt")"
echo "Matrix: $trimmed_note."
echo "Rounds: $runs (interleaved, order shuffled per round); SETTLE=$settle PREFAULT=$prefault; loop --direct-io=$loop_dio; file systems of $fs_size."
echo "nbdkit $(nbdkit --version | awk '{print $2}'), $(qemu-nbd --version | head -1), $(nbdcopy --version | head -1), kernel $(uname -r)"
for fs in $filesystems; do
  echo "$fs: load before $(grep -h -m1 '^load before' "$res/$fs/table.md" 2>/dev/null | sed 's/.*average: //')" \
    "after $(grep -h -m1 '^load after' "$res/$fs/table.md" 2>/dev/null | sed 's/.*average: //')"
done
echo "Took $(elapsed) s (the estimate for a quiet machine was $est s); load average at the end: $load_after."
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  cp -r "$res"/. "$OUT"/
  say "raw results in $OUT"
fi
say "done in $(elapsed) s"
