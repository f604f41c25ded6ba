# Tests of the zerodetect filter (filters/zerodetect).
ZERODETECT_TESTS = \
	test-zerodetect-log.sh
TESTS += $(ZERODETECT_TESTS)
EXTRA_DIST += $(ZERODETECT_TESTS)
