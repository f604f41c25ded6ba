#!/usr/bin/env bash
# The host-file layer under both image formats (lib/hostfile): unaligned
# reads and writes, read-modify-write, the buffered tail and zeroing of
# a real file, buffered and O_DIRECT, checked against a reference buffer
# (see test-hostfile-io.c).
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
"$abs_builddir/test-hostfile-io" "$T"
