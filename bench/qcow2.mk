# Benchmarks of qcow2: noinst_PROGRAMS += ..., EXTRA_DIST += ...
# read-qcow2.sh: nbdcopy of plain/zlib/zstd/extended-L2 images through
# our plugin and qemu-nbd, side by side (see the script's header).
EXTRA_DIST += read-qcow2.sh
