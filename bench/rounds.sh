# nbdstack: the order the benchmark scripts run their configurations in
# each round (source it; it only defines).
# SPDX-License-Identifier: BSD-3-Clause

# round_order N ROUND: the indexes 0..N-1, one per line, in an order
# shuffled afresh for every round (seeded by ROUND, so a rerun repeats
# it).  A plain rotation would have every configuration follow the same
# one in every round, and what an upload leaves behind (freed page cache,
# memory the host takes back) would bias the next one the same way each
# time.
round_order ()
{
  awk -v n="$1" -v seed="$2" 'BEGIN {
    srand(seed)
    for (i = 0; i < n; i++) a[i] = i
    for (i = n - 1; i > 0; i--) { j = int(rand() * (i + 1)); t = a[i]; a[i] = a[j]; a[j] = t }
    for (i = 0; i < n; i++) print a[i]
  }'
}
