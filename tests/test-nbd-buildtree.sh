#!/usr/bin/env bash
# nbdstack-nbd run from a build tree finds the plugin and filters of that
# tree, relative to the executable (as nbdkit's ./nbdkit wrapper finds
# its own), with NBDSTACK_BUILDDIR unset: the nbdkit command line names
# this tree's image plugin and lifecycle filter, and the server serves.
# A copy of the executable outside any build tree uses the installed
# directories instead (named in the error when they hold nothing).
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
. "$srcdir/nbd-functions.sh"
require nbdinfo
require_filter_version
unset NBDSTACK_BUILDDIR

img=$T/disk.img
truncate -s 2M "$img"

out=$(NBDSTACK_NBD_DRY_RUN=1 "$NBDSTACK_NBD" -t -k "$T/b.sock" -f raw "$img") ||
  fail "dry run from the build tree failed: $out"
grep -qF " $abs_top_builddir/plugins/image/.libs/nbdkit-image-plugin.so " <<<"$out" ||
  fail "the build tree's plugin is not used: $out"
grep -qF -- "--filter=$abs_top_builddir/filters/lifecycle/.libs/nbdkit-lifecycle-filter.so" <<<"$out" ||
  fail "the build tree's lifecycle filter is not used: $out"

start_fg ours b -t -k "$T/b.sock" -f raw "$img"
[ "$(nbdinfo --size "nbd+unix:///?socket=$T/b.sock")" = 2097152 ] || fail "not served"
stop_fg b
[ "$exit_status" = 0 ] || fail "exit status $exit_status"

# Outside a build tree: the installed plugin, or an error naming it.
mkdir "$T/copy"
cp "$NBDSTACK_NBD" "$T/copy/nbdstack-nbd"
out=$(NBDSTACK_NBD_DRY_RUN=1 "$T/copy/nbdstack-nbd" -t -k "$T/c.sock" -f raw "$img" 2>&1) || :
! grep -qF "$abs_top_builddir/" <<<"$out" ||
  fail "a copy outside the build tree still used the build tree: $out"
echo "from the build tree: $abs_top_builddir's plugin and filters; a copy elsewhere: not"
