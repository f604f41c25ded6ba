# nbdstack: the two kinds of middle value the benchmark tables report,
# for the bench scripts (source it; it only defines).
# SPDX-License-Identifier: BSD-3-Clause
#
# median: the middle of the sorted values; for an even count the mean
#   of the two middle ones (so it may be no measured value).
# lower_median: the middle of the sorted values; for an even count the
#   lower of the two middle ones (always one of the measured values).
# Each in two forms: awk functions taking a space-separated list, put in
# front of a program:
#   awk "$MEDIAN_AWK"'{ ... median(list) ... lower_median(list) ... }'
# and shell filters of numbers on stdin, one a line:
#   printf '%s\n' "${runs[@]}" | median

MEDIAN_AWK='
function _median_sort(list, a,   n, i, j, t) {
  n = split(list, a, " ")
  for (i = 2; i <= n; i++) {
    t = a[i] + 0
    for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j + 1] = a[j]
    a[j + 1] = t
  }
  return n
}
function median(list,   a, n) {
  n = _median_sort(list, a)
  return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function lower_median(list,   a, n) {
  n = _median_sort(list, a)
  return a[int((n + 1) / 2)]
}
'

# The values are printed with 15 significant digits (not awk's 6), so
# that a byte count or a time keeps its precision.
median ()
{
  awk -v OFMT=%.15g "$MEDIAN_AWK"'{ l = l " " $1 } END { if (NR) print median(l) }'
}

lower_median ()
{
  awk -v OFMT=%.15g "$MEDIAN_AWK"'{ l = l " " $1 } END { if (NR) print lower_median(l) }'
}
