# Tests of the zerodetect filter (filters/zerodetect).
ZERODETECT_TESTS = \
	test-zerodetect-log.sh \
	test-zerodetect-errors.sh \
	test-zerodetect-alloc.sh \
	test-zerodetect-randops.sh
TESTS += $(ZERODETECT_TESTS)
EXTRA_DIST += test-zerodetect-zero-runs.py
EXTRA_DIST += $(ZERODETECT_TESTS)

# zerodetect and discard stacked (both orders) and with coalesce.
STACKED_TESTS = \
	test-filters-stacked-zerodetect-discard.sh \
	test-filters-stacked-coalesce.sh
TESTS += $(STACKED_TESTS)
EXTRA_DIST += $(STACKED_TESTS)
