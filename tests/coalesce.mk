# Tests of the coalesce filter (filters/coalesce).
COALESCE_TESTS = \
	test-coalesce-randops.sh \
	test-coalesce-visibility.sh \
	test-coalesce-durability.sh \
	test-coalesce-errors.sh \
	test-coalesce-memory.sh \
	test-coalesce-log.sh \
	test-coalesce-overlap.sh \
	test-coalesce-serialized.sh \
	test-coalesce-kill.sh \
	test-coalesce-flush-race.sh \
	test-coalesce-order.sh \
	test-coalesce-direct.sh \
	test-coalesce-random.sh \
	test-coalesce-recycle.sh \
	test-coalesce-pagepolicy.sh \
	test-coalesce-interleaved.sh
TESTS += $(COALESCE_TESTS)
EXTRA_DIST += $(COALESCE_TESTS)

# The concurrency and durability stress client (see stress.c).
check_PROGRAMS += stress
stress_SOURCES = stress.c

# The coalesce filter's enum and boolean parameters (common/
# parse-enum-param.h messages).
TESTS += test-coalesce-params.sh
EXTRA_DIST += test-coalesce-params.sh

# The interval set (intervals.c) on its own: it has no nbdkit dependency.
check_PROGRAMS += test-coalesce-intervals
TESTS += test-coalesce-intervals
test_coalesce_intervals_SOURCES = \
	test-coalesce-intervals.c \
	../filters/coalesce/intervals.c \
	../filters/coalesce/intervals.h
# Needs the filter's own headers too.
test_coalesce_intervals_CPPFLAGS = \
	$(AM_CPPFLAGS) -I$(top_srcdir)/filters/coalesce
