# Benchmarks of upload (bench/upload.sh, bench/make-sample.sh; see
# bench/README.md).  make-sample is the sample image generator; the
# script compiles it on the fly when it is not built.
noinst_PROGRAMS += make-sample
make_sample_SOURCES = make-sample.c
# Also needs libm.
make_sample_LDADD = $(LDADD) -lm
EXTRA_DIST += upload.sh make-sample.sh make-used-sample.sh write-sizes.sh \
	stack-ratios.py stack-work.sh qd1-latency.sh server-lib.sh median.sh rounds.sh README.md
