# Helpers shared by the qcow2 tests, sourced after functions.sh.
# SPDX-License-Identifier: BSD-3-Clause

# nbdkit takes a second or two to exit.  stop_async stops a server
# without waiting; the exit trap then waits for all of them at once.
_q2_stopping=()
stop_async ()
{
  local pid
  pid=$(cat "$T/$1.pid" 2>/dev/null) || return 0
  rm -f "$T/$1.pid"
  kill "$pid" 2>/dev/null && _q2_stopping+=("$pid")
  return 0
}
_q2_wait_stopped ()
{
  stop_pids --alive=_our_server "${_q2_stopping[@]}" || :
}
on_exit _q2_wait_stopped

# Patch fields of a qcow2 image (see test-qcow2-patch.py).
patch () { /usr/bin/python3 "$srcdir/test-qcow2-patch.py" "$@"; }

# check_map IMG URI: our extents agree with `qemu-img map` of IMG.
check_map ()
{
  "$QEMU_IMG" map --output=json -f qcow2 "$1" >"$T/map.json"
  /usr/bin/python3 "$srcdir/test-qcow2-map.py" "$T/map.json" "$2" \
    >"$T/map.out" 2>&1 ||
    fail "$1: extents differ from qemu-img map: $(cat "$T/map.out")"
}

# start_refused NAME ARGS...: start nbdkit where it must fail at
# start-up; its stderr is the command's.  The timeout is a guard: under
# the ASan preload, nbdkit was once seen deadlocked in exit handlers
# (libp11-kit's destructor waiting on glibc's locale lock) after
# printing its error.
start_refused ()
{
  local name=$1
  shift
  timeout -k 5 60 "$NBDKIT" --log=stderr -U "$(sock $name)" \
    -P "$T/$name.pid" "$@"
}

# refused IMG 'MESSAGE' [PARAMS...]: the image plugin, given file=$T/IMG
# and PARAMS, must not start and must say exactly "error: $T/IMG: MESSAGE"
# (MESSAGE is an extended regular expression).
_q2_refused=0
refused ()
{
  local img=$1 msg=$2
  shift 2
  _q2_refused=$((_q2_refused + 1))
  expect_error "error: $T/$img: $msg\$" \
    start_refused refused$_q2_refused "$IMAGE_PLUGIN" file="$T/$img" "$@"
  echo "ok: $img${*:+ $*} refused: $msg"
}

# crash_images NAME SEED: power failures during writes, zeroes and
# discards on NAME.qcow2 (in $T).  A recording hostio logs every write
# and flush, and 300 images a crash could have left (everything a
# completed flush made durable, any subset of later writes, torn at
# sectors) are built at random points of the log (test_crash in
# test-qcow2-write-unit.c checks that each opens and keeps all flushed
# data).  qemu-img check must accept every one: leaks are allowed
# (exit 3), errors never.
crash_images ()
{
  local name=$1 seed=$2 f n=0
  mkdir "$T/$name.d"
  "$abs_builddir/test-qcow2-write-unit" crash "$T/$name.qcow2" "$T/$name.d" \
    "$seed" 300 300
  for f in "$T/$name.d"/crash-*.qcow2; do
    check_leaks_only "$f" "crash image"
    n=$((n + 1))
  done
  [ $n -eq 300 ] || fail "$name: $n crash images, expected 300"
  rm -rf "$T/$name.d"
}
