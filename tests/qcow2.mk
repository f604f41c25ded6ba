# Tests of qcow2: TESTS += ..., check_PROGRAMS += ..., EXTRA_DIST += ...
QCOW2_TESTS = \
	test-qcow2-unit.sh \
	test-qcow2-matrix.sh \
	test-qcow2-refuse.sh \
	test-qcow2-hostile.sh \
	test-qcow2-chain.sh \
	test-qcow2-parallel.sh
TESTS += $(QCOW2_TESTS)
EXTRA_DIST += $(QCOW2_TESTS) test-qcow2-map.py test-qcow2-patch.py \
	test-qcow2-functions.sh

# The library on its own, over in-memory host I/O.
check_PROGRAMS += test-qcow2-unit
test_qcow2_unit_SOURCES = test-qcow2-unit.c
test_qcow2_unit_CPPFLAGS = -I$(top_srcdir)/lib
test_qcow2_unit_CFLAGS = $(WARNINGS_CFLAGS) $(SANITIZER_CFLAGS)
test_qcow2_unit_LDADD = $(top_builddir)/lib/libqcow2.la -lpthread
test_qcow2_unit_LDFLAGS = $(SANITIZER_CFLAGS)
