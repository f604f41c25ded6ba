#!/usr/bin/env bash
# Zeroes written into a qcow2 layer served without its backing file
# ("backing": null, as imageio's shallow upload serves it) must hide the
# backing file's data, as with qemu-nbd (which writes zero clusters).
# Prints, per server and per way of writing zeroes (NBD_CMD_WRITE of zero
# bytes, NBD_CMD_WRITE_ZEROES), how many of the two zeroed ranges read
# back as something else through the chain.  Found by imageio's
# qemu_img_test.py::test_compare_different_allocation (issue 19, new cause).
#   BUILD=$PWD/build bash scripts/imageio-tests/repro/zero-into-layer.sh
set -u
export PATH=/usr/bin:$PATH
B=$(cd "${BUILD:-build}" && pwd)
d=$(mktemp -d /var/tmp/zero-into-layer.XXXXXX)
trap 'rm -rf "$d"' EXIT
cd "$d"
qemu-img create -q -f raw base.raw 1M
qemu-io -f raw -c 'write -P 0xaa 0 1M' base.raw > /dev/null
qemu-img create -q -f qcow2 -b base.raw -F raw top.qcow2 1M
json='json:{"driver": "qcow2", "file": {"driver": "file", "filename": "'$d'/t.qcow2"}, "backing": null}'
for how in write zero; do
  for srv in qemu-nbd nbdstack-nbd; do
    cp top.qcow2 t.qcow2
    if [ $srv = qemu-nbd ]; then cmd=(qemu-nbd)
    else cmd=(env NBDSTACK_BUILDDIR="$B" "$B/nbd/nbdstack-nbd"); fi
    "${cmd[@]}" --persistent --socket="$d/s.sock" --cache=none \
      --discard=unmap --detect-zeroes=unmap "$json" 2> "$srv.err" &
    pid=$!
    for _ in $(seq 100); do [ -S s.sock ] && break; sleep 0.1; done
    if [ $how = write ]; then py='h.pwrite(b"\0" * 65536, 0); h.pwrite(b"\0", 524288)'
    else py='h.zero(65536, 0); h.zero(1, 524288)'; fi
    nbdsh -u "nbd+unix:///?socket=$d/s.sock" -c "$py; h.flush()"
    kill $pid; wait $pid 2> /dev/null
    bad=$(qemu-io -f qcow2 -c 'read -P 0 0 64k' -c 'read -P 0 524288 1' t.qcow2 2>&1 |
          grep -ci 'pattern verification failed')
    echo "$srv, zeroes by $how: $bad of 2 zeroed ranges show the backing file's data"
  done
done
