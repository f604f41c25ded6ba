#!/usr/bin/env bash
# ThreadSanitizer over the qcow2 library's concurrent layers: the
# library and test-qcow2-write-unit built with clang -fsanitize=thread,
# then the group and parallel layers (see test-qcow2-group.sh and
# test-qcow2-concurrent.sh).  Any data race report fails the test.
# clang is required (scripts/setup.sh installs it): no silent skip.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require qemu-img
require clang
cd "$T"

src=$abs_top_srcdir
clang -fsanitize=thread -g -O1 -I "$abs_top_builddir" -I "$src/lib" \
  -I "$src/common" $(ls "$src"/lib/*.c | grep -v fuzz) "$src/common/cleanup.c" \
  "$src/tests/test-qcow2-write-unit.c" -lz -lzstd -lpthread -o tsan-unit ||
  fail "building the ThreadSanitizer binary"

export TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1"
unset LD_PRELOAD
n=0
for opts in cluster_size=4k compat=0.10,cluster_size=1k; do
  n=$((n + 1))
  "$QEMU_IMG" create -q -f qcow2 -o $opts t$n.qcow2 512k
  mkdir g$n.d p$n.d
  ./tsan-unit group t$n.qcow2 g$n.d $n 20 >out 2>&1 ||
    fail "group ($opts) under ThreadSanitizer: $(head -60 out)"
  cat out
  ./tsan-unit parallel t$n.qcow2 p$n.d $n 20 >out 2>&1 ||
    fail "parallel ($opts) under ThreadSanitizer: $(head -60 out)"
  cat out
  ! grep -q "ThreadSanitizer" out || fail "ThreadSanitizer reported: $(head -60 out)"
done
