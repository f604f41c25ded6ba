#!/usr/bin/env bash
# Every tracked .c/.h file is formatted as .clang-format says: fails on
# any change `clang-format --dry-run -Werror` would make, listing the
# files.  .clang-format is written so that clang-format 14 (Debian 12)
# and 19 (Debian 13) agree, so the check is the same on both.
# Fix with: clang-format -i FILE (or over every tracked file).
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh

require clang-format
# The file list is git's.  An unpacked tarball has no git metadata of
# its own (make distcheck unpacks it inside the build tree, which may be
# inside a checkout: that one's files are not the tarball's).
top=$(git -C "$abs_top_srcdir" rev-parse --show-toplevel 2>/dev/null) &&
  [ "$(realpath "$top")" = "$(realpath "$abs_top_srcdir")" ] ||
  skip "$abs_top_srcdir is not a git checkout"

cd "$abs_top_srcdir"
git ls-files -z -- '*.c' '*.h' >"$T/files"
[ -s "$T/files" ] || fail "git ls-files found no .c/.h file"
offenders=()
while IFS= read -r -d '' f; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 ||
    offenders+=("$f")
done <"$T/files"
if [ ${#offenders[@]} -gt 0 ]; then
  {
    echo "$(clang-format --version):"
    echo "${#offenders[@]} file(s) not formatted:"
    printf '  %s\n' "${offenders[@]}"
    echo "run: clang-format -i FILE"
  } >&2
  fail "clang-format would change ${#offenders[@]} file(s)"
fi
