#!/usr/bin/env bash
# make install puts the plugin and filters into nbdkit's plugindir and
# filterdir as .so files only (no libtool .la, as nbdkit's own packages),
# nbdstack-nbd into bindir and the man pages into man1dir; make
# uninstall removes every file again.  Into a scratch DESTDIR.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh

d=$T/inst
plugindir=$d$install_plugindir
filterdir=$d$install_filterdir
# A make run by a test must not talk to the jobserver of the make that
# runs the tests.
mk () { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C "$abs_top_builddir" "$@"; }

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
