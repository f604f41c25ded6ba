#!/usr/bin/env bash
# Crafted images opened writable whose tables overlap or whose entries
# point at metadata (issue 18.1): the open is refused or the write fails
# with EIO, no metadata byte changes, qemu-img check finds no new
# errors, and qemu-io refuses the same writes where qemu's overlap
# checks catch them (test-qcow2-overlap.py has the cases).
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require qemu-img
require qemu-io
/usr/bin/python3 -c 'import nbd' 2>/dev/null ||
  fail "python3-libnbd is not installed (scripts/setup.sh installs it)"

IMAGE_PLUGIN=$IMAGE_PLUGIN NBDKIT=$NBDKIT QEMU_IMG=$QEMU_IMG QEMU_IO=$QEMU_IO \
  T=$T /usr/bin/python3 "$srcdir/test-qcow2-overlap.py" "$@" ||
  fail "metadata overlap cases failed (see above)"
