# Benchmarks of zerodetect (and the shared is_zero routine).
#   BUILD/bench/is-zero-speed      GB/s of common/is-zero.h, 4K..32M
#   bench/zero-upload.sh           upload with zero runs, vs qemu-nbd
noinst_PROGRAMS += is-zero-speed
is_zero_speed_SOURCES = is-zero-speed.c
is_zero_speed_CFLAGS = $(WARNINGS_CFLAGS) -I$(top_srcdir)/common
EXTRA_DIST += zero-upload.sh
