#!/usr/bin/env bash
# make install puts the plugin and filters into nbdkit's plugindir and
# filterdir as .so files only (no libtool .la, as nbdkit's own packages),
# nbdstack-nbd into bindir and the man pages into man1dir; make
# uninstall removes every file again.  Into a scratch DESTDIR.
# Then scratch builds: configured without --prefix, the plugin and filter
# dirs are nbdkit's; configured with --prefix=DIR, make install
# (no DESTDIR, no root) keeps every file inside DIR, and nbdkit and
# nbdstack-nbd serve with what it installed there.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh

d=$T/inst
plugindir=$d$install_plugindir
filterdir=$d$install_filterdir
# A make run by a test must not talk to the jobserver of the make that
# runs the tests.
mk_in () { local dir=$1; shift; env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C "$dir" "$@"; }
mk () { mk_in "$abs_top_builddir" "$@"; }

mk install DESTDIR="$d" >"$T/install.log" 2>&1 ||
  { cat "$T/install.log" >&2; fail "make install failed"; }

plugins=(image)
filters=(zerodetect discard coalesce lifecycle)
for p in "${plugins[@]}"; do
  [ -f "$plugindir/nbdkit-$p-plugin.so" ] || fail "no $plugindir/nbdkit-$p-plugin.so"
done
for f in "${filters[@]}"; do
  [ -f "$filterdir/nbdkit-$f-filter.so" ] || fail "no $filterdir/nbdkit-$f-filter.so"
done
las=$(find "$plugindir" "$filterdir" -name '*.la')
[ -z "$las" ] || fail "libtool archives installed: $las"
[ -x "$d$install_bindir/nbdstack-nbd" ] || fail "no $d$install_bindir/nbdstack-nbd"
[ -f "$d$install_pkglibdir/nbdstack-alignbuf.so" ] ||
  fail "no $d$install_pkglibdir/nbdstack-alignbuf.so"
las=$(find "$d$install_pkglibdir" -name '*.la')
[ -z "$las" ] || fail "libtool archives installed: $las"
# The installed plugin loads without its .la.
"$NBDKIT" "$plugindir/nbdkit-image-plugin.so" --dump-plugin >"$T/dump" ||
  fail "nbdkit cannot load the installed plugin"
grep -q '^name=image$' "$T/dump" || fail "installed plugin: $(cat "$T/dump")"

if [ "$POD2MAN" != no ]; then
  for page in nbdstack-nbd "${plugins[@]/%/-plugin}" "${filters[@]/%/-filter}"; do
    case $page in nbdstack-*) ;; *) page=nbdkit-$page ;; esac
    [ -s "$d$install_man1dir/$page.1" ] || fail "no man page $d$install_man1dir/$page.1"
  done
fi

mk uninstall DESTDIR="$d" >"$T/uninstall.log" 2>&1 ||
  { cat "$T/uninstall.log" >&2; fail "make uninstall failed"; }
left=$(find "$d" ! -type d)
[ -z "$left" ] || fail "left after make uninstall: $left"
echo "ok: install puts .so, nbdstack-nbd and man pages, no .la; uninstall removes all"

# ---- configure without --prefix: nbdkit's own directories, so that
# `nbdkit image` finds the plugin after a (root) make install.
b=$T/dbuild
mkdir "$b"
(cd "$b" && "$abs_top_srcdir/configure") >"$T/dconf.log" 2>&1 ||
  { tail -30 "$T/dconf.log" >&2; fail "configure (no --prefix) failed"; }
# A directory as make expands it in the scratch build $b.
makevar () { printf 'show:\n\t@echo $(%s)\n' "$1" | mk_in "$b" -f Makefile -f - show; }
for kind in plugin filter; do
  want=$(pkg-config --variable=${kind}dir nbdkit)
  got=$(makevar ${kind}dir)
  [ "$got" = "$want" ] || fail "configure without --prefix: ${kind}dir is $got, not nbdkit's $want"
done
echo "ok: without --prefix, plugindir and filterdir are nbdkit's"

# ---- configure --prefix=DIR: everything goes under DIR.
prefix=$T/prefix
b=$T/pbuild
mkdir "$b"
(cd "$b" && "$abs_top_srcdir/configure" --prefix="$prefix") >"$T/pconf.log" 2>&1 ||
  { tail -30 "$T/pconf.log" >&2; fail "configure --prefix=$prefix failed"; }
# Checked before installing anything, so that a wrong default is reported
# instead of written into the system's directories.
for v in plugindir filterdir bindir mandir; do
  dir=$(makevar $v)
  case $dir in
    "$prefix"/*) ;;
    *) fail "configure --prefix=$prefix: $v is $dir, outside the prefix" ;;
  esac
done
[ "$(makevar plugindir)" = "$prefix/lib/nbdkit/plugins" ] ||
  fail "--prefix: plugindir is $(makevar plugindir), not $prefix/lib/nbdkit/plugins"
[ "$(makevar filterdir)" = "$prefix/lib/nbdkit/filters" ] ||
  fail "--prefix: filterdir is $(makevar filterdir), not $prefix/lib/nbdkit/filters"
# Only what is installed needs building (not tests/ or bench/).
for sub in common lib lib/hostfile plugins/image "${filters[@]/#/filters/}" nbd; do
  mk_in "$b/$sub" -j2 install >>"$T/pinstall.log" 2>&1 ||
    { tail -30 "$T/pinstall.log" >&2; fail "make install in $sub (--prefix) failed"; }
done
pd=$prefix/lib/nbdkit/plugins fd=$prefix/lib/nbdkit/filters
for p in "${plugins[@]}"; do
  [ -f "$pd/nbdkit-$p-plugin.so" ] || fail "--prefix: no $pd/nbdkit-$p-plugin.so"
done
for f in "${filters[@]}"; do
  [ -f "$fd/nbdkit-$f-filter.so" ] || fail "--prefix: no $fd/nbdkit-$f-filter.so"
done
las=$(find "$prefix" -name '*.la')
[ -z "$las" ] || fail "--prefix: libtool archives installed: $las"

# nbdkit serves through what was installed, loaded by path.
require nbdinfo
require_filter_version
printf 'prefix install\n' >"$T/disk.img"
truncate -s 1M "$T/disk.img"
size=$("$NBDKIT" -U - --filter="$fd/nbdkit-coalesce-filter.so" \
         --filter="$fd/nbdkit-zerodetect-filter.so" \
         --filter="$fd/nbdkit-discard-filter.so" \
         "$pd/nbdkit-image-plugin.so" file="$T/disk.img" \
         --run "nbdinfo --size \"\$uri\"") ||
  fail "nbdkit with the plugin and filters installed under --prefix failed"
[ "$size" = 1048576 ] || fail "--prefix install served size $size, not 1048576"
# nbdstack-nbd finds them (and, with --cache=none, its preload library)
# through the paths compiled in at configure time, without
# NBDSTACK_BUILDDIR.
[ -f "$prefix/lib/nbdstack/nbdstack-alignbuf.so" ] ||
  fail "--prefix: no $prefix/lib/nbdstack/nbdstack-alignbuf.so"
s=$T/prefix.sock pidf=$T/prefix.pid
env -u NBDSTACK_BUILDDIR -u NBDSTACK_OPTIONS NBDSTACK_CONFIG=/dev/null \
  "$prefix/bin/nbdstack-nbd" --fork --pid-file="$pidf" -k "$s" -f raw \
  --cache=none "$T/disk.img" \
  2>"$T/pnbd.log" || { cat "$T/pnbd.log" >&2; fail "installed nbdstack-nbd did not start"; }
on_exit "kill \$(cat '$pidf' 2>/dev/null) 2>/dev/null"
size=$(nbdinfo --size "nbd+unix:///?socket=$s") ||
  fail "cannot connect to the installed nbdstack-nbd: $(cat "$T/pnbd.log")"
[ "$size" = 1048576 ] || fail "installed nbdstack-nbd served size $size, not 1048576"
echo "ok: configure --prefix=DIR installs into DIR, and nbdkit and nbdstack-nbd serve from there"
