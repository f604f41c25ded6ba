# Unit tests of the helpers in common/: one plain C program per header,
# no server needed (the parsers' nbdkit calls are stubbed in the test).
COMMON_TESTS = \
	test-common-align \
	test-common-array-size \
	test-common-byte-order \
	test-common-cleanup \
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

test_common_align_SOURCES = test-common-align.c
test_common_array_size_SOURCES = test-common-array-size.c
test_common_byte_order_SOURCES = test-common-byte-order.c
test_common_cleanup_SOURCES = test-common-cleanup.c
test_common_image_magic_SOURCES = test-common-image-magic.c
test_common_is_zero_SOURCES = test-common-is-zero.c
test_common_param_table_SOURCES = test-common-param-table.c
test_common_parse_enum_param_SOURCES = test-common-parse-enum-param.c
test_common_parse_size_arg_SOURCES = test-common-parse-size-arg.c
test_common_parse_size_param_SOURCES = test-common-parse-size-param.c
test_common_stat_counter_SOURCES = test-common-stat-counter.c
test_common_unique_name_SOURCES = test-common-unique-name.c

# align.h refuses a constant alignment that is not a power of 2 at
# compile time: each such use in test-common-align.c (ALIGN_BAD_CONSTANT)
# must fail to compile, and for that reason, or make check stops here.
check_DATA += test-common-align-static.stamp
CLEANFILES += test-common-align-static.stamp test-common-align-static.stamp.err
test-common-align-static.stamp: test-common-align.c $(top_srcdir)/common/align.h
	$(AM_V_GEN)for n in 1 2 3; do \
	  if $(CC) $(DEFS) $(DEFAULT_INCLUDES) -I$(top_srcdir)/common \
	       $(WARNINGS_CFLAGS) -DALIGN_BAD_CONSTANT=$$n -fsyntax-only \
	       $(srcdir)/test-common-align.c >$@.err 2>&1 || \
	     ! grep -q 'alignment must be a power of 2' $@.err; then \
	    echo "test-common-align.c: ALIGN_BAD_CONSTANT=$$n was not refused" \
	      "by the static check:" >&2; \
	    cat $@.err >&2; \
	    exit 1; \
	  fi; \
	done; \
	rm -f $@.err; \
	touch $@
