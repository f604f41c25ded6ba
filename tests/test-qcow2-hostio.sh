#!/usr/bin/env bash
# The qcow2 library's writable host I/O: fd and growing memory
# implementations, and the recording hostio that builds crash images
# (see test-qcow2-write-unit.c).
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
"$abs_builddir/test-qcow2-write-unit" hostio "$T"
