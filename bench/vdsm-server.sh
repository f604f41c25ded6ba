# nbdstack: an NBD server started the way vdsm starts one for imageio,
# and what its process tree used, for bench/imageio-rw.sh and
# bench/many.sh (source it after common/stop-server.sh; it only
# defines).  Needs $build (this tree's build) and, for the server
# nbdstack-nbd-base, $BASE_BUILD.
# SPDX-License-Identifier: BSD-3-Clause

# vdsm_start SERVER FORMAT TARGET SOCKET PIDFILE LOG: start SERVER on the
# FORMAT (raw, qcow2) image TARGET with vdsm's options, serving SOCKET,
# its pid in PIDFILE and its stderr appended to LOG.  SERVER is qemu-nbd,
# nbdstack-nbd (of $build), nbdstack-nbd-base (of $BASE_BUILD), or
# LABEL=DIR[,OPTIONS]: nbdstack-nbd of build DIR with
# NBDSTACK_OPTIONS=OPTIONS (several separated by commas:
# before=./build,threads=4,align-buffers=off); or, run as nbdkit directly with vdsm's
# cache=none, image (our plugin alone) and stack (coalesce, zerodetect
# and discard over it).  Returns 1 if it did not start.
vdsm_start ()
{
  local server=$1 fmt=$2 t=$3 sock=$4 pidf=$5 log=$6 prog bdir opts=
  local -a f=()
  case $server in
    image | stack)
      [ "$server" = image ] || for prog in coalesce zerodetect discard; do
        f+=("--filter=$build/filters/$prog/.libs/nbdkit-$prog-filter.so")
      done
      rm -f "$sock" "$pidf"
      nbdkit --log=stderr -U "$sock" -P "$pidf" "${f[@]}" \
        "$build/plugins/image/.libs/nbdkit-image-plugin.so" file="$t" \
        format="$fmt" cache=none 2>>"$log" || return 1
      # nbdkit's parent returns before its child writes the pid file.
      for _ in $(seq 200); do
        [ -s "$pidf" ] && [ -S "$sock" ] && return 0
        sleep 0.05
      done
      return 1 ;;
    qemu-nbd) prog=qemu-nbd bdir=$build ;;
    nbdstack-nbd) prog=$build/nbd/nbdstack-nbd bdir=$build ;;
    nbdstack-nbd-base) prog=$BASE_BUILD/nbd/nbdstack-nbd bdir=$BASE_BUILD ;;
    *=*,*) bdir=${server#*=} opts=${bdir#*,} bdir=${bdir%%,*} opts=${opts//,/ }
      prog=$bdir/nbd/nbdstack-nbd ;;
    *=*) bdir=${server#*=} prog=${server#*=}/nbd/nbdstack-nbd ;;
    *) echo "unknown server $server" >>"$log"; return 1 ;;
  esac
  rm -f "$sock" "$pidf"
  NBDSTACK_OPTIONS=${opts:-${NBDSTACK_OPTIONS:-}} \
    NBDSTACK_BUILDDIR=$bdir "$prog" --fork --pid-file="$pidf" \
    --socket="$sock" --export-name= --persistent --shared=8 \
    --cache=none --aio=native --discard=unmap --detect-zeroes=unmap \
    --allocation-depth \
    "json:{\"driver\": \"$fmt\", \"file\": {\"driver\": \"file\", \"filename\": \"$t\"}}" \
    2>>"$log"
}

# server_tree_pids PID: PID, its children (the pid file of nbdstack-nbd
# names its supervisor, whose child is nbdkit) and its parent if that is
# an nbdstack-nbd supervisor, one a line.
server_tree_pids ()
{
  local pid=$1 ppid
  ppid=$(awk '{ sub(/^.*\) /, ""); print $2 }' "/proc/$pid/stat")
  echo "$pid"
  cat /proc/"$pid"/task/*/children 2>/dev/null | tr ' ' '\n' | grep . || :
  [ "$(cat "/proc/$ppid/comm" 2>/dev/null)" != nbdstack-nbd ] || echo "$ppid"
}

# server_tree_stats PID: "RSS_KIB CPU_TICKS", the peak RSS (VmHWM) and
# user + system CPU of server_tree_pids PID, summed.
server_tree_stats ()
{
  server_tree_pids "$1" | while read -r p; do
    awk '/^VmHWM:/ { print "rss", $2 }' "/proc/$p/status"
    awk '{ sub(/^.*\) /, ""); print "cpu", $12 + $13 }' "/proc/$p/stat"
  done | awk '{ s[$1] += $2 } END { print s["rss"] + 0, s["cpu"] + 0 }'
}
