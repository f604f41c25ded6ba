#!/usr/bin/env bash
# image plugin, qcow2 writable: kill -9 under load never corrupts the
# image and never loses a byte that a flush or a FUA request promised.
# tests/stress drives four connections (16 requests in flight each:
# writes, FUA writes, zeroes, trims, flushes, reads) on interleaved
# stripes that share clusters, and SIGKILLs nbdkit at a random moment.
# Before each run the qcow2 image is rebuilt from stress' fresh contents
# (--before); after each kill `qemu-img check` must exit 0 or 3 (leaked
# clusters only, never corruption) and the guest contents, converted
# back to raw (--after), must hold every flushed byte (stress.c).
#
# KILLS=N sets the kills per configuration (default 20, three
# configurations: 60 in all).
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require qemu-img
KILLS=${KILLS:-20}
total=0
cd "$T"

# The --after hook: check, then guest contents back into $IMAGE.
cat >after.sh <<EOF
#!/bin/sh
q=\$1
"$QEMU_IMG" check -f qcow2 "\$q" >"\$q.check" 2>&1
rc=\$?
case \$rc in
  0) echo clean >>"\$q.results" ;;
  3) echo leaks >>"\$q.results" ;;
  *) echo "qemu-img check exited \$rc:" >&2; cat "\$q.check" >&2; exit 1 ;;
esac
exec "$QEMU_IMG" convert -f qcow2 -O raw "\$q" "\$IMAGE"
EOF
chmod +x after.sh

# kill_case NAME BEFORE-CMD [STRESS-ARGS...] -- PLUGIN-PARAMS...
kill_case ()
{
  local name=$1 before=$2 out=$T/$1.out
  shift 2
  local sargs=()
  while [ "$1" != -- ]; do sargs+=("$1"); shift; done
  shift
  echo "== $name: $*"
  "$abs_top_builddir/tests/stress" --end=kill --kills="$KILLS" --image="$T/$name.raw" \
    --socket="$T/$name.sock" --log="$T/$name.log" --secs=0.8 \
    --before="$before" --after="$T/after.sh $T/$name.qcow2" "${sargs[@]}" \
    -- "$IMAGE_PLUGIN" file="$T/$name.qcow2" "$@" >"$out" 2>&1
  local r=$?
  cat "$out"
  [ $r -eq 0 ] || fail "$name: flushed data lost or the image damaged (seed in $out)"
  grep -q "^stress: $KILLS kill(s): [1-9][0-9]* required requests" "$out" ||
    fail "$name: the run checked nothing"
  [ "$(wc -l <"$name.qcow2.results")" -eq "$KILLS" ] ||
    fail "$name: not every kill was checked"
  echo "$name: qemu-img check after $KILLS kills: $(sort "$name.qcow2.results" | uniq -c | xargs)"
  total=$((total + KILLS))
}

# qemu-made (compact), 64K clusters.
kill_case qemu64k "$QEMU_IMG convert -q -f raw -O qcow2 \$IMAGE $T/qemu64k.qcow2" \
  -- format=qcow2
# qemu-made, 512-byte clusters and 64-bit refcounts: many L2 tables and
# refcount blocks, some new in every run; cache=none.
kill_case small "$QEMU_IMG convert -q -f raw -O qcow2 -o cluster_size=512,refcount_bits=64 \$IMAGE $T/small.qcow2" \
  -- cache=none
# Ours (linear layout, create=true), filled by qemu-img convert -n.
nbdkit -U - "$IMAGE_PLUGIN" file="$T/linear.empty" format=qcow2 create=true \
  size=4M cluster-size=4k --run true
kill_case linear "cp $T/linear.empty $T/linear.qcow2 && $QEMU_IMG convert -q -n -f raw -O qcow2 \$IMAGE $T/linear.qcow2" \
  -- l2-cache-size=2k

# Control: writes only, no flush and no FUA, into an empty overlay over
# a copy of the fresh contents: new clusters' L2 entries are still in
# the server's cache at the kill, so requiring every acknowledged write
# must report losses (the check can fail, and a kill really loses what
# was not flushed).
"$abs_top_builddir/tests/stress" --end=kill --kills=1 --control \
  --ops=40,0,0,0,0,10 --secs=0.5 --image="$T/control.raw" \
  --socket="$T/control.sock" --log="$T/control.log" \
  --before="cp \$IMAGE $T/control-base.raw && $QEMU_IMG create -q -f qcow2 -b control-base.raw -F raw $T/control.qcow2" \
  --after="$T/after.sh $T/control.qcow2" \
  -- "$IMAGE_PLUGIN" file="$T/control.qcow2" backing=follow ||
  fail "control: the durability check cannot see lost writes"

echo "qcow2 kill: $total kills, the image always checked clean or with leaks only, nothing flushed was lost"
