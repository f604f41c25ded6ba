# Benchmarks of upload (bench/upload.sh, bench/make-sample.sh; see
# bench/README.md).  make-sample is the sample image generator; the
# script compiles it on the fly when it is not built.
noinst_PROGRAMS += make-sample
make_sample_SOURCES = make-sample.c
make_sample_CFLAGS = $(BENCH_COMMON_FLAGS)
make_sample_LDADD = $(BENCH_COMMON_LIBS) -lm
EXTRA_DIST += upload.sh make-sample.sh server-lib.sh README.md
