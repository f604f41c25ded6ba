#!/usr/bin/env bash
# Per-request latency at queue depth 1: the plugin alone against the full
# stack (coalesce + zerodetect + discard), in rounds.  One connection
# sends writes of 4K, 64K, 256K, 1M and 2M in turn, each followed by a
# 1M zero request and in ascending order, which is what `qemu-img convert
# -n` (no -W) does on a fragmented image: one request at a time, so
# whatever a layer adds per request lands on the wall time.  Per target
# and request kind the median latency (µs) over the rounds' medians, and
# the stack's per-round ratios, are printed; also the server's CPU.
#
#   BUILD=./build bench/qd1-latency.sh
#
# Environment: RUNS=8 (rounds), N=1000 (writes per round), MODE=none
# (the plugin's cache mode), FORMAT=raw (or qcow2, made by qemu-img
# create), TMPDIR=/var/tmp (disk-backed: O_DIRECT).  Needs Debian's
# python3 with the nbd module (python3-libnbd).
# SPDX-License-Identifier: BSD-3-Clause
set -euo pipefail
PATH=/usr/bin:/usr/sbin:/bin:/sbin:$PATH
export LC_ALL=C
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${BUILD:-$here/../build}" && pwd)
runs=${RUNS:-8}
n=${N:-1000}
mode=${MODE:-none}
format=${FORMAT:-raw}
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "qd1-latency: RUNS=$runs: expected a positive integer" >&2; exit 1; }
[[ $n =~ ^[1-9][0-9]*$ ]] || { echo "qd1-latency: N=$n: expected a positive integer" >&2; exit 1; }
case $format in raw | qcow2) ;; *) echo "qd1-latency: FORMAT=$format: expected raw or qcow2" >&2; exit 1 ;; esac
python3 -c 'import nbd' 2>/dev/null || { echo "qd1-latency: python3's nbd module is missing (python3-libnbd)" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/qd1-latency.XXXXXX")
. "$here/server-lib.sh"         # $sock, $pidfile, stop_server; removes $tmp

# One round's client: prints "KIND=MEDIAN_US ..." for the request kinds.
client='
import nbd, os, statistics, sys, time
h = nbd.NBD()
h.connect_uri(sys.argv[1])
n, size = int(sys.argv[2]), h.get_size()
sizes = [4096, 65536, 262144, 1048576, 2097152]
bufs = {s: os.urandom(s) for s in sizes}
lat = {str(s): [] for s in sizes}
lat["zero1M"] = []
off = 0
for i in range(n):
    s = sizes[i % len(sizes)]
    if off + s + 1048576 > size:
        off = 0
    t = time.perf_counter(); h.pwrite(bufs[s], off); lat[str(s)].append(time.perf_counter() - t)
    off += s
    t = time.perf_counter(); h.zero(1048576, off); lat["zero1M"].append(time.perf_counter() - t)
    off += 1048576
h.flush()
h.shutdown()
print(" ".join(f"{k}={statistics.median(v) * 1e6:.0f}" for k, v in lat.items()))
'

serve ()
{
  local t=$1 f=() i
  rm -f "$sock" "$pidfile" "$tmp/t.img"
  if [ "$format" = qcow2 ]; then qemu-img create -q -f qcow2 "$tmp/t.img" 4G
  else truncate -s 4G "$tmp/t.img"; fi
  if [ "$t" = stack ]; then
    for x in coalesce zerodetect discard; do
      f+=("--filter=$build/filters/$x/.libs/nbdkit-$x-filter.so")
    done
  fi
  nbdkit -U "$sock" -P "$pidfile" "${f[@]}" \
    "$build/plugins/image/.libs/nbdkit-image-plugin.so" \
    file="$tmp/t.img" format="$format" cache="$mode" 2>>"$log"
  for ((i = 0; i < 100; i++)); do
    [ -S "$sock" ] && [ -s "$pidfile" ] && return 0
    sleep 0.05
  done
  echo "qd1-latency: $t did not start" >&2
  exit 1
}

# Round $1 of target $2: appends the client's medians and the server's
# CPU seconds (read before it is stopped) to $results, on one line.  Run
# in this shell, so that a failure stops the script (set -e) and its
# trap stops the server.
results=$tmp/results
one_round ()
{
  local r=$1 t=$2 out cpu
  serve "$t"
  out=$(python3 -c "$client" "nbd+unix:///?socket=$sock" "$n")
  cpu=$(awk -v hz="$(getconf CLK_TCK)" '{ printf "%.3f", ($14 + $15) / hz }' \
          "/proc/$(cat "$pidfile")/stat")
  stop_server
  echo "$r $t $out cpu=$cpu" | tee -a "$results" >&2
}

for ((r = 1; r <= runs; r++)); do
  for t in image stack; do
    one_round "$r" "$t"
  done
done
python3 - "$results" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    r, t, *kv = line.split()
    runs[r][t] = {k: float(v) for k, v in (x.split("=") for x in kv)}
kinds = list(next(iter(runs.values()))["image"])
print("| request | alone µs | stack µs | stack / alone | per-round ratios (low, median, high) |")
print("|---|---:|---:|---:|---:|")
for k in kinds:
    a = statistics.median(runs[r]["image"][k] for r in runs)
    s = statistics.median(runs[r]["stack"][k] for r in runs)
    ratios = sorted(runs[r]["stack"][k] / runs[r]["image"][k] for r in runs)
    name, f = ("server CPU s", ".2f") if k == "cpu" else (k, ".0f")
    print(f"| {name} | {a:{f}} | {s:{f}} | {s / a:.2f} | {ratios[0]:.2f}, "
          f"{statistics.median(ratios):.2f}, {ratios[-1]:.2f} |")
PY
