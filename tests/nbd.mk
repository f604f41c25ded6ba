# Tests of nbdstack-nbd (nbd/), the qemu-nbd compatible command: each
# runs the same command lines through the real qemu-nbd and through
# nbdstack-nbd and compares what clients see.
NBD_TESTS = \
	test-nbd-cmdline.sh \
	test-nbd-differential.sh \
	test-nbd-clients.sh \
	test-nbd-fork.sh \
	test-nbd-upload.sh \
	test-nbd-blockdev.sh \
	test-nbd-probed-raw.sh \
	test-nbd-unwritable.sh \
	test-nbd-qcow2-range.sh \
	test-nbd-allocation-depth.sh \
	test-nbd-sigterm.sh \
	test-nbd-sigkill.sh \
	test-nbd-shared.sh \
	test-nbd-verbose.sh \
	test-nbd-fork-stderr.sh \
	test-nbd-lastclient.sh \
	test-nbd-list.sh \
	test-nbd-buildtree.sh \
	test-nbd-blocked-signals.sh \
	test-nbd-malloc-hugepages.sh \
	test-nbd-align-buffers.sh
TESTS += $(NBD_TESTS)
EXTRA_DIST += $(NBD_TESTS) nbd-functions.sh nbd-opstream.py nbd-writer.py \
	probe-until-gone.py

# What realloc returns with nbd/nbdstack-alignbuf.so preloaded, and
# without (test-nbd-align-buffers.sh).  Built without the sanitizers:
# the shim has to be the first realloc it finds.
check_PROGRAMS += alignbuf-check
alignbuf_check_SOURCES = alignbuf-check.c
alignbuf_check_CFLAGS = $(WARNINGS_CFLAGS)
alignbuf_check_LDFLAGS =
alignbuf_check_LDADD = -ldl
