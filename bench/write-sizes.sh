#!/usr/bin/env bash
# What a client sends when it uploads a sample: the histogram of its
# write sizes (and zero requests), seen by nbdkit's log filter in front
# of the memory plugin, one upload per client.
#
#   bench/write-sizes.sh SAMPLE [CLIENT...]
#
# CLIENT: convert-W (qemu-img convert -n -W), convert (qemu-img convert
# -n), nbdcopy (nbdcopy --flush); default all three.  Prints, per
# client, the number of writes and their bytes in power-of-two buckets
# (a bucket "64K" holds sizes in (32K, 64K]), then the zero requests.
# Needs the sample's virtual size in memory only for what is written
# (the memory plugin is sparse).  TMPDIR=/var/tmp.
# SPDX-License-Identifier: BSD-3-Clause
set -euo pipefail
PATH=/usr/bin:/usr/sbin:/bin:/sbin:$PATH
export LC_ALL=C
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] || { echo "usage: write-sizes.sh SAMPLE [CLIENT...]" >&2; exit 1; }
sample=$(realpath "$1"); shift
clients=${*:-convert-W convert nbdcopy}
vsize=$(stat -c %s "$sample")

. "$here/../common/stop-server.sh"
W=$(mktemp -d "${TMPDIR:-/var/tmp}/write-sizes.XXXXXX")
cleanup () { [ -f "$W/pid" ] && stop_pids "$(cat "$W/pid")" || true; rm -rf "$W"; }
trap cleanup EXIT

for c in $clients; do
  rm -f "$W/sock" "$W/pid" "$W/log"
  nbdkit -U "$W/sock" -P "$W/pid" --filter=log memory "$vsize" \
    logfile="$W/log"
  for ((i = 0; i < 100; i++)); do [ -S "$W/sock" ] && break; sleep 0.05; done
  uri="nbd+unix:///?socket=$W/sock"
  case $c in
  convert-W) qemu-img convert -n -W -f raw -O raw "$sample" "$uri" ;;
  convert) qemu-img convert -n -f raw -O raw "$sample" "$uri" ;;
  nbdcopy) nbdcopy --flush "$sample" "$uri" ;;
  *) echo "write-sizes: unknown client $c" >&2; exit 1 ;;
  esac
  stop_pids "$(cat "$W/pid")"
  rm -f "$W/pid"
  echo "== $c"
  python3 - "$W/log" <<'PY'
import re, sys
cnt, byt = {}, {}
for line in open(sys.argv[1]):
    m = re.search(r" (Write|Zero) id=\d+ .*count=(0x[0-9a-f]+).*\.\.\.$", line)
    if not m:
        continue
    kind, n = m.group(1).lower(), int(m.group(2), 16)
    b = 1
    while b < n:
        b *= 2
    cnt[kind, b] = cnt.get((kind, b), 0) + 1
    byt[kind, b] = byt.get((kind, b), 0) + n
def h(b):
    return "%dM" % (b >> 20) if b >= 1 << 20 else "%dK" % (b >> 10) if b >= 1024 else str(b)
for kind in ("write", "zero"):
    keys = sorted(b for k, b in cnt if k == kind)
    tot = sum(cnt[kind, b] for b in keys); totb = sum(byt[kind, b] for b in keys)
    print("%ss: %d, %.1f MiB" % (kind, tot, totb / 1048576))
    for b in keys:
        print("  <= %5s %7d  %5.1f%% of requests  %5.1f%% of bytes"
              % (h(b), cnt[kind, b], 100 * cnt[kind, b] / tot, 100 * byt[kind, b] / totb))
PY
done
