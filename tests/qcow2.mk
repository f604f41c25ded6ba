# Tests of qcow2: TESTS += ..., check_PROGRAMS += ..., EXTRA_DIST += ...
QCOW2_TESTS = \
	test-qcow2-unit.sh \
	test-qcow2-matrix.sh \
	test-qcow2-refuse.sh \
	test-qcow2-hostile.sh \
	test-qcow2-chain.sh \
	test-qcow2-parallel.sh \
	test-qcow2-hostio.sh \
	test-qcow2-refcount.sh \
	test-qcow2-write.sh \
	test-qcow2-crash.sh \
	test-qcow2-crash-layouts.sh \
	test-qcow2-create.sh \
	test-qcow2-group.sh \
	test-qcow2-write-refuse.sh \
	test-qcow2-write-fault.sh \
	test-qcow2-concurrent.sh \
	test-qcow2-tsan.sh \
	test-qcow2-overlap.sh \
	test-qcow2-enospc.sh \
	test-qcow2-layout-trim.sh \
	test-qcow2-huge.sh \
	test-qcow2-repair-leaks.sh
TESTS += $(QCOW2_TESTS) test-qcow2-overlap-unit
EXTRA_DIST += $(QCOW2_TESTS) test-qcow2-map.py test-qcow2-patch.py \
	test-qcow2-functions.sh test-qcow2-overlap.py test-qcow2-poke.py

# The library on its own, over in-memory host I/O.
check_PROGRAMS += test-qcow2-unit
test_qcow2_unit_SOURCES = test-qcow2-unit.c
# Also links the library under test.
test_qcow2_unit_LDADD = $(top_builddir)/lib/libqcow2.la $(LDADD)

# The write side of the library, layer by layer (see lib/WRITING.md).
check_PROGRAMS += test-qcow2-write-unit
test_qcow2_write_unit_SOURCES = test-qcow2-write-unit.c unit-check.h
# Also links the library under test.
test_qcow2_write_unit_LDADD = $(top_builddir)/lib/libqcow2.la \
	$(top_builddir)/lib/hostfile/libhostfile.la $(LDADD)

# The metadata map behind the overlap checks (lib/overlap.c).
check_PROGRAMS += test-qcow2-overlap-unit
test_qcow2_overlap_unit_SOURCES = test-qcow2-overlap-unit.c unit-check.h
# Also links the library under test.
test_qcow2_overlap_unit_LDADD = $(top_builddir)/lib/libqcow2.la $(LDADD)
