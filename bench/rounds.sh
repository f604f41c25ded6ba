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

# run_rounds RUNS CMD CELL...: RUNS rounds; in each, "CMD ROUND CELL"
# for every CELL (its words as arguments), in round_order's order.  (Its
# locals start with _rr_: bash lets CMD see them.)
run_rounds ()
{
  local _rr_runs=$1 _rr_cmd=$2 _rr_r _rr_k
  shift 2
  local -a _rr_cells=("$@")
  for ((_rr_r = 1; _rr_r <= _rr_runs; _rr_r++)); do
    for _rr_k in $(round_order "${#_rr_cells[@]}" "$_rr_r"); do
      # shellcheck disable=SC2086 # a cell's words are the arguments
      "$_rr_cmd" "$_rr_r" ${_rr_cells[$_rr_k]}
    done
  done
}
