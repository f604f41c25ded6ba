# Benchmarks of coalesce (bench/smallwrite.sh, bench/coalesce-qcow2.sh).
# smallwrites is the queue-depth-1 libnbd client both scripts use.
noinst_PROGRAMS += smallwrites
smallwrites_SOURCES = smallwrites.c
EXTRA_DIST += smallwrite.sh coalesce-qcow2.sh
