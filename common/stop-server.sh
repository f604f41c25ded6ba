# stop_pids: the one way the tests, the benchmarks and scripts/demo.sh
# stop a server.  Sourced by tests/functions.sh, bench/server-lib.sh
# and the scripts that do not use those; installed nowhere.  Needs bash.
# SPDX-License-Identifier: BSD-3-Clause
#
#   stop_pids [--timeout=SECS] [--alive=FUNC] [--quiet] PID...
#
# Sends SIGTERM to every PID at once (nbdkit and qemu-nbd flush on the
# way out), then waits until all have exited, at most SECS seconds in all
# (default 10, whole seconds).  Any still running then gets SIGKILL (and
# up to 2 more seconds to go), and a line on stderr says so unless --quiet.  Returns 0 if every PID exited on SIGTERM
# or was already gone, 1 if one had to be killed.
#
# FUNC PID (default: kill -0 PID) says whether PID is still the server
# that was started: give one where the pid may have been reused by then.
# Empty PID arguments are ignored.
#
# Deliberate crashes (kill -9 to test durability) do not use this.

stop_pids ()
{
  local timeout=10 alive=_stop_pids_alive quiet= pid i rc=0
  local -a pids=() left=()
  while [ $# -gt 0 ]; do
    case $1 in
      --timeout=*) timeout=${1#--timeout=} ;;
      --alive=*) alive=${1#--alive=} ;;
      --quiet) quiet=1 ;;
      --) shift; break ;;
      *) break ;;
    esac
    shift
  done
  for pid in "$@"; do
    [ -n "$pid" ] || continue
    "$alive" "$pid" && kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
  done
  # Poll every 50 ms, so a server that exits at once costs no more.
  for ((i = 0; i < timeout * 20; i++)); do
    left=()
    for pid in "${pids[@]}"; do
      "$alive" "$pid" && left+=("$pid")
    done
    [ ${#left[@]} -gt 0 ] || return 0
    pids=("${left[@]}")
    sleep 0.05
  done
  left=()
  for pid in "${pids[@]}"; do
    "$alive" "$pid" || continue
    kill -KILL "$pid" 2>/dev/null || continue
    left+=("$pid")
    rc=1
    [ -n "$quiet" ] ||
      echo "stop_pids: pid $pid still running ${timeout}s after SIGTERM: sent SIGKILL" >&2
  done
  for pid in "${left[@]}"; do
    for ((i = 0; i < 40; i++)); do
      "$alive" "$pid" || break
      sleep 0.05
    done
  done
  return $rc
}

_stop_pids_alive ()
{
  kill -0 "$1" 2>/dev/null
}
