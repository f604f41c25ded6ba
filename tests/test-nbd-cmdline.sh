#!/usr/bin/env bash
# nbdstack-nbd: the command line.  Bad command lines make both the real
# qemu-nbd and nbdstack-nbd exit 1; options we cannot honour fail with
# one line naming the option; good ones, in every spelling getopt_long
# allows, become the nbdkit command line they should (NBDSTACK_NBD_DRY_RUN
# prints it instead of running it).
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
. "$srcdir/nbd-functions.sh"

img=$T/disk.img
truncate -s 64M "$img"
qimg=$T/disk.qcow2
"$QEMU_IMG" create -q -f qcow2 "$qimg" 64M
sock=$T/s.sock

# ---- bad command lines: qemu-nbd and we both exit 1
long=$(head -c 4097 /dev/zero | tr '\0' x)
n=0
while IFS= read -r line; do
  [ -n "$line" ] || continue
  eval "args=($line)"
  n=$((n + 1))
  q=$(status_of "$QEMU_NBD" "${args[@]}")
  o=$(status_of "$NBDSTACK_NBD" "${args[@]}")
  [ "$q" = 1 ] || fail "qemu-nbd exited $q (expected 1): $line"
  [ "$o" = 1 ] || fail "nbdstack-nbd exited $o, qemu-nbd 1: $line"
done <<EOF
-k "$sock"
--bogus "$img"
-k "$sock" "$img" "$img"
-p
-k "$sock" -e x "$img"
-k "$sock" -e -1 "$img"
-k relative.sock "$img"
-k "$sock" --cache=bogus "$img"
-k "$sock" -n --cache=none "$img"
-k "$sock" --aio=bogus "$img"
-k "$sock" --aio=threads --aio=threads "$img"
-k "$sock" -f raw --aio=native "$img"
-k "$sock" --discard=bogus "$img"
-k "$sock" --discard=unmap --discard=unmap "$img"
-k "$sock" --detect-zeroes=bogus "$img"
-k "$sock" --detect-zeroes=unmap "$img"
-k "$sock" --detect-zeroes=unmap --discard=unmap "$img"
-k "$sock" -o x "$img"
-k "$sock" -f raw -o 67108865 "$img"
-k "$sock" -f nosuchformat "$img"
-k "$sock" -f raw "$T/missing.img"
-k "$sock" -f qcow2 "$img"
-k "$sock" -x "$long" "$img"
-k "$sock" -D "$long" "$img"
-k "$sock" --image-opts -f raw "driver=raw,file.filename=$img"
-k "$sock" --image-opts "$img"
-k "$sock" nosuchprotocol:foo
-k "$sock" 'json:{"driver": "raw", "file": {"driver": "file", "filename": "$img"}'
-k "$sock" 'json:{"driver": "raw", "file": "$img"}'
-k "$sock" 'json:{"filename": "$img"}'
-k "$sock" 'json:{"driver": "raw", "file": {"driver": "file", "filename": "$img"}, "bogus": 1}'
-k "$sock" 'json:{"driver": "raw", "file": {"driver": "file", "filename": "$img"}, "size": 1000}'
-k "$sock" 'json:{"driver": "raw", "file": {"driver": "file", "filename": "$img"}, "offset": 67108865}'
-k "$sock" 'json:{"driver": "raw", "file": {"driver": "file", "filename": "$img"}, "offset": 4096, "size": 67108864}'
-k "$sock" 'json:{"driver": "raw", "file": {"driver": "host_device", "filename": "$img"}}'
-k "$sock" 'json:{"driver": "raw", "file": {"driver": "file", "filename": "$T"}}'
-k "$sock" 'json:{"driver": "nosuchdriver", "file": {"driver": "file", "filename": "$img"}}'
--selinux-label=x "$img"
-k "$sock" -f raw -l snap "$img"
EOF
echo "bad command lines: $n, all exit 1 with both"

# LISTEN_FDS (socket activation) with an address: both refuse.
for prog in "$QEMU_NBD" "$NBDSTACK_NBD"; do
  rc=0
  python3 - "$prog" "$sock" "$img" <<'PY' || rc=$?
import os, socket, subprocess, sys
prog, sock, img = sys.argv[1:]
s = socket.socket(socket.AF_UNIX)
s.bind(sock + ".act")
s.listen()
os.dup2(s.fileno(), 3)
os.set_inheritable(3, True)
env = dict(os.environ, LISTEN_FDS="1", LISTEN_PID=str(os.getpid()))
os.execve(prog, [prog, "-k", sock, "-f", "raw", img], env)
PY
  [ $rc = 1 ] || fail "$prog with LISTEN_FDS and -k exited $rc, expected 1"
  rm -f "$sock.act"
done

# ---- options we cannot honour: exit 1, one line, naming the option
while IFS='|' read -r name line; do
  [ -n "$name" ] || continue
  eval "args=($line)"
  rc=0
  out=$("$NBDSTACK_NBD" "${args[@]}" 2>&1 </dev/null) || rc=$?
  [ $rc = 1 ] || fail "$line: exit status $rc, expected 1"
  [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] || fail "$line: more than one line: $out"
  printf '%s\n' "$out" | grep -qF -- "$name" || fail "$line: '$out' does not name $name"
done <<EOF
-s/--snapshot|-k "$sock" -s "$img"
-s/--snapshot|-k "$sock" --snapshot "$img"
-B/--bitmap|-k "$sock" -B bm "$img"
-B/--bitmap|-k "$sock" --bitmap=bm "$img"
-T/--trace|-k "$sock" -T 'nbd_*' "$img"
--object|-k "$sock" --object secret,id=s0,data=x "$img"
--tls-creds|-b 127.0.0.1 --tls-creds tls0 "$img"
--tls-authz|-b 127.0.0.1 --tls-authz a0 "$img"
--tls-hostname|-b 127.0.0.1 --tls-hostname h "$img"
-c/--connect|-c /dev/nbd-nbdstack-missing "$img"
-d/--disconnect|-d /dev/nbd-nbdstack-missing
driver 'vmdk' is not supported|-k "$sock" -f vmdk "$img"
over a raw node|-k "$sock" -r 'json:{"driver": "qcow2", "file": {"driver": "raw", "offset": 0, "file": {"driver": "qcow2", "file": {"driver": "file", "filename": "$qimg"}}}}'
over a raw node|-k "$sock" -r 'json:{"file": {"driver": "raw", "offset": 0, "file": {"driver": "file", "filename": "$qimg"}}}'
option 'file.locking' is not supported|-k "$sock" 'json:{"driver": "raw", "file": {"driver": "file", "filename": "$img", "locking": "off"}}'
EOF

# ---- good command lines: what nbdkit is asked to do
dry () { NBDSTACK_NBD_DRY_RUN=1 "$NBDSTACK_NBD" "$@" 2>"$T/dry.err"; }
has () { grep -qE -- "(^| )$2( |\$)" <<<"$1" || fail "'$2' missing from: $1"; }
hasnt () { ! grep -qE -- "(^| )$2( |\$)" <<<"$1" || fail "'$2' should not be in: $1"; }
plugin="$abs_top_builddir/plugins/image/.libs/nbdkit-image-plugin.so"

# imageio's upload command line (raw).
raw_json="json:{\"driver\": \"raw\", \"file\": {\"driver\": \"file\", \"filename\": \"$img\"}}"
out=$(dry --export-name= --persistent --shared=8 --socket="$sock" --cache=none \
          --aio=native --discard=unmap --detect-zeroes=unmap --allocation-depth "$raw_json")
has "$out" "--unix=$sock"
has "$out" "--threads=2"
has "$out" "--filter=[^ ]*/nbdkit-lifecycle-filter.so"
has "$out" "lifecycle-limit=8"
has "$out" "lifecycle-exit-last=false"
hasnt "$out" "lifecycle-unlink=.*"
hasnt "$out" "--filter=limit"
hasnt "$out" "--filter=exitlast"
hasnt "$out" "--filter=multi-conn"
has "$out" "$plugin"
has "$out" "file=$img"
has "$out" "format=raw"
has "$out" "cache=none"
has "$out" "zerodetect=unmap"
has "$out" "discard=pass"
has "$out" "exportname="
has "$out" "exportname-strict=true"
has "$out" "blocksize-maximum=32M"
hasnt "$out" "--filter=[^ ]*coalesce[^ ]*"
hasnt "$out" "--filter=fua"
hasnt "$out" "-r"
[ "$(wc -l <"$T/dry.err")" = 1 ] && grep -q -- '--allocation-depth' "$T/dry.err" ||
  fail "--allocation-depth: expected one warning line, got: $(cat "$T/dry.err")"

# The same options in other spellings getopt_long accepts: separate
# arguments, abbreviations, clustered short options, options after FILE.
ref=$(dry -k "$sock" -t -e 8 -r -x name -f raw "$img")
for spelling in \
    "--socket $sock --persistent --shared 8 --read-only --export-name name --format raw $img" \
    "--sock=$sock --pers --sha=8 --read --export=name --form=raw $img" \
    "-k$sock -tre8 -xname -fraw $img" \
    "$img -k $sock -rt -e 8 -x name -f raw" \
    "-k $sock -t -e 0x8 -r -x name -f raw $img"; do
  # shellcheck disable=SC2086 # word splitting is the point
  out=$(dry $spelling)
  [ "$out" = "$ref" ] || fail "spelling '$spelling' gave: $out, expected: $ref"
done
has "$ref" "-r"
has "$ref" "readonly=true"
has "$ref" "exportname=name"
has "$ref" "lifecycle-limit=8"
has "$ref" "lifecycle-flush=false"

# Defaults: TCP on 0.0.0.0:10809, one client, exit after the last one.
out=$(dry -f raw "$img")
has "$out" "--ipaddr=0.0.0.0"
has "$out" "--port=10809"
has "$out" "lifecycle-exit-last=true"
has "$out" "lifecycle-limit=1"
has "$out" "lifecycle-flush=true"
has "$out" "multi-conn-mode=disable"
has "$out" "discard=ignore"
has "$out" "discard-zero-trim=never"
hasnt "$out" "--filter=[^ ]*zerodetect[^ ]*"
grep -q 'probing guessed raw' "$T/dry.err" && fail "-f raw: no probe warning expected"
out=$(dry -b 127.0.0.1 -p 12345 -e 0 "$img")
has "$out" "--ipaddr=127.0.0.1"
has "$out" "--port=12345"
has "$out" "lifecycle-limit=0"
grep -q 'probing guessed raw' "$T/dry.err" || fail "no -f: the probe warning is missing"

# Cache modes.
out=$(dry -k "$sock" -f raw --cache=writethrough "$img")
has "$out" "cache=writeback"; has "$out" "fuamode=force"
out=$(NBDSTACK_OPTIONS=coalesce=on dry -k "$sock" -f raw --cache=writethrough "$img")
has "$out" "--filter=[^ ]*coalesce[^ ]*"; has "$out" "coalesce-mode=writethrough"
out=$(dry -k "$sock" -f raw --cache=directsync "$img")
has "$out" "cache=none"; has "$out" "fuamode=force"
out=$(NBDSTACK_OPTIONS=coalesce=on dry -k "$sock" -f raw --cache=directsync "$img")
has "$out" "coalesce-mode=writethrough"
out=$(dry -k "$sock" -f raw --cache=unsafe "$img")
has "$out" "cache=writeback"; has "$out" "fuamode=discard"
out=$(dry -k "$sock" -f raw -n "$img")
has "$out" "cache=none"; hasnt "$out" "--filter=fua"
out=$(dry -k "$sock" -f raw --discard=on --detect-zeroes=on "$img")
has "$out" "zerodetect=on"; has "$out" "discard=pass"

# Ranges: a raw node's offset/size, and -o on top of it.
out=$(dry -k "$sock" "json:{\"driver\": \"raw\", \"offset\": 1048576, \"size\": \"1M\", \"file\": {\"driver\": \"file\", \"filename\": \"$img\"}}")
has "$out" "--filter=offset"; has "$out" "offset=1048576"; has "$out" "range=1048576"
out=$(dry -k "$sock" -o 4096 --image-opts "driver=raw,offset=1M,file.filename=$img")
has "$out" "offset=1052672"; has "$out" "range=66056192"

# qcow2, writable: -f qcow2, probed, and a json qcow2 node (these three
# were refused before the image plugin wrote qcow2).
for spec in "-f qcow2 $qimg" "$qimg"; do
  out=$(dry -k "$sock" $spec)
  has "$out" "format=qcow2"; hasnt "$out" "readonly=true"; hasnt "$out" "-r"
done
out=$(dry -k "$sock" "json:{\"driver\": \"qcow2\", \"file\": {\"driver\": \"file\", \"filename\": \"$qimg\"}}")
has "$out" "format=qcow2"; hasnt "$out" "readonly=true"; hasnt "$out" "-r"

# qcow2, read-only: backing chain followed unless "backing": null; -l.
out=$(dry -k "$sock" -r "json:{\"driver\": \"qcow2\", \"file\": {\"driver\": \"file\", \"filename\": \"$qimg\"}, \"backing\": null}")
has "$out" "format=qcow2"; has "$out" "backing=none"; has "$out" "readonly=true"
hasnt "$out" "--filter=[^ ]*coalesce[^ ]*"
out=$(dry -k "$sock" -l snap1 "$qimg")
has "$out" "snapshot=snap1"; has "$out" "backing=follow"; has "$out" "-r"
out=$(dry -k "$sock" -l snapshot.name=snap1 "$qimg")
has "$out" "snapshot=snap1"

# Our own settings, from NBDSTACK_OPTIONS over the config file.
cat >"$T/nbd.conf" <<CONF
# comment
coalesce = on
zerodetect-granularity=128K
CONF
out=$(NBDSTACK_CONFIG=$T/nbd.conf dry -k "$sock" -f raw --discard=unmap --detect-zeroes=unmap "$img")
has "$out" "--filter=[^ ]*coalesce[^ ]*"; has "$out" "zerodetect-granularity=128K"
out=$(NBDSTACK_CONFIG=$T/nbd.conf NBDSTACK_OPTIONS="coalesce=off coalesce-size=16M threads=12" \
        dry -k "$sock" -f raw "$img")
hasnt "$out" "--filter=[^ ]*coalesce[^ ]*"; hasnt "$out" "coalesce-size=16M"; has "$out" "--threads=12"
# The threads= setting wins over our default, from either place, and
# nbdkit is given one --threads.
one_threads ()
{
  [ "$(grep -oE -- '(^| )--threads=[^ ]*' <<<"$1" | wc -l)" -eq 1 ] ||
    fail "not exactly one --threads in: $1"
}
one_threads "$out"
printf 'threads = 16\n' >"$T/threads.conf"
out=$(NBDSTACK_CONFIG=$T/threads.conf dry -k "$sock" -f raw "$img")
has "$out" "--threads=16"; one_threads "$out"
out=$(NBDSTACK_CONFIG=$T/threads.conf NBDSTACK_OPTIONS=threads=1 dry -k "$sock" -f raw "$img")
has "$out" "--threads=1"; one_threads "$out"
# Without it: 4 worker threads per connection for one client at a time
# (nbdkit's default of 16 keeps 16 request buffers of the largest
# request per connection), 2 when --shared lets several clients in.
out=$(dry -k "$sock" -f raw "$img")
has "$out" "--threads=4"; one_threads "$out"
out=$(dry -k "$sock" -r -f raw "$img")
has "$out" "--threads=4"; one_threads "$out"
out=$(dry -k "$sock" --shared=1 -f raw "$img")
has "$out" "--threads=4"; one_threads "$out"
out=$(dry -k "$sock" --shared=2 -f raw "$img")
has "$out" "--threads=2"; one_threads "$out"
out=$(dry -k "$sock" --shared=0 -f raw "$img")
has "$out" "--threads=2"; one_threads "$out"
out=$(NBDSTACK_CONFIG=$T/threads.conf dry -k "$sock" --shared=8 -f raw "$img")
has "$out" "--threads=16"; one_threads "$out"
out=$(NBDSTACK_OPTIONS="coalesce-size=16M" dry -k "$sock" -f raw "$img")
has "$out" "--filter=[^ ]*coalesce[^ ]*"; has "$out" "coalesce-size=16M"
expect_error "coalesce=maybe: expected on or off" env NBDSTACK_OPTIONS="coalesce=maybe" "$NBDSTACK_NBD" -k "$sock" -f raw "$img"
expect_error "unknown setting 'nosuch'" env NBDSTACK_OPTIONS="nosuch=1" "$NBDSTACK_NBD" -k "$sock" -f raw "$img"
expect_error "coalesce-mode=writeback contradicts --cache=writethrough" \
  env NBDSTACK_OPTIONS="coalesce-mode=writeback" "$NBDSTACK_NBD" -k "$sock" -f raw --cache=writethrough "$img"
expect_error "$T/missing.conf" env NBDSTACK_CONFIG="$T/missing.conf" "$NBDSTACK_NBD" -k "$sock" -f raw "$img"
expect_error "cannot run /nonexistent/nbdkit" env NBDSTACK_NBDKIT=/nonexistent/nbdkit "$NBDSTACK_NBD" -k "$sock" -f raw "$img"

# ---- --version and --help
ver=$("$NBDSTACK_NBD" --version)
# imageio parses the second word of the first line as qemu-nbd's version
# and passes --allocation-depth only to >= 5.2.0.
python3 - "$(head -n 1 <<<"$ver")" <<'PY' || fail "--version: first line not usable as qemu-nbd's: $ver"
import sys
v = tuple(int(n) for n in sys.argv[1].split(None, 2)[1].split("."))
assert v >= (5, 2, 0), v
PY
nbdkit_version=$("$NBDKIT" --version | awk '{print $2}')
grep -qF "nbdkit $nbdkit_version" <<<"$ver" || fail "--version does not name nbdkit $nbdkit_version: $ver"
grep -qF "nbdstack $(sed -n 's/^AC_INIT(\[nbdstack\], \[\(.*\)\])/\1/p' "$abs_top_srcdir/configure.ac")" <<<"$ver" ||
  fail "--version does not name our version: $ver"
[ "$("$NBDSTACK_NBD" -V)" = "$ver" ] || fail "-V and --version differ"
help=$("$NBDSTACK_NBD" --help)
for o in --port --bind --socket --shared --persistent --verbose --export-name \
         --description --offset --allocation-depth --bitmap --list --object \
         --tls-creds --tls-authz --trace --fork --pid-file --selinux-label \
         --connect --disconnect --format --read-only --snapshot --load-snapshot \
         --nocache --cache --aio --discard --detect-zeroes --image-opts; do
  grep -qF -- "$o" <<<"$help" || fail "--help does not mention $o"
done
# --help and --version win over a refused option, as in qemu-nbd.
"$NBDSTACK_NBD" -B x --help >/dev/null || fail "--help after a refused option failed"
