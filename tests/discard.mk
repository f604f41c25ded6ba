# Tests of the discard filter (filters/discard).
DISCARD_TESTS = \
	test-discard-log.sh \
	test-discard-errors.sh \
	test-discard-alloc.sh \
	test-discard-randops.sh
TESTS += $(DISCARD_TESTS)
EXTRA_DIST += $(DISCARD_TESTS)
