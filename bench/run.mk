# bench/run: the one command that reproduces the reference benchmarks and
# writes bench/results/REPORT.md (see bench/README.md).
# imageio-client is its imageio-style upload client (4 connections,
# 128M regions, 8M writes).  `make bench` (in the bench build dir) runs
# the full benchmark; `make bench BENCH_ARGS=--quick` the smoke run.
noinst_PROGRAMS += imageio-client
imageio_client_SOURCES = imageio-client.c imageio-common.c imageio-common.h
imageio_client_CFLAGS = $(BENCH_COMMON_FLAGS)
imageio_client_LDADD = $(BENCH_COMMON_LIBS)
EXTRA_DIST += run report.py imageio-client.c
# imageio-download: the download counterpart (4 connections, 128M
# regions, block status per region, 8M reads of what is not zero).
# Both take their regions and run their threads with imageio-common.c.
noinst_PROGRAMS += imageio-download
imageio_download_SOURCES = imageio-download.c imageio-common.c imageio-common.h
imageio_download_CFLAGS = $(BENCH_COMMON_FLAGS)
imageio_download_LDADD = $(BENCH_COMMON_LIBS)
EXTRA_DIST += imageio-download.c imageio-rw.sh many.sh vdsm-server.sh \
	huge-sparse.sh filesystems.sh fs-probe.py

.PHONY: bench
bench: all
	BUILD=$(abs_top_builddir) $(srcdir)/run $(BENCH_ARGS)
