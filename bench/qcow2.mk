# Benchmarks of qcow2: noinst_PROGRAMS += ..., EXTRA_DIST += ...
# read-qcow2.sh: nbdcopy of plain/zlib/zstd/extended-L2 images through
# our plugin and qemu-nbd, side by side (see the script's header).
EXTRA_DIST += read-qcow2.sh
# randwrite.sh: fio's random 4 KiB writes (nbd engine) into qcow2 through
# our plugin, builds side by side (see the script's header).
EXTRA_DIST += randwrite.sh
