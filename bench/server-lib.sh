# nbdstack: one server at a time in a private scratch directory, for the
# benchmark scripts and scripts/demo.sh.  Source it after setting $tmp (a
# fresh mktemp -d); it sets $sock, $pidfile and $log in there, and
# installs traps so that the server is always stopped and $tmp removed,
# whatever way the script exits (its log tail is shown on failure).
# SPDX-License-Identifier: BSD-3-Clause

sock=$tmp/srv.sock
pidfile=$tmp/srv.pid
log=$tmp/srv.log

# stop_pids: the shared server-stop helper (SIGTERM, time limit, SIGKILL).
. "$(dirname "${BASH_SOURCE[0]}")/../common/stop-server.sh"

# Stop the server in $pidfile (nbdkit or qemu-nbd) and wait for it: it
# flushes on the way out, and a timed run must not overlap the next one.
# SIGKILL (said on stderr) if it is still there 20 s after SIGTERM.
# Always returns 0.
stop_server ()
{
  local pid
  pid=$(cat "$pidfile" 2>/dev/null) || return 0
  rm -f "$pidfile"
  stop_pids --timeout=20 "$pid" || :
}

_server_lib_cleanup ()
{
  local rc=$?
  set +e
  stop_server
  if [ $rc -ne 0 ] && [ -s "$log" ]; then
    echo "---- server log (last 20 lines)" >&2
    tail -n 20 "$log" >&2
  fi
  rm -rf "$tmp"
  exit $rc
}
trap _server_lib_cleanup EXIT
trap 'exit 130' INT TERM

# An awk function for the scripts' tables: the median of a list of
# space-separated numbers.  Put it in front of a program:
#   awk "$MEDIAN_AWK"'{ ... median(list) ... }'
MEDIAN_AWK='
function median(list,   a, n, i, j, t) {
  n = split(list, a, " ")
  for (i = 2; i <= n; i++) {
    t = a[i] + 0
    for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j + 1] = a[j]
    a[j + 1] = t
  }
  return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
'

# round_order N ROUND: the indexes 0..N-1, one per line, in an order
# shuffled afresh for every round (seeded by ROUND, so a rerun repeats
# it).  A plain rotation would have every configuration follow the same
# one in every round, and what an upload leaves behind (freed page cache,
# memory the host takes back) would bias the next one the same way each
# time.
round_order ()
{
  awk -v n="$1" -v seed="$2" 'BEGIN {
    srand(seed)
    for (i = 0; i < n; i++) a[i] = i
    for (i = n - 1; i > 0; i--) { j = int(rand() * (i + 1)); t = a[i]; a[i] = a[j]; a[j] = t }
    for (i = 0; i < n; i++) print a[i]
  }'
}
