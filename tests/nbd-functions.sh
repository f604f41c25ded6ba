# Helpers for the nbdstack-nbd tests (tests/test-nbd-*.sh), sourced
# after functions.sh.  Each test runs the same command lines through the
# real qemu-nbd and through nbdstack-nbd and compares what clients see.
# SPDX-License-Identifier: BSD-3-Clause

NBDSTACK_NBD="$abs_top_builddir/nbd/nbdstack-nbd"
[ -x "$NBDSTACK_NBD" ] || fail "$NBDSTACK_NBD is not built"
[ "$QEMU_NBD" != no ] || fail "qemu-nbd is not installed (scripts/setup.sh installs it)"

# The plugin and filters from this build tree; nobody's own settings.
NBDSTACK_BUILDDIR="$abs_top_builddir"
NBDSTACK_CONFIG=/dev/null
unset NBDSTACK_OPTIONS NBDSTACK_NBDKIT NBDSTACK_NBD_DRY_RUN
export NBDSTACK_BUILDDIR NBDSTACK_CONFIG

# The program behind a kind of server: qemu (the reference) or ours.
server_prog ()
{
  case $1 in
    qemu) echo "$QEMU_NBD" ;;
    ours) echo "$NBDSTACK_NBD" ;;
    *) fail "server_prog: unknown kind $1" ;;
  esac
}

# A free TCP port on 127.0.0.1 (the kernel's choice; the tiny window
# before the server binds it again is acceptable here).
free_port ()
{
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

declare -A _fg_pid=()

# start_fg KIND NAME ARGS...: run the server in the foreground of a
# background job, as imageio and vdsm do (no --fork), with
# --pid-file=$T/NAME.pid and stderr in $T/NAME.log; return once the pid
# file is written, which both servers do once they listen.
start_fg ()
{
  local kind=$1 name=$2 prog i
  shift 2
  prog=$(server_prog "$kind")
  rm -f "$T/$name.pid"
  "$prog" --pid-file="$T/$name.pid" "$@" 2>>"$T/$name.log" &
  _fg_pid[$name]=$!
  for ((i = 0; i < 200; i++)); do
    [ -s "$T/$name.pid" ] && return 0
    kill -0 "${_fg_pid[$name]}" 2>/dev/null ||
      { cat "$T/$name.log" >&2; fail "$kind server $name exited at start-up"; }
    sleep 0.05
  done
  fail "$kind server $name did not start (see $T/$name.log)"
}

# The pid a pipeline holds: the process it started.
fg_pid () { echo "${_fg_pid[$1]}"; }

# nbdkit_child NAME: nbdkit, the child of the nbdstack-nbd whose pid file
# is $T/NAME.pid (from /proc: a minimal Debian has no pgrep); status 1
# if there is none.
nbdkit_child ()
{
  cat /proc/"$(cat "$T/$1.pid")"/task/*/children 2>/dev/null | tr ' ' '\n' | grep . | head -1 | grep .
}

# running_env LOG VAR: what nbdstack-nbd (run with nbdkit-debug=on) set
# VAR to in nbdkit's environment, from the command line it printed into
# LOG ("" if it set nothing); status 1 if LOG has no command line.  (Not
# from /proc/PID/environ: glibc cuts GLIBC_TUNABLES up in place.)
running_env ()
{
  local line w
  line=$(sed -n 's/^nbdstack-nbd: running: //p' "$1" | head -1)
  [ -n "$line" ] || return 1
  for w in $line; do
    case $w in
      [A-Z_]*=*) [ "${w%%=*}" != "$2" ] || { echo "${w#*=}"; return 0; } ;;
      *) return 0 ;;
    esac
  done
}

# refuses_onoff SETTING ARGS...: nbdstack-nbd -t -k $T/bad.sock ARGS
# with NBDSTACK_OPTIONS=SETTING (an on|off setting given another value)
# exits 1 with one line that names it, and serves nothing.
refuses_onoff ()
{
  local setting=$1 rc=0
  shift
  rm -f "$T/bad.sock"
  NBDSTACK_OPTIONS=$setting "$NBDSTACK_NBD" -t -k "$T/bad.sock" "$@" \
    2>"$T/bad.err" || rc=$?
  cat "$T/bad.err"
  [ "$rc" = 1 ] || fail "$setting: exit status $rc"
  [ "$(wc -l <"$T/bad.err")" = 1 ] || fail "$setting: not one line"
  grep -qF "$setting: expected on or off" "$T/bad.err" ||
    fail "$setting: message does not name the setting"
  [ ! -e "$T/bad.sock" ] || fail "$setting: a socket was created"
}

# wait_exit NAME [SECONDS]: wait for the job to exit by itself and set
# $exit_status to its exit status, or to "running" if it is still there
# after SECONDS.  (Not a command substitution: only this shell can wait
# for its jobs.)
wait_exit ()
{
  local name=$1 secs=${2:-10} pid i
  pid=${_fg_pid[$name]}
  for ((i = 0; i < secs * 20; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  if kill -0 "$pid" 2>/dev/null; then
    exit_status=running
    return 0
  fi
  exit_status=0
  wait "$pid" || exit_status=$?
  rm -f "$T/$name.pid"
}

# stop_fg NAME: SIGTERM to the process the pipeline started (what
# imageio's Popen.terminate() does); sets $exit_status, to "running" if
# it was still there 20 s later (it is then killed: stop_pids).
stop_fg ()
{
  local pid=${_fg_pid[$1]}
  if stop_pids --timeout=20 "$pid"; then
    exit_status=0
    wait "$pid" || exit_status=$?
    rm -f "$T/$1.pid"
  else
    exit_status=running
    wait "$pid" 2>/dev/null || :
  fi
}

# The part of nbdinfo's view that must be equal, one "key=value" a line.
# FIELDS is a space-separated list of nbdinfo --json keys.
export_view ()
{
  local uri=$1 fields=$2
  nbdinfo --json "$uri" | python3 -c '
import json, sys
e = json.load(sys.stdin)["exports"][0]
for k in sys.argv[1].split():
    print("%s=%s" % (k, e.get(k)))' "$fields"
}

# Fields that matter to a writer and to a reader.
WRITE_FIELDS="export-size is_read_only can_zero can_trim can_fua can_flush can_fast_zero can_multi_conn block_size_minimum block_size_preferred block_size_maximum"
READ_FIELDS="export-size is_read_only can_zero can_trim can_multi_conn block_size_minimum block_size_preferred block_size_maximum"

# Run CMD... with a timeout; prints its exit status (124: still running,
# that is: it started a server instead of failing).
status_of ()
{
  local rc=0
  timeout -k 2 5 "$@" >/dev/null 2>&1 </dev/null || rc=$?
  echo $rc
}
