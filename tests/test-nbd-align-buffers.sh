#!/usr/bin/env bash
# nbdstack-nbd: the align-buffers setting (nbd/alignbuf.c).
#  - the shim: preloaded, every realloc of 64 KiB or more starts on a
#    page and keeps its bytes; without it glibc's large ones do not
#    start on a page (tests/alignbuf-check.c);
#  - nbdstack-nbd preloads it into nbdkit with --cache=none and
#    directsync (after whatever the caller preloads), not with
#    align-buffers=off or --cache=writeback, and refuses a bad value
#    with one line; data written and read back is the same either way;
#  - what it is for: the image plugin with cache=none serves large
#    writes and reads straight from nbdkit's buffers, where without the
#    shim it takes a bounce buffer for every one (the plugin's bounce
#    pool counts them; not in the sanitizer build, whose preloaded ASan
#    runtime comes first with its own allocator and realloc).
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
. "$srcdir/nbd-functions.sh"
require_filter_version
python3 -c 'import nbd' 2>/dev/null || skip "python3-libnbd is not installed"

shim=$abs_top_builddir/nbd/.libs/nbdstack-alignbuf.so
check=$abs_top_builddir/tests/alignbuf-check
plugin=$abs_top_builddir/plugins/image/.libs/nbdkit-image-plugin.so
[ -r "$shim" ] || fail "$shim is not built"

# ---- the shim itself
"$check" plain || fail "alignbuf-check plain"
LD_PRELOAD=$shim "$check" aligned || fail "alignbuf-check aligned"

# ---- nbdstack-nbd preloads it
img=$T/disk.img
truncate -s 64M "$img"

# Write 8 MiB in one request and 1 MiB at an odd offset, and read both
# back.
roundtrip ()
{
  nbdsh -u "nbd+unix:///?socket=$1" -c '
a = bytes(range(256)) * (32 << 10)
b = b"\x5a" * (1 << 20)
h.pwrite(a, 0)
h.pwrite(b, 3 << 20)
want = bytearray(a)
want[3 << 20:4 << 20] = b
assert h.pread(8 << 20, 0) == bytes(want)
assert h.pread(4096, (4 << 20) - 2048) == bytes(want[(4 << 20) - 2048:(4 << 20) + 2048])
'
}

run () # NAME EXPECTED-PRELOAD CACHE SETTINGS [CALLERS-LD_PRELOAD]
{
  local name=$1 want=$2 cache=$3 pid got
  local -x NBDSTACK_OPTIONS="nbdkit-debug=on $4"
  # The caller's preload only for the server (not for nbdsh below).
  if [ -n "${5:-}" ]; then
    LD_PRELOAD=$5 start_fg ours "$name" -t -k "$T/$name.sock" -f raw --cache="$cache" "$img"
  else
    start_fg ours "$name" -t -k "$T/$name.sock" -f raw --cache="$cache" "$img"
  fi
  pid=$(nbdkit_child "$name") || fail "$name: no nbdkit child"
  got=$(running_env "$T/$name.log" LD_PRELOAD) ||
    fail "$name: nbdkit-debug=on printed no command line"
  echo "$name: nbdkit LD_PRELOAD='$got'"
  [ "$got" = "$want" ] || fail "$name: LD_PRELOAD '$got', expected '$want'"
  if [ -n "$want" ]; then
    grep -q "nbdstack-alignbuf\.so" "/proc/$pid/maps" ||
      fail "$name: nbdkit has not loaded the shim"
  else
    ! grep -q "nbdstack-alignbuf\.so" "/proc/$pid/maps" ||
      fail "$name: nbdkit loaded the shim"
  fi
  roundtrip "$T/$name.sock" || fail "$name: data read back differs"
  stop_fg "$name"
  [ "$exit_status" = 0 ] || fail "$name: exit status $exit_status"
}

run none "$shim" none ""
run directsync "$shim" directsync ""
run off "" none align-buffers=off
run on "$shim" none align-buffers=on
run writeback "" writeback ""
# The caller's preload stays first (a sanitizer runtime must).  The
# caller's library is a copy of the shim, so that nothing else changes.
cp "$shim" "$T/caller.so"
caller=${SANITIZER_PRELOAD:+$SANITIZER_PRELOAD:}$T/caller.so
run caller "$caller:$shim" none "" "$caller"

# A bad value: one line, exit status 1, nothing served.
refuses_onoff align-buffers=maybe -f raw --cache=none "$img"

# ---- the bounce copies it saves
# How many times the plugin took a bounce buffer while nbdkit (with
# LD_PRELOAD=$1, or none) served 16 writes and 16 reads of 1 MiB.
bounces ()
{
  local log=$T/bounce${1:+-shim}.log
  LD_PRELOAD=$1 nbdkit -v -U - "$plugin" file="$img" format=raw cache=none \
    --run 'nbdsh -u "$uri" -c "
for i in range(16):
    h.pwrite(bytes([i]) * (1 << 20), i << 20)
for i in range(16):
    assert h.pread(1 << 20, i << 20) == bytes([i]) * (1 << 20)
"' 2>"$log" || fail "nbdkit LD_PRELOAD=$1: $(tail -n 3 "$log")"
  sed -n 's/.*bounce pool: .* taken \([0-9]*\) time(s).*/\1/p' "$log" | grep . || echo 0
}
if [ -n "$SANITIZER_PRELOAD" ]; then
  # ASan's allocator, preloaded first, serves nbdkit's realloc (with its
  # own alignment) and the shim's is never called.
  echo "sanitizer build: bounce buffers taken without the shim: $(bounces "")," \
    "with it: $(bounces "$shim") (ASan's realloc, not counted)"
else
  plain=$(bounces "")
  echo "bounce buffers taken without the shim: $plain"
  [ "$plain" -ge 32 ] ||
    fail "without the shim the plugin took $plain bounce buffers for 32 requests: nbdkit's buffers are aligned, the test shows nothing"
  aligned=$(bounces "$shim")
  echo "bounce buffers taken with the shim: $aligned"
  [ "$aligned" -le $((plain - 32)) ] ||
    fail "with the shim the plugin still took $aligned bounce buffers (without: $plain)"
fi
echo "OK"
