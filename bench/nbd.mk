# nbdstack-nbd against qemu-nbd with identical command lines
# (bench/nbd-vs-qemu-nbd.sh; see bench/README.md).
EXTRA_DIST += nbd-vs-qemu-nbd.sh
