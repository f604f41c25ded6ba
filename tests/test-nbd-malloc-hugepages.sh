#!/usr/bin/env bash
# nbdstack-nbd: the malloc-hugepages setting.
#  - by default nbdkit runs with glibc.malloc.hugetlb=1 in GLIBC_TUNABLES
#    (added to what the caller has there), and, where the kernel's THP
#    setting is madvise, the request buffer an 8 MiB write grows is
#    mapped with MADV_HUGEPAGE (VmFlags "hg" in smaps; not in the
#    sanitizer build, whose allocator is ASan's);
#  - malloc-hugepages=off: neither;
#  - a GLIBC_TUNABLES that already sets glibc.malloc.hugetlb is left as
#    it is;
#  - a bad value is refused with one line and exit status 1.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
. "$srcdir/nbd-functions.sh"
require_filter_version
python3 -c 'import nbd' 2>/dev/null || skip "python3-libnbd is not installed"

img=$T/disk.img
truncate -s 16M "$img"
thp=$(sed -n 's/.*\[\(.*\)\].*/\1/p' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || :)
echo "THP: ${thp:-unknown}"

# Write 8 MiB in one request and, while connected, print how many
# mappings of nbdkit (pid $2) of at least 8 MiB carry VmFlags hg.
hg_mappings ()
{
  NBDKIT_PID=$2 nbdsh -u "nbd+unix:///?socket=$1" -c '
import os
h.pwrite(b"\x5a" * (8 << 20), 0)
assert h.pread(4096, 4096) == b"\x5a" * 4096
n, size = 0, 0
for line in open("/proc/%s/smaps" % os.environ["NBDKIT_PID"]):
    f = line.split()
    if "-" in f[0] and len(f) >= 5 and ":" not in f[0]:
        a, b = (int(x, 16) for x in f[0].split("-"))
        size = b - a
    elif f[0] == "VmFlags:" and "hg" in f[1:] and size >= (8 << 20):
        n += 1
print(n)
'
}

run () # NAME EXPECTED-TUNABLES EXPECT-HG(yes|no) SETTINGS [VAR=VALUE...]
{
  local name=$1 want=$2 hg=$3 pid got n
  local -x NBDSTACK_OPTIONS="nbdkit-debug=on $4"
  shift 4
  [ $# -eq 0 ] || local -x "$@"
  start_fg ours "$name" -t -k "$T/$name.sock" -f raw --cache=none "$img"
  pid=$(nbdkit_child "$name") || fail "$name: no nbdkit child"
  got=$(running_env "$T/$name.log" GLIBC_TUNABLES) ||
    fail "$name: nbdkit-debug=on printed no command line"
  echo "$name: nbdkit GLIBC_TUNABLES='$got'"
  [ "$got" = "$want" ] || fail "$name: GLIBC_TUNABLES '$got', expected '$want'"
  n=$(hg_mappings "$T/$name.sock" "$pid")
  echo "$name: $n mapping(s) of 8 MiB or more with MADV_HUGEPAGE"
  if [ -n "$SANITIZER_PRELOAD" ]; then
    echo "$name: sanitizer build: ASan's allocator, not glibc's, maps nbdkit's buffers: mappings not checked"
  elif [ "$thp" = madvise ]; then
    if [ "$hg" = yes ]; then
      [ "$n" -ge 1 ] || fail "$name: no request buffer mapped with MADV_HUGEPAGE"
    else
      [ "$n" = 0 ] || fail "$name: $n mappings with MADV_HUGEPAGE, expected none"
    fi
  else
    echo "$name: THP is '$thp', not madvise: glibc does not madvise, mappings not checked"
  fi
  stop_fg "$name"
  [ "$exit_status" = 0 ] || fail "$name: exit status $exit_status"
}

run default glibc.malloc.hugetlb=1 yes ""
run merged glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1 yes "" \
  GLIBC_TUNABLES=glibc.malloc.arena_max=2
run off "" no malloc-hugepages=off
run off-kept "" no malloc-hugepages=off GLIBC_TUNABLES=glibc.malloc.arena_max=2
run callers "" no "" GLIBC_TUNABLES=glibc.malloc.hugetlb=0

# A bad value: one line, exit status 1, nothing served.
refuses_onoff malloc-hugepages=maybe -f raw "$img"
echo "OK"
