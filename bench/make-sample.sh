#!/usr/bin/env bash
# Write a deterministic, realistic sample disk image (raw, sparse):
# incompressible data in scattered extents of 64 KiB..64 MiB, allocated
# zero-filled runs, and holes everywhere else.  Prints its layout.
#
#   bench/make-sample.sh OUTPUT
#
# Environment (all optional):
#   SIZE=4G        virtual size (K/M/G/T suffixes are powers of 1024)
#   DATA_PCT=25    percent of SIZE that is random data
#   ZERO_PCT=4     percent of SIZE that is allocated zeroes
#   SEED=1         same SEED and sizes => byte-identical image
#   BUILD=./build  build dir holding bench/make-sample (the C generator);
#                  if it is not built there, it is compiled on the fly.
#
# SPDX-License-Identifier: BSD-3-Clause
set -euo pipefail
PATH=/usr/bin:/usr/sbin:/bin:/sbin:$PATH
export LC_ALL=C

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)

die () { echo "make-sample: $*" >&2; exit 1; }

[ $# -eq 1 ] || die "usage: [SIZE=4G] [DATA_PCT=25] [ZERO_PCT=4] [SEED=1] $0 OUTPUT"
output=$1
size=${SIZE:-4G}
data_pct=${DATA_PCT:-25}
zero_pct=${ZERO_PCT:-4}
seed=${SEED:-1}
build=${BUILD:-$top/build}

bytes=$(numfmt --from=iec "$size" 2>/dev/null) || die "SIZE=$size: not a size (e.g. 512M, 4G)"
[[ $data_pct =~ ^[0-9]+(\.[0-9])?$ ]] || die "DATA_PCT=$data_pct: expected a percentage"
[[ $zero_pct =~ ^[0-9]+(\.[0-9])?$ ]] || die "ZERO_PCT=$zero_pct: expected a percentage"
[[ $seed =~ ^[0-9]+$ ]] || die "SEED=$seed: expected a non-negative integer"
data_pm=$(awk -v p="$data_pct" 'BEGIN { printf "%d", p * 10 }')
zero_pm=$(awk -v p="$zero_pct" 'BEGIN { printf "%d", p * 10 }')

# The generator: the built one, else compile it privately (needs cc only).
gen=$build/bench/make-sample
tmp=
cleanup () { [ -z "$tmp" ] || rm -rf "$tmp"; }
trap cleanup EXIT
if [ ! -x "$gen" ] || [ "$here/make-sample.c" -nt "$gen" ]; then
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/make-sample.XXXXXX")
  cc -O2 -std=gnu11 -Wall -o "$tmp/make-sample" "$here/make-sample.c" -lm ||
    die "cannot compile $here/make-sample.c (is gcc installed?)"
  gen=$tmp/make-sample
fi

# Room for the allocated part (data + zeroes), with 10% to spare.
dir=$(dirname "$output")
[ -d "$dir" ] || die "$dir: no such directory"
need_k=$(( bytes / 1024 * (data_pm + zero_pm) / 1000 * 11 / 10 ))
avail_k=$(df -Pk "$dir" | awk 'NR == 2 { print $4 }')
[ "$avail_k" -ge "$need_k" ] ||
  die "$dir: needs $((need_k / 1024)) MiB free, has $((avail_k / 1024)) MiB"

"$gen" "$output" "$bytes" "$data_pm" "$zero_pm" "$seed"
