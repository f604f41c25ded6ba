#!/usr/bin/env bash
# nbdstack-nbd against the real qemu-nbd: the same command lines
# (imageio's and vdsm's upload options, tools' --discard/--detect-zeroes
# lines, raw and qcow2, unix and TCP, offset and size, read-only,
# export names, snapshots, every cache mode) served by both, each from
# its own copy of one image.  For each: nbdinfo's view must be the same,
# the same seeded request stream (and randops over several connections
# where the server takes them) must succeed on both, the resulting
# images must be identical (qemu-img compare), both must stop with the
# same exit status (SIGTERM, or on their own after the last client when
# not --persistent), and both must remove their unix socket.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
. "$srcdir/nbd-functions.sh"
require nbdinfo
require nbdcopy
require_filter_version

size=$((32 * 1024 * 1024))
base=$T/base.img
truncate -s $size "$base"
w () { dd if=/dev/urandom of="$base" bs=512 seek="$1" count="$2" conv=notrunc status=none; }
w 0 64; w 2047 3; w 9000 4000; w 40000 5000; w $((size / 512 - 8)) 8
qbase=$T/base.qcow2
"$QEMU_IMG" convert -q -f raw -O qcow2 "$base" "$qbase"
# A snapshot of the original contents, then different current data.
"$QEMU_IMG" snapshot -c snap1 "$qbase"
"$QEMU_IO" -f qcow2 -c 'write -P 0x5a 1M 3M' "$qbase" >/dev/null
# An overlay on a backing file named relative to it, as qemu-img makes
# them: without "backing": null both servers follow the chain.
"$QEMU_IMG" convert -q -f raw -O qcow2 "$base" "$T/backing.qcow2"
"$QEMU_IMG" create -q -f qcow2 -b backing.qcow2 -F qcow2 "$T/overlay.qcow2"
"$QEMU_IO" -f qcow2 -c 'write -P 0xa5 8M 1M' "$T/overlay.qcow2" >/dev/null

seed=0
ours_options=
# run_case NAME URI-TEMPLATE PERSISTENT CONNS IMAGE-KIND ARGS...
# ($ours_options, if set, is nbdstack-nbd's NBDSTACK_OPTIONS.)
# Templates: @SOCK@, @PORT@ and @IMG@ are this server's socket, port
# and image copy.  URI-TEMPLATE "" means the export is read-only and
# only compared.  CONNS > 1 also runs randops with CONNS - 1 workers.
run_case ()
{
  local name=$1 uri_t=$2 persistent=$3 conns=$4 kind=$5
  shift 5
  local k sock port img uri arg fields rc
  local -A uris=() rcs=() imgs=()
  seed=$((seed + 1))
  for k in qemu ours; do
    sock=$T/$name-$k.sock
    port=$(free_port)
    img=$T/$name-$k.img
    case $kind in
      raw) cp "$base" "$img" ;;
      qcow2) cp "$qbase" "$img" ;;
      overlay) cp "$T/overlay.qcow2" "$img" ;;
    esac
    imgs[$k]=$img
    local args=()
    for arg in "$@"; do
      arg=${arg//@SOCK@/$sock}
      arg=${arg//@PORT@/$port}
      args+=("${arg//@IMG@/$img}")
    done
    uri=${uri_t//@SOCK@/$sock}
    uris[$k]=${uri//@PORT@/$port}
    if [ $k = ours ] && [ -n "$ours_options" ]; then
      NBDSTACK_OPTIONS=$ours_options
      export NBDSTACK_OPTIONS
    fi
    start_fg "$k" "$name-$k" "${args[@]}"
    unset NBDSTACK_OPTIONS
  done

  # What a client sees at connection time.
  fields=$WRITE_FIELDS
  [ "$persistent" = ro ] && fields=$READ_FIELDS
  # (Not without --persistent: a look would end the server.)
  if [ "$persistent" = no ]; then
    fields=
  else
    export_view "${uris[qemu]}" "$fields" >"$T/$name-qemu.view"
    export_view "${uris[ours]}" "$fields" >"$T/$name-ours.view"
    diff -u "$T/$name-qemu.view" "$T/$name-ours.view" ||
      fail "$name: nbdinfo's view differs (- qemu-nbd, + nbdstack-nbd)"
  fi

  for k in qemu ours; do
    if [ "$persistent" = ro ]; then
      # Read-only: the export must be the expected content.
      nbdcopy "${uris[$k]}" "$T/$name-$k.read" ||
        fail "$name: $k: reading the export failed"
    else
      python3 "$srcdir/nbd-opstream.py" "${uris[$k]}" $seed 400 >"$T/$name-$k.ops" ||
        fail "$name: $k: the request stream failed"
    fi
  done
  if [ "$persistent" = ro ]; then
    cmp "$T/$name-qemu.read" "$T/$name-ours.read" ||
      fail "$name: the two exports read differently"
  else
    diff "$T/$name-qemu.ops" "$T/$name-ours.ops" >/dev/null ||
      fail "$name: the request streams differed: $(cat "$T/$name-qemu.ops" "$T/$name-ours.ops")"
    # The stream ended with a flush, so the files hold its result now.
    if [ "$kind" = raw ]; then
      "$QEMU_IMG" compare -q -f raw -F raw "${imgs[qemu]}" "${imgs[ours]}" ||
        fail "$name: the images differ after the same requests"
    fi
  fi
  # Several connections at once, where the server takes them.  Each
  # server is checked against randops' own model; servers may differ in
  # what they make of FAST_ZERO, so the images are not compared after
  # this.  No trims here: where a trim is not aligned to what the plugin
  # can punch (4K with cache=none), the coalesce filter (coalesce=on)
  # may show data older than the last write in its unpunched edges (NBD
  # leaves trimmed bytes undefined, randops expects old or zero; see the
  # coalesce man page).  The request stream above trims, aligned.
  if [ "$conns" -gt 1 ]; then
    for k in qemu ours; do
      "$RANDOPS" --no-trim -c $((conns - 1)) -n 300 -s $seed "${uris[$k]}" >/dev/null ||
        fail "$name: $k: randops failed"
    done
  fi

  # Stopping: not persistent, both go once the last client has left;
  # else SIGTERM, as imageio's Popen.terminate() sends.
  for k in qemu ours; do
    if [ "$persistent" = no ]; then
      wait_exit "$name-$k" 10
    else
      stop_fg "$name-$k"
    fi
    rcs[$k]=$exit_status
  done
  [ "${rcs[qemu]}" = "${rcs[ours]}" ] ||
    fail "$name: exit status: qemu-nbd ${rcs[qemu]}, nbdstack-nbd ${rcs[ours]}"
  [ "${rcs[qemu]}" = 0 ] || fail "$name: exit status ${rcs[qemu]}"
  for k in qemu ours; do
    [ ! -e "$T/$name-$k.sock" ] || fail "$name: $k left its socket behind"
  done

  echo "$name: same ${fields:+view and }data, exit status ${rcs[qemu]}"
}

unix_uri='nbd+unix:///?socket=@SOCK@'
tcp_uri='nbd://127.0.0.1:@PORT@/'
raw_json='json:{"driver": "raw", "file": {"driver": "file", "filename": "@IMG@"}}'
imageio=(--export-name= --persistent --shared=8 --cache=none --aio=native
         --discard=unmap --detect-zeroes=unmap --allocation-depth)

# oVirt imageio's upload server, raw, on a unix socket and over TCP.
run_case imageio-unix "$unix_uri" yes 5 raw "${imageio[@]}" --socket=@SOCK@ "$raw_json"
run_case imageio-tcp "$tcp_uri" yes 5 raw "${imageio[@]}" --bind=127.0.0.1 --port=@PORT@ "$raw_json"
# The same with our write-back buffer, and with it in write-through mode.
ours_options=coalesce=on
run_case imageio-coalesce "$unix_uri" yes 5 raw "${imageio[@]}" --socket=@SOCK@ "$raw_json"
run_case writethrough-coalesce "$unix_uri" yes 5 raw --export-name= --persistent --shared=8 \
  --cache=writethrough --discard=unmap --detect-zeroes=unmap --socket=@SOCK@ "$raw_json"
ours_options=
# imageio exposing a range of a raw image (its offset= and size=).
run_case imageio-range "$unix_uri" yes 5 raw "${imageio[@]}" --socket=@SOCK@ \
  'json:{"driver": "raw", "offset": 1048576, "size": 16777216, "file": {"driver": "file", "filename": "@IMG@"}}'
# imageio's download server: read-only, raw and qcow2 without backing.
run_case imageio-ro "$unix_uri" ro 1 raw "${imageio[@]}" --read-only --socket=@SOCK@ "$raw_json"
run_case imageio-qcow2-ro "$unix_uri" ro 1 qcow2 "${imageio[@]}" --read-only --socket=@SOCK@ \
  'json:{"driver": "qcow2", "file": {"driver": "file", "filename": "@IMG@"}, "backing": null}'
# vdsm's transient NBD service (--opt value spelling).
run_case vdsm "$unix_uri" yes 5 raw --socket @SOCK@ --persistent --shared=8 --export-name= \
  --cache=none --aio=native --discard=unmap "$raw_json"
# What many tools run: one client, the server ends when it leaves.
run_case tools "$unix_uri" no 1 raw --discard=unmap --detect-zeroes=unmap -f raw -k @SOCK@ @IMG@
# An export name and description, over TCP, write-through.
run_case named 'nbd://127.0.0.1:@PORT@/exp1' yes 2 raw -x exp1 -D 'a test disk' -t -e 2 \
  -b 127.0.0.1 -p @PORT@ -f raw --cache=writethrough @IMG@
# -o, directsync, and --image-opts with a range; unsafe with zero detection.
run_case offset "$unix_uri" yes 1 raw -t -k @SOCK@ -f raw -o 1048576 --cache=directsync @IMG@
run_case image-opts "$unix_uri" yes 1 raw -t -k @SOCK@ --cache=writeback \
  --image-opts 'driver=raw,offset=4096,file.driver=file,file.filename=@IMG@'
run_case unsafe "$unix_uri" yes 1 raw -t -k @SOCK@ -f raw --cache=unsafe --discard=on --detect-zeroes=on @IMG@
# A qcow2 overlay and its backing file, read-only, format probed.
run_case chain "$unix_uri" ro 1 overlay -t -k @SOCK@ -r @IMG@
cmp -s "$T/chain-ours.read" "$base" && fail "chain: the overlay's own data is missing"
# An internal snapshot of a qcow2 image, read-only.
run_case snapshot "$unix_uri" ro 1 qcow2 -t -k @SOCK@ -l snap1 @IMG@
cmp "$T/snapshot-ours.read" "$base" || fail "snapshot: -l snap1 is not the snapshot's data"
cmp -s "$T/imageio-qcow2-ro-ours.read" "$base" && fail "imageio-qcow2-ro: read the snapshot, not the current data"

# Export names: the wrong one is refused by both, both list the right
# one with its description.
for k in qemu ours; do
  port=$(free_port)
  start_fg $k names-$k -t -e 4 -b 127.0.0.1 -p "$port" -x exp1 -D 'a test disk' -f raw -r "$base"
  nbdinfo --size "nbd://127.0.0.1:$port/exp1" >/dev/null || fail "names: $k: exp1 refused"
  ! nbdinfo --size "nbd://127.0.0.1:$port/other" >/dev/null 2>&1 || fail "names: $k: served 'other'"
  ! nbdinfo --size "nbd://127.0.0.1:$port/" >/dev/null 2>&1 || fail "names: $k: served ''"
  nbdinfo --list --json "nbd://127.0.0.1:$port" | python3 -c '
import json, sys
e = json.load(sys.stdin)["exports"]
assert [x["export-name"] for x in e] == ["exp1"], e
assert e[0].get("description") == "a test disk", e' || fail "names: $k: wrong export list"
  stop_fg names-$k
  [ "$exit_status" = 0 ] || fail "names: $k: exit status $exit_status"
done
echo "export names: same"
