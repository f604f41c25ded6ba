# Tests of the image plugin's raw format (plugins/image/format-raw.c,
# image.c) and of the host-file layer under both formats (lib/hostfile).
IMAGE_TESTS = \
	test-image-params.sh \
	test-image-create.sh \
	test-image-format.sh \
	test-image-randops.sh \
	test-image-rmw.sh \
	test-image-extents.sh \
	test-image-fua.sh \
	test-image-readonly.sh \
	test-image-fast-zero.sh \
	test-image-loop.sh \
	test-image-strict.sh \
	test-image-faults.sh \
	test-image-upload.sh \
	test-image-probed-raw.sh \
	test-image-unwritable.sh \
	test-image-resize.sh \
	test-image-bounce-pool.sh \
	test-hostfile-io.sh
TESTS += $(IMAGE_TESTS)
EXTRA_DIST += $(IMAGE_TESTS)

# Concurrent sub-sector writes (cache=none read-modify-write).
check_PROGRAMS += test-image-rmw
test_image_rmw_SOURCES = test-image-rmw.c

# The host-file layer itself, on a real file (buffered and O_DIRECT).
check_PROGRAMS += test-hostfile-io
test_hostfile_io_SOURCES = test-hostfile-io.c unit-check.h
test_hostfile_io_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/lib/hostfile
test_hostfile_io_LDADD = $(top_builddir)/lib/hostfile/libhostfile.la $(LDADD)
