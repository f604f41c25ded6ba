#!/usr/bin/env bash
# image plugin: bad parameters and unusable files give one clear error
# line and a non-zero exit, before any client can connect.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh

img=$T/disk.img
truncate -s 1M "$img"
mkdir "$T/dir"

# bad MESSAGE PARAMS...: nbdkit must refuse to start with exactly this
# message, on a single line.
bad ()
{
  local msg=$1 out
  shift
  if out=$(nbdkit -U - "$IMAGE_PLUGIN" "$@" --run 'echo SERVED' 2>&1); then
    fail "accepted: $*"
  fi
  case $out in *SERVED*) fail "served despite an error: $*" ;; esac
  [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] ||
    fail "expected one error line for '$*', got: $out"
  [ "$out" = "nbdkit: error: $msg" ] ||
    fail "for '$*': expected 'nbdkit: error: $msg', got '$out'"
}

bad "you must supply the file=PATH parameter"
bad "$T/missing.img: No such file or directory" file="$T/missing.img"
bad "$T/dir: is a directory, expected a file or block device" file="$T/dir"
bad "/dev/null: not a regular file or block device" file=/dev/null
bad "format=bogus: expected auto, raw or qcow2" file="$img" format=bogus
bad "cache=bogus: expected writeback or none" file="$img" cache=bogus
bad "readonly=maybe: expected true or false" file="$img" readonly=maybe
bad "create=maybe: expected true, false or force" file="$img" create=maybe size=1M
# Enum words are matched exactly; only booleans take other spellings.
bad "format=RAW: expected auto, raw or qcow2" file="$img" format=RAW
bad "create=FORCE: expected true, false or force" file="$img" create=FORCE size=1M
bad "backing=bogus: expected refuse, none or follow" file="$img" backing=bogus
bad "create=true needs size=SIZE" file="$T/new.img" create=true
bad "size=SIZE is only used with create=true" file="$img" size=1M
bad "size=abc: expected a size such as 4096, 64K or 1M" \
  file="$T/new.img" create=true size=abc
bad "size=-5: expected a size such as 4096, 64K or 1M" \
  file="$T/new.img" create=true size=-5
bad "unknown parameter 'foo'" file="$img" foo=bar
bad "$T/nodir/new.img: cannot create: No such file or directory" \
  file="$T/nodir/new.img" create=true size=1M
bad "$T/dir: create=force: exists and is not a regular file" \
  file="$T/dir" create=force size=1M
[ ! -e "$T/new.img" ] || fail "a refused create left $T/new.img behind"

# A file we may not read: one clear line, whether format=auto sniffs it
# or format=raw opens it.  Root may read anything, so nbdkit runs as root
# without the two capabilities that bypass file permissions, on a file
# with no permission bits.  Running it as another user (nobody) instead
# would need that user to reach the plugin, the ASan exit shim and the
# system's libraries, which it cannot when the checkout is under /root
# or the system is a chroot in a private directory.
if [ "$(id -u)" -eq 0 ]; then
  secret=$T/secret.img
  truncate -s 1M "$secret"
  chmod 000 "$secret"
  for fmt in auto raw; do
    if out=$(setpriv --bounding-set=-dac_override,-dac_read_search \
               nbdkit -U - "$IMAGE_PLUGIN" file="$secret" format=$fmt \
               --run 'echo SERVED' 2>&1); then
      fail "an unreadable file was served: $out"
    fi
    [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] &&
      [[ $out == "nbdkit: error: $secret: "*"Permission denied" ]] ||
      fail "unreadable file, format=$fmt: unclear error: $out"
  done
fi

# The same errors come out of a daemonised server (start_nbdkit).
if start_nbdkit srv "$IMAGE_PLUGIN" file="$T/missing.img" 2>/dev/null; then
  fail "start_nbdkit accepted a missing file"
fi
grep -q "error: $T/missing.img: No such file or directory" "$(logfile srv)" ||
  fail "daemonised server did not log the error"
rm -f "$(logfile srv)"

# Good parameters are accepted, in every spelling of a boolean.
for b in true false yes no on off 1 0 TRUE; do
  nbdkit -U - "$IMAGE_PLUGIN" file="$img" readonly=$b cache=none \
    format=raw --run 'nbdinfo --size "$uri" >/dev/null' ||
    fail "readonly=$b was refused"
done
# create= is a boolean plus force: an existing file of the right size
# is kept under any spelling of true.
for b in true yes on 1 TRUE; do
  nbdkit -U - "$IMAGE_PLUGIN" file="$img" create=$b size=1M \
    --run 'nbdinfo --size "$uri" >/dev/null' ||
    fail "create=$b was refused"
done
