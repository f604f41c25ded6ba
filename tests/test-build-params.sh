#!/usr/bin/env bash
# Every parameter in a component's list (<component>-params.h, see
# common/param-table.h) is documented: named by an =item of the
# component's man page and in the component's synopsis in README.md.
# nbdstack-nbd's --help lists every PARAM_SETTING parameter as a
# setting, and its man page has an =item for every setting it lists.
# Every missing key is reported, then the test fails.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh

list=$("$abs_top_builddir/tests/params-list") || fail "params-list failed"
[ -n "$list" ] || fail "params-list printed nothing"
readme=$abs_top_srcdir/README.md
missing=()

# The man page of a component.
pod_of ()
{
  case $1 in
    image) echo "$abs_top_srcdir/plugins/image/nbdkit-image-plugin.pod" ;;
    *) echo "$abs_top_srcdir/filters/$1/nbdkit-$1-filter.pod" ;;
  esac
}

# The README's synopsis of a component: the indented block that follows
# its "### The NAME plugin|filter" heading.
synopsis_of ()
{
  awk -v h="### The $1 " '
    index($0, h) == 1 { on = 1; next }
    on && /^    / { seen = 1; print; next }
    on && /^$/ { next }
    on { exit }
  ' "$readme"
}

# KEY= in TEXT, not as the tail of a longer key (discard= in
# discard-max= does not count).
names_key () # KEY TEXT
{
  grep -qE "(^|[^a-z0-9-])$1=" <<<"$2"
}

while read -r component key flag; do
  pod=$(pod_of "$component")
  [ -f "$pod" ] || fail "$component: no man page $pod"
  grep -E '^=item ' "$pod" | grep -qF "B<$key=" ||
    missing+=("$component: $key: no =item B<$key=...> in ${pod#"$abs_top_srcdir"/}")
  synopsis=$(synopsis_of "$component")
  names_key "$key" "$synopsis" ||
    missing+=("$component: $key: not in the README synopsis (under '### The $component ...')")
done <<<"$list"

# nbdstack-nbd: the settings --help lists (the "  key=..." lines after
# the config file line) are every PARAM_SETTING parameter, and each has
# an =item in the man page.
help=$("$abs_top_builddir/nbd/nbdstack-nbd" --help) || fail "nbdstack-nbd --help failed"
settings=$(sed -n '/NBDSTACK_CONFIG/,$p' <<<"$help" | sed -n 's/^  \([a-z0-9-]*\)=.*/\1/p')
[ -n "$settings" ] || fail "nbdstack-nbd --help lists no settings"
while read -r component key flag; do
  [ "$flag" = setting ] || continue
  grep -qxF -- "$key" <<<"$settings" ||
    missing+=("nbdstack-nbd: $component's $key is PARAM_SETTING but not a setting in --help")
done <<<"$list"
nbdpod=$abs_top_srcdir/nbd/nbdstack-nbd.pod
for key in $settings; do
  grep -E '^=item ' "$nbdpod" | grep -qE "B<$key(=|>)" ||
    missing+=("nbdstack-nbd: setting $key: no =item B<$key> in nbd/nbdstack-nbd.pod")
done

if [ ${#missing[@]} -gt 0 ]; then
  printf 'undocumented: %s\n' "${missing[@]}" >&2
  fail "${#missing[@]} parameters are not documented where they should be"
fi
echo "$(wc -l <<<"$list") parameters and $(wc -w <<<"$settings") settings documented"
