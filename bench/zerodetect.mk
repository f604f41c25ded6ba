# Benchmarks of zerodetect (and the shared is_zero routine).
#   BUILD/bench/is-zero-speed      GB/s of common/is-zero.h, 4K..32M
#   bench/zero-upload.sh           upload with zero runs, vs qemu-nbd
noinst_PROGRAMS += is-zero-speed
is_zero_speed_SOURCES = is-zero-speed.c
EXTRA_DIST += zero-upload.sh
