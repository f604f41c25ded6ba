# Tests of the lifecycle filter (filters/lifecycle) on its own; its use
# under nbdstack-nbd is tested in nbd.mk.
LIFECYCLE_TESTS = \
	test-lifecycle-late-connections.sh
TESTS += $(LIFECYCLE_TESTS)
EXTRA_DIST += $(LIFECYCLE_TESTS)

# Connection threads that start late, preloaded into nbdkit (see
# thread-delay-shim.c); built like fault-shim.so, without the sanitizers.
check_DATA += thread-delay-shim.so
EXTRA_DIST += thread-delay-shim.c
CLEANFILES += thread-delay-shim.so
thread-delay-shim.so: thread-delay-shim.c prng.h
	$(AM_V_CC)$(CC) -shared -fPIC -O2 -U_FORTIFY_SOURCE $(WARNINGS_CFLAGS) \
	  -o $@ $(srcdir)/thread-delay-shim.c -ldl -lpthread
