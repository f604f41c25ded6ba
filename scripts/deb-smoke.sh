#!/usr/bin/env bash
# Build nbdstack's Debian packages from this checkout and check them as
# installed packages.  It installs and purges packages, so run it only on
# a system of its own: a fresh Debian 12 or 13 chroot, as root, e.g.
#   ../shared/tools/fresh-debian.sh $PWD 'bash scripts/deb-smoke.sh'
#   SUITE=trixie ../shared/tools/fresh-debian.sh $PWD 'bash scripts/deb-smoke.sh'
#
#   scripts/deb-smoke.sh            build the packages, then check them
#   scripts/deb-smoke.sh DEB...     check packages built before
#
# Building: the build dependencies come from debian/control
# (apt-get build-dep), the packages from dpkg-buildpackage -us -uc -b with
# the caller's DEB_BUILD_OPTIONS (nocheck skips make check), as
# DEB_SMOKE_USER if set (created if missing: a build as a user, as on a
# buildd) or else as root; lintian then checks them.  Everything the build
# installed is purged again, so that the check starts from the base system.
# Checking: apt-get installs the .debs (with their dependencies from the
# archive) and qemu-utils, then
#   - nbdkit image --dump-plugin names the plugin;
#   - an upload with qemu-img convert -n through
#     nbdkit --filter=coalesce --filter=zerodetect --filter=discard image
#     into a raw and a qcow2 target, each checked with qemu-img compare;
#   - nbdstack-nbd --version, and a read through nbdstack-nbd with
#     --cache=none (which preloads the packaged nbdstack-alignbuf.so
#     into nbdkit) compared;
#   - purging the packages leaves nbdkit's plugindir and filterdir as they
#     were before the install.
# The last line is "deb-smoke: ok ..." or the script exits non-zero.
# SPDX-License-Identifier: BSD-3-Clause
set -euo pipefail
export PATH=/usr/bin:/usr/sbin:/bin:/sbin:$PATH DEBIAN_FRONTEND=noninteractive
top=$(cd "$(dirname "$0")/.." && pwd)
say () { echo "deb-smoke: $*"; }
die () { echo "deb-smoke: FAIL: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "run as root, on a system of its own (it installs and purges packages)"
. /etc/os-release
say "Debian $VERSION_ID ($VERSION_CODENAME)"

work=/var/tmp/deb-smoke
rm -rf "$work"
mkdir -p "$work"
installed () { dpkg-query -W -f='${db:Status-Abbrev} ${binary:Package}\n' | awk '$1 == "ii" {print $2}' | sort; }

debs=("$@")
if [ ${#debs[@]} -eq 0 ]; then
  installed >"$work/base.list"
  apt-get update -qq
  apt-get build-dep -y -qq "$top" >"$work/build-dep.log" 2>&1 ||
    { tail -30 "$work/build-dep.log"; die "apt-get build-dep failed"; }
  apt-get install -y -qq --no-install-recommends lintian >>"$work/build-dep.log" 2>&1 ||
    die "cannot install lintian"
  # A copy, so that the build (and its user) writes nowhere else; the
  # .debs land in $work.
  git -C "$top" archive --format=tar --prefix=src/ HEAD | tar -C "$work" -xf -
  run=()
  if [ -n "${DEB_SMOKE_USER:-}" ]; then
    id "$DEB_SMOKE_USER" >/dev/null 2>&1 || useradd -m "$DEB_SMOKE_USER"
    # fresh-debian.sh's chroot is a private (0700) directory: a user could
    # not even reach /usr/bin in it.
    if [ $(($(stat -c %#a /) & 1)) -eq 0 ]; then
      say "chmod o+x / (the chroot's root is not searchable by users)"
      chmod o+x /
    fi
    chown -R "$DEB_SMOKE_USER:" "$work"
    run=(runuser -u "$DEB_SMOKE_USER" -- env HOME="$(getent passwd "$DEB_SMOKE_USER" | cut -d: -f6)")
  fi
  say "dpkg-buildpackage -us -uc -b as ${DEB_SMOKE_USER:-root}, DEB_BUILD_OPTIONS='${DEB_BUILD_OPTIONS:-}'"
  start=$(date +%s)
  (cd "$work/src" && "${run[@]}" env DEB_BUILD_OPTIONS="${DEB_BUILD_OPTIONS:-}" \
     dpkg-buildpackage -us -uc -b) >"$work/build.log" 2>&1 ||
    { tail -80 "$work/build.log"; die "dpkg-buildpackage failed (log: $work/build.log)"; }
  say "built in $(($(date +%s) - start)) s"
  # make check's summary and its skipped tests, when it ran.
  if grep -q '^# TOTAL:' "$work/build.log"; then
    grep -E '^# (TOTAL|PASS|SKIP|XFAIL|FAIL|XPASS|ERROR):' "$work/build.log" | sed 's/^/deb-smoke: make check /'
    # Each skipped test with the reason it gave (its log stays in the tree).
    for log in $(grep -lE '^SKIP: ' "$work"/src/debian/build/tests/test-*.log 2>/dev/null); do
      say "  SKIP $(basename "$log" .log): $(grep -m1 -E '^SKIP: ' "$log" | cut -c7-)"
    done
  else
    say "make check did not run (nocheck)"
  fi
  (cd "$work" && "${run[@]}" lintian -I --pedantic nbdstack_*.changes) >"$work/lintian.log" 2>&1 || true
  say "lintian $(lintian --version):"
  grep -v '^running with root' "$work/lintian.log" | sed 's/^/deb-smoke:   /' || true
  ! grep -q '^E: ' "$work/lintian.log" || die "lintian reports errors"
  debs=("$work"/*.deb)
  # Back to the base system before installing.
  installed >"$work/build.list"
  comm -13 "$work/base.list" "$work/build.list" >"$work/added.list"
  # Marked automatic and autoremoved, not purged by name: on Debian 13
  # purging the list by name would take an essential package with it;
  # autoremove keeps whatever the base system still needs.
  if [ -s "$work/added.list" ]; then
    { xargs apt-mark auto <"$work/added.list" &&
      apt-get autoremove --purge -y -qq -o APT::AutoRemove::RecommendsImportant=false \
        -o APT::AutoRemove::SuggestsImportant=false; } >"$work/purge-build-deps.log" 2>&1 ||
      { tail -20 "$work/purge-build-deps.log"; die "cannot remove the build dependencies"; }
    say "build dependencies removed: $(installed | comm -13 "$work/base.list" - | wc -l) packages left beyond the base system"
  fi
fi

for d in "${debs[@]}"; do
  case $d in *-dbgsym_*) continue ;; esac
  pkgs+=("$(dpkg-deb -f "$d" Package)")
  files+=("$(readlink -f "$d")")
  say "$(basename "$d"): Depends: $(dpkg-deb -f "$d" Depends)"
done
[ ${#pkgs[@]} -eq 3 ] || die "expected 3 packages, got: ${pkgs[*]}"

# nbdkit first, to know what its directories hold without us.
apt-get install -y -qq --no-install-recommends nbdkit qemu-utils >"$work/install.log" 2>&1 ||
  { tail -20 "$work/install.log"; die "cannot install nbdkit and qemu-utils"; }
plugindir=/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)/nbdkit/plugins
[ -d "$plugindir" ] || plugindir=$(dirname "$(dpkg -L nbdkit | grep -m1 '/nbdkit/plugins/')")
filterdir=$(dirname "$plugindir")/filters
say "nbdkit $(nbdkit --version | awk '{print $2}') ($(dpkg-query -W -f='${Version}' nbdkit)), plugindir $plugindir"
ls -A "$plugindir" "$filterdir" >"$work/dirs.before"

apt-get install -y -qq --no-install-recommends "${files[@]}" >>"$work/install.log" 2>&1 ||
  { tail -20 "$work/install.log"; die "apt-get install of the packages failed"; }
say "installed: ${pkgs[*]}"

nbdkit image --dump-plugin >"$work/dump" || die "nbdkit image --dump-plugin failed"
grep -q '^name=image$' "$work/dump" || die "nbdkit image --dump-plugin: $(head -3 "$work/dump")"
say "nbdkit image --dump-plugin: $(grep -E '^(path|name|version)=' "$work/dump" | tr '\n' ' ')"

# A 64 MiB sample: random data, zero runs and holes.
cd "$work"
truncate -s 64M src.raw
for off in 0 5 17 30 31 50 63; do
  head -c 1M /dev/urandom | dd of=src.raw bs=1M seek=$off conv=notrunc status=none
done
dd if=/dev/zero of=src.raw bs=1M seek=40 count=4 conv=notrunc status=none
stack=(--filter=coalesce --filter=zerodetect --filter=discard)
for fmt in raw qcow2; do
  rm -f "target.$fmt"
  nbdkit -U - "${stack[@]}" image file="target.$fmt" format=$fmt create=true size=64M \
    --run 'qemu-img convert -n -W -f raw src.raw "$uri"' ||
    die "upload through nbdkit ${stack[*]} image ($fmt) failed"
  qemu-img compare -q -f raw -F "$fmt" src.raw "target.$fmt" ||
    die "$fmt target differs from the source"
  say "qemu-img convert -n -W through ${stack[*]} image format=$fmt: identical"
done
qemu-img check -q target.qcow2 || die "qemu-img check target.qcow2 failed"

v=$(nbdstack-nbd --version) || die "nbdstack-nbd --version failed"
say "nbdstack-nbd --version: $(echo "$v" | head -1)"
nbdstack-nbd --fork --pid-file="$work/nbd.pid" -k "$work/nbd.sock" -f qcow2 -r --cache=none target.qcow2 \
  2>"$work/nbd.log" || die "nbdstack-nbd did not start: $(cat "$work/nbd.log")"
qemu-img compare -q -f raw src.raw "nbd+unix:///?socket=$work/nbd.sock" ||
  { kill "$(cat "$work/nbd.pid")" 2>/dev/null; die "nbdstack-nbd serves other data than the source"; }
kill "$(cat "$work/nbd.pid")" 2>/dev/null || true
say "nbdstack-nbd -f qcow2 -r --cache=none target.qcow2: identical to the source"

apt-get purge -y -qq "${pkgs[@]}" >"$work/purge.log" 2>&1 ||
  { tail -20 "$work/purge.log"; die "apt-get purge failed"; }
ls -A "$plugindir" "$filterdir" >"$work/dirs.after"
diff "$work/dirs.before" "$work/dirs.after" >"$work/dirs.diff" ||
  die "purge left in plugindir/filterdir: $(cat "$work/dirs.diff")"
left=$(dpkg-query -W -f='${db:Status-Abbrev} ${binary:Package}\n' "${pkgs[@]}" 2>/dev/null | grep -v '^un' || true)
[ -z "$left" ] || die "still known to dpkg after purge: $left"
say "purged: plugindir and filterdir as before the install"
say "ok on Debian $VERSION_ID: build, install, serve, purge"
