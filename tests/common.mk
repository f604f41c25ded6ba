# Unit tests of the helpers in common/: one plain C program per header,
# no server needed (the parsers' nbdkit calls are stubbed in the test).
# The source of test-common-HEADER sits beside the header, as
# common/test-HEADER.c (as nbdkit's common/include/test-*.c); they are
# built and run here so that their results are in tests/test-suite.log
# with the rest and a failing one does not stop the other tests.
COMMON_TESTS = \
	test-common-align \
	test-common-array-size \
	test-common-byte-order \
	test-common-cleanup \
	test-common-fua-plan \
	test-common-image-magic \
	test-common-is-zero \
	test-common-param-table \
	test-common-parse-enum-param \
	test-common-parse-size-arg \
	test-common-parse-size-param \
	test-common-stat-counter \
	test-common-unique-name
TESTS += $(COMMON_TESTS)
check_PROGRAMS += $(COMMON_TESTS)

test_common_align_SOURCES = ../common/test-align.c
test_common_array_size_SOURCES = ../common/test-array-size.c
test_common_byte_order_SOURCES = ../common/test-byte-order.c
test_common_cleanup_SOURCES = ../common/test-cleanup.c
test_common_fua_plan_SOURCES = ../common/test-fua-plan.c
test_common_image_magic_SOURCES = ../common/test-image-magic.c
test_common_is_zero_SOURCES = ../common/test-is-zero.c
test_common_param_table_SOURCES = ../common/test-param-table.c
test_common_parse_enum_param_SOURCES = ../common/test-parse-enum-param.c \
	../common/test-nbdkit-error.h
test_common_parse_size_arg_SOURCES = ../common/test-parse-size-arg.c
test_common_parse_size_param_SOURCES = ../common/test-parse-size-param.c \
	../common/test-nbdkit-error.h
test_common_stat_counter_SOURCES = ../common/test-stat-counter.c
test_common_unique_name_SOURCES = ../common/test-unique-name.c

# align.h refuses a constant alignment that is not a power of 2 at
# compile time: each such use in common/test-align.c (ALIGN_BAD_CONSTANT)
# must fail to compile, and for that reason, or make check stops here.
check_DATA += test-common-align-static.stamp
CLEANFILES += test-common-align-static.stamp test-common-align-static.stamp.err
test-common-align-static.stamp: $(top_srcdir)/common/test-align.c $(top_srcdir)/common/align.h
	$(AM_V_GEN)for n in 1 2 3; do \
	  if $(CC) $(DEFS) $(DEFAULT_INCLUDES) -I$(top_srcdir)/common \
	       $(WARNINGS_CFLAGS) -DALIGN_BAD_CONSTANT=$$n -fsyntax-only \
	       $(top_srcdir)/common/test-align.c >$@.err 2>&1 || \
	     ! grep -q 'alignment must be a power of 2' $@.err; then \
	    echo "common/test-align.c: ALIGN_BAD_CONSTANT=$$n was not refused" \
	      "by the static check:" >&2; \
	    cat $@.err >&2; \
	    exit 1; \
	  fi; \
	done; \
	rm -f $@.err; \
	touch $@
