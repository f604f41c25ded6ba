# Tests of the image plugin serving qcow2 images writable (issue 9, plugin
# glue): TESTS += ..., EXTRA_DIST += ...
QCOW2_SERVE_TESTS = \
	test-qcow2-serve-randops.sh \
	test-qcow2-serve-kill.sh \
	test-qcow2-serve-upload.sh \
	test-qcow2-serve-misc.sh \
	test-qcow2-subcluster-zero.sh \
	test-qcow2-odd-size.sh \
	test-qcow2-range.sh \
	test-qcow2-zero-layer.sh
TESTS += $(QCOW2_SERVE_TESTS)
EXTRA_DIST += $(QCOW2_SERVE_TESTS)
