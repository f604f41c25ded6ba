# Tests of qcow2: TESTS += ..., check_PROGRAMS += ..., EXTRA_DIST += ...
QCOW2_TESTS = \
	test-qcow2-matrix.sh \
	test-qcow2-refuse.sh \
	test-qcow2-hostile.sh \
	test-qcow2-chain.sh \
	test-qcow2-parallel.sh
TESTS += $(QCOW2_TESTS)
EXTRA_DIST += $(QCOW2_TESTS) test-qcow2-map.py test-qcow2-patch.py \
	test-qcow2-functions.sh
