#!/usr/bin/env bash
# image plugin: create=true size=SIZE makes a sparse file, keeps an
# existing one of that size, refuses one of another size; create=force
# replaces it.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh

f=$T/new.img

# Missing file: created sparse, served at the requested size.
nbdkit -U - "$IMAGE_PLUGIN" file="$f" create=true size=10M \
  --run 'nbdinfo --size "$uri"' >"$T/size"
[ "$(cat "$T/size")" -eq $((10 * 1024 * 1024)) ] || fail "export size $(cat "$T/size")"
[ "$(stat -c %s "$f")" -eq $((10 * 1024 * 1024)) ] || fail "file size"
[ "$(stat -c %b "$f")" -eq 0 ] || fail "created file is not sparse"

# Write something, then create=true again: same size, so it is served
# as is (data kept).
nbdkit -U - "$IMAGE_PLUGIN" file="$f" create=true size=10M --run '
  nbdsh -u "$uri" -c "h.pwrite(b\"hello\" * 100, 4096)"'
nbdkit -U - "$IMAGE_PLUGIN" file="$f" create=true size=10M --run '
  nbdsh -u "$uri" -c "assert h.pread(500, 4096) == b\"hello\" * 100"' ||
  fail "create=true on an existing file of the same size lost its data"

# Another size: refused, file untouched.
expect_error "$f: already exists with a different size \(use create=force to replace it\)" \
  nbdkit -U - "$IMAGE_PLUGIN" file="$f" create=true size=20M --run true
[ "$(stat -c %s "$f")" -eq $((10 * 1024 * 1024)) ] || fail "refused create changed the file"

# create=force: replaced by an empty sparse file of the new size.
nbdkit -U - "$IMAGE_PLUGIN" file="$f" create=force size=5M --run '
  nbdsh -u "$uri" -c "
assert h.get_size() == 5 * 1024 * 1024
assert h.pread(500, 4096) == bytes(500)
"' || fail "create=force did not replace the file"
[ "$(stat -c %b "$f")" -eq 0 ] || fail "create=force file is not sparse"

# Sizes that are not a multiple of 512 work too (the raw format serves
# any size).
nbdkit -U - "$IMAGE_PLUGIN" file="$T/odd.img" create=true size=1001 --run '
  nbdsh -u "$uri" -c "
assert h.get_size() == 1001
h.pwrite(b\"x\" * 11, 990)
assert h.pread(11, 990) == b\"x\" * 11
"' || fail "odd-sized create"
