# Tests of the image plugin's raw format (plugins/image/raw*.c, image.c).
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
	test-image-bounce-pool.sh
TESTS += $(IMAGE_TESTS)
EXTRA_DIST += $(IMAGE_TESTS)

# Concurrent sub-sector writes (cache=none read-modify-write).
check_PROGRAMS += test-image-rmw
test_image_rmw_SOURCES = test-image-rmw.c
