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

# MEDIAN_AWK, median and lower_median for the tables (median.sh), and
# round_order for the order of the runs (rounds.sh).
. "$(dirname "${BASH_SOURCE[0]}")/median.sh"
. "$(dirname "${BASH_SOURCE[0]}")/rounds.sh"
