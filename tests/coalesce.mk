# Tests of the coalesce filter (filters/coalesce).
COALESCE_TESTS = \
	test-coalesce-randops.sh \
	test-coalesce-visibility.sh \
	test-coalesce-durability.sh \
	test-coalesce-errors.sh \
	test-coalesce-memory.sh \
	test-coalesce-log.sh \
	test-coalesce-overlap.sh \
	test-coalesce-serialized.sh
TESTS += $(COALESCE_TESTS)
EXTRA_DIST += $(COALESCE_TESTS)
