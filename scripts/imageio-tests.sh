#!/usr/bin/env bash
# Run ovirt-imageio's own tests that start qemu-nbd, against qemu-nbd or
# against nbdstack-nbd in its place (issue 19).  A manual script, not part
# of make check: imageio's source is not in this repository or in CI.
#
#   IMAGEIO_SRC=/var/tmp/imageio-src QEMU_NBD=qemu-nbd bash scripts/imageio-tests.sh
#   IMAGEIO_SRC=/var/tmp/imageio-src QEMU_NBD=nbdstack-nbd BUILD=$PWD/build \
#       bash scripts/imageio-tests.sh [TEST_FILE...]
#
# IMAGEIO_SRC  a checkout of https://github.com/oVirt/ovirt-imageio (its C
#              extension ioutil is built in place if missing).
# QEMU_NBD     qemu-nbd (the system's) or nbdstack-nbd.
# BUILD        an nbdstack build tree (with QEMU_NBD=nbdstack-nbd): a shim
#              directory gets a `qemu-nbd` that execs $BUILD/nbd/nbdstack-nbd
#              with NBDSTACK_BUILDDIR=$BUILD; imageio runs $QEMU_NBD, which is
#              set to the shim, and the shim is also first in PATH.
# KEEP_TMP=1   keep pytest's temporary directories (/var/tmp/iot.XXXXXX/N
#              for the Nth test file); removed at exit otherwise.
# OUT          results (default /var/tmp/imageio-tests-results/LABEL): per
#              test file FILE.xml (junit) and FILE.log (pytest -v output,
#              with imageio's debug log of failures), summary.txt,
#              failures.txt (one failing test a line, with its message),
#              leftovers.txt.
# LABEL        names the run (default: QEMU_NBD, or nbdstack-nbd-BUILDNAME).
# IMAGEIO_STORAGE  loop (default: real loop devices, ext2/ext4/xfs mounts,
#              512 and 4096-byte sectors, as imageio's storage.py asks) or
#              files (plain directories; block backends then xfail).
#
# Needs root (losetup, mkfs, mount) and Debian's python3-pytest,
# python3-pytest-timeout, python3-libnbd, python3-dev, qemu-utils, qemu-system-x86,
# xfsprogs, openssl.  The `userstorage` package imageio's tests import is
# replaced by scripts/imageio-tests/userstorage.py, and
# scripts/imageio-tests/imageio_compat.py (a pytest plugin) lets
# test/distro.py work without /etc/redhat-release.  The storage it
# creates under /var/tmp/imageio-storage is removed at exit.
#
# After each test file, processes still running whose command line names
# that file's temporary directory (a server left behind) are listed in
# leftovers.txt and killed.  Exit status: 0 if every test passed or was
# skipped/xfailed, 1 otherwise.

set -u
set -o pipefail

: "${IMAGEIO_SRC:?IMAGEIO_SRC must name an ovirt-imageio checkout}"
QEMU_NBD=${QEMU_NBD:-qemu-nbd}
here=$(cd "$(dirname "$0")" && pwd)
export PATH=/usr/bin:/usr/sbin:/bin:/sbin:$PATH   # Debian's python3 (nbd module)

case "$QEMU_NBD" in
qemu-nbd)
    qemu_nbd=$(command -v qemu-nbd) || { echo "$0: no qemu-nbd" >&2; exit 1; }
    LABEL=${LABEL:-qemu-nbd}
    ;;
nbdstack-nbd)
    : "${BUILD:?BUILD must name an nbdstack build tree}"
    BUILD=$(cd "$BUILD" && pwd)
    [ -x "$BUILD/nbd/nbdstack-nbd" ] || {
        echo "$0: $BUILD/nbd/nbdstack-nbd not built" >&2; exit 1; }
    LABEL=${LABEL:-nbdstack-nbd-$(basename "$(dirname "$BUILD")")-$(basename "$BUILD")}
    ;;
*)
    echo "$0: QEMU_NBD must be qemu-nbd or nbdstack-nbd" >&2; exit 1 ;;
esac

OUT=${OUT:-/var/tmp/imageio-tests-results/$LABEL}
rm -rf "$OUT"
mkdir -p "$OUT"
# pytest's temporary directories hold unix sockets: keep their paths as
# short as imageio's own (/var/tmp/imageio-tests/...), as sun_path has
# 108 bytes and some tests fail with "AF_UNIX path too long" otherwise.
tmp=$(mktemp -d /var/tmp/iot.XXXXXX) || exit 1

if [ "$QEMU_NBD" = nbdstack-nbd ]; then
    mkdir -p "$OUT/shim"
    cat > "$OUT/shim/qemu-nbd" <<SHIM
#!/bin/sh
NBDSTACK_BUILDDIR='$BUILD' exec '$BUILD/nbd/nbdstack-nbd' "\$@"
SHIM
    chmod +x "$OUT/shim/qemu-nbd"
    export PATH=$OUT/shim:$PATH
    qemu_nbd=$OUT/shim/qemu-nbd
fi
export QEMU_NBD=$qemu_nbd
# backup_test.py runs a VM; imageio's default qemu-kvm is not in Debian.
export QEMU=${QEMU:-qemu-system-x86_64}

files=("$@")
if [ ${#files[@]} -eq 0 ]; then
    files=(test/nbd_test.py test/qemu_nbd_test.py test/backends/nbd_test.py
           test/backends_test.py test/client_test.py test/client_io_test.py
           test/backup_test.py test/handlers/checksum_test.py
           test/qemu_img_test.py)
fi

cd "$IMAGEIO_SRC" || exit 1
if ! ls ovirt_imageio/_internal/ioutil*.so >/dev/null 2>&1; then
    python3 setup.py build_ext --build-lib . > "$OUT/build_ext.log" 2>&1 || {
        echo "$0: building imageio's ioutil failed, see $OUT/build_ext.log" >&2
        exit 1; }
fi

export PYTHONPATH=$here/imageio-tests${PYTHONPATH:+:$PYTHONPATH}
cleanup () {
    python3 -m userstorage delete storage.py > "$OUT/storage-delete.log" 2>&1
    [ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
python3 -m userstorage delete storage.py > /dev/null 2>&1
python3 -m userstorage create storage.py > "$OUT/storage-create.log" 2>&1 || {
    echo "$0: creating storage failed, see $OUT/storage-create.log" >&2; exit 1; }

{
    echo "imageio $(git -C "$IMAGEIO_SRC" rev-parse --short HEAD 2>/dev/null || echo '(no git)')" \
         "with QEMU_NBD=$QEMU_NBD"
    "$QEMU_NBD" --version | head -1
    echo "started $(date -u +%FT%TZ)"
} > "$OUT/header.txt"
cat "$OUT/header.txt"

: > "$OUT/leftovers.txt"
i=0
for f in "${files[@]}"; do
    name=${f#test/}; name=${name%.py}; name=${name//\//-}
    base=$tmp/$((i++))
    echo "running $f ..."
    # imageio's tox.ini gives each test 30 s; with the signal method a test
    # that times out fails alone instead of ending the whole file.
    python3 -m pytest -v -p no:cacheprovider -p imageio_compat -o timeout=30 -o timeout_method=signal \
        --basetemp="$base" --junitxml="$OUT/$name.xml" "$f" \
        > "$OUT/$name.log" 2>&1
    # Servers left behind by this file's tests.
    for p in $(pgrep -f -- "$base" || true); do
        [ "$p" = $$ ] && continue
        cmd=$(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null) || continue
        echo "$name: pid $p: $cmd" >> "$OUT/leftovers.txt"
        kill -KILL "$p" 2>/dev/null
    done
done

python3 - "$OUT" "${files[@]}" <<'PY' | tee "$OUT/summary.txt"
import os, sys, xml.etree.ElementTree as ET
out, files = sys.argv[1], sys.argv[2:]
tot = [0] * 6
fails = []
print("%-31s %6s %6s %6s %6s %6s %6s" %
      ("file", "tests", "passed", "failed", "errors", "skipped", "xfail"))
for f in files:
    name = f[len("test/"):-len(".py")].replace("/", "-")
    try:
        root = ET.parse(os.path.join(out, name + ".xml")).getroot()
    except (OSError, ET.ParseError):
        print("%-31s  no results (see %s.log)" % (f, name))
        fails.append(f + " (no results)")
        continue
    c = [0] * 6
    for tc in root.iter("testcase"):
        tid = "%s::%s" % (tc.get("classname"), tc.get("name"))
        kinds = [ch.tag for ch in tc]
        why = [" ".join((ch.get("message") or "").split())[:200]
               for ch in tc if ch.tag in ("failure", "error")]
        c[0] += 1
        if "failure" in kinds:
            c[2] += 1
            fails.append("FAILED %s | %s" % (tid, why[0]))
        elif "error" in kinds:
            c[3] += 1
            fails.append("ERROR %s | %s" % (tid, why[0]))
        elif "skipped" in kinds:
            sk = tc.find("skipped")
            if "xfail" in (sk.get("type") or "") + (sk.get("message") or ""):
                c[5] += 1
            else:
                c[4] += 1
        else:
            c[1] += 1
    tot = [a + b for a, b in zip(tot, c)]
    print("%-31s %6d %6d %6d %6d %6d %6d" % (f, *c))
print("%-31s %6d %6d %6d %6d %6d %6d" % ("total", *tot))
with open(os.path.join(out, "failures.txt"), "w") as fp:
    fp.write("".join(x + "\n" for x in fails))
sys.exit(1 if tot[2] or tot[3] or any("no results" in x for x in fails) else 0)
PY
rc=$?
if [ -s "$OUT/leftovers.txt" ]; then
    echo "processes left behind (killed): $(wc -l < "$OUT/leftovers.txt"), see $OUT/leftovers.txt"
fi
echo "results in $OUT"
exit $rc
