# bench/run: the one command that reproduces the reference benchmarks and
# writes bench/results/REPORT.md (see bench/README.md).
# imageio-client is its imageio-style upload client (4 connections,
# 128M regions, 8M writes).  `make bench` (in the bench build dir) runs
# the full benchmark; `make bench BENCH_ARGS=--quick` the smoke run.
noinst_PROGRAMS += imageio-client
imageio_client_SOURCES = imageio-client.c
imageio_client_CFLAGS = $(BENCH_COMMON_FLAGS)
imageio_client_LDADD = $(BENCH_COMMON_LIBS)
EXTRA_DIST += run report.py imageio-client.c

.PHONY: bench
bench: all
	BUILD=$(abs_top_builddir) $(srcdir)/run $(BENCH_ARGS)
