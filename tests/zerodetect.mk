# Tests of the zerodetect filter (filters/zerodetect).
ZERODETECT_TESTS = \
	test-zerodetect-log.sh \
	test-zerodetect-errors.sh \
	test-zerodetect-alloc.sh \
	test-zerodetect-randops.sh
TESTS += $(ZERODETECT_TESTS)
EXTRA_DIST += $(ZERODETECT_TESTS)
