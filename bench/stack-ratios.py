#!/usr/bin/python3
# nbdstack: the issue-21 table, full stack against the plugin alone, from
# bench/upload.sh's raw per-run records (RESULTS=FILE; Debian python3,
# standard library only).
#
#   bench/stack-ratios.py [--pair ALONE STACK]
#                         [--cpu=server|machine|client|per-client] [--ci]
#                         RESULTS.tsv [RESULTS.tsv...]
#
# One row per (format, cache mode, client) cell that has both targets
# (image[:qcow2] and image+filters[:qcow2], or the two --pair names,
# to which :qcow2 is added for the qcow2 rows).  --pair image image-base
# with upload.sh's BASE_BUILD set to BUILD itself compares the plugin
# alone with the very same plugin: an A/A run, whose "misses" are the
# noise the targets have to be read against.
#   alone, stack   median wall seconds / median server CPU seconds
#   median ratio   stack median / alone median (wall, CPU): the targets,
#                  <= 1.05 wall and <= 1.15 CPU; `**` marks a miss
#   min ratio      stack fastest / alone fastest: on this VM the noise
#                  only ever adds time (host faults, a slow disk phase),
#                  so the fastest run is the closest to the work itself
#   round ratios   stack / alone within each round (upload.sh runs every
#                  configuration once per round, shuffled), so a slow
#                  phase of the machine hits both: lowest, median and
#                  highest of the wall ratios
#   round median   the median of those per-round ratios, wall / CPU: the
#                  machine's drift over a run (writeback uploads that
#                  used 1 s of CPU early in a run and 3 s late) cancels
#                  within a round; `**` marks a miss of the targets
# --cpu=machine reads "CPU" as the CPU the whole VM was busy during the
# upload less the client's own (upload.sh's 11th and 12th columns): the
# server's plus the kernel's work for it in other threads, the page-cache
# writeback that the flusher does before a flush or the flush after it.
# Runs recorded before those columns existed are left out then.
# --cpu=client reads "CPU" as the client's own CPU seconds (12th column),
# --cpu=per-client as the server's CPU over the client's.  The client
# does the same work whichever server it talks to (qemu-img convert and
# bench/imageio-client send the same requests), so its CPU time is a
# reading of how fast the machine was during that upload (host load
# that /proc/stat's steal does not show): in the cache=none runs of
# 2026-12-07 the per-round server and client CPU ratios correlated at
# 0.7 or more in 12 of 16 cells.  Server over client takes that out.
# Where the server changes the client's work (nbdcopy, whose CPU falls
# when the stack answers sooner: client ratio 0.86-0.90), --cpu=client
# shows it, and
# per-client is not a fair reading there.
# --ci adds a table of 95% intervals: the rounds in which both targets
# ran are resampled with replacement (10000 times, a fixed seed) and the
# ratio of medians taken each time; the 2.5th and 97.5th percentiles
# bound it.  "over" when the interval lies above a target (wall or CPU),
# "within" when it lies at or below both, else "open": these rounds
# cannot tell.  Bootstrap intervals from 5-7 rounds are rough (too
# narrow if anything), so an A/A pair run the same way is the check.
# SPDX-License-Identifier: BSD-3-Clause

import collections
import random
import statistics
import sys

CPU_KINDS = ("server", "machine", "client", "per-client")
WALL_TARGET = 1.05
CPU_TARGET = 1.15


def load(paths, cpu_kind="server"):
    """(target, mode, client) -> {run: (wall, cpu)}; later files add runs."""
    cells = collections.defaultdict(dict)
    for path in paths:
        with open(path) as f:
            for line in f:
                fields = line.rstrip("\n").split("\t")
                if len(fields) < 6 or fields[0] in ("target", "local"):
                    continue
                try:
                    wall, cpu = float(fields[4]), float(fields[5])
                    if cpu_kind == "machine":
                        cpu = float(fields[10]) - float(fields[11])
                    elif cpu_kind == "client":
                        cpu = float(fields[11])
                    elif cpu_kind == "per-client":
                        cpu = cpu / float(fields[11])
                except (ValueError, IndexError, ZeroDivisionError):
                    continue
                key = (fields[0], fields[1], fields[2])
                run = (path, fields[3])
                cells[key][run] = (wall, cpu)
    return cells


def fmt_pair(a, b):
    return f"{a:.2f} / {b:.2f}"


def interval(pairs, idx, rng, n=10000):
    """95% bootstrap interval of median(stack) / median(alone) over pairs."""
    stats = []
    for _ in range(n):
        sample = [rng.choice(pairs) for _ in pairs]
        stats.append(statistics.median(s[idx] for a, s in sample)
                     / statistics.median(a[idx] for a, s in sample))
    stats.sort()
    return stats[int(0.025 * n)], stats[int(0.975 * n) - 1]


def cell_pairs(cells, rows, alone_name, stack_name):
    """(format, mode, client, alone runs, stack runs) of each row that has both."""
    for fmt, mode, client in rows:
        sfx = "" if fmt == "raw" else ":" + fmt
        alone = cells.get((alone_name + sfx, mode, client))
        stack = cells.get((stack_name + sfx, mode, client))
        if alone and stack:
            yield fmt, mode, client, alone, stack


def intervals(cells, rows, alone_name, stack_name):
    rng = random.Random(21)
    print("\n| format | mode | client | rounds | wall ratio, 95% | CPU ratio, 95% | verdict |")
    print("|---|---|---|---:|---:|---:|---|")
    verdicts = collections.Counter()
    for fmt, mode, client, alone, stack in cell_pairs(cells, rows, alone_name, stack_name):
        pairs = [(alone[r], stack[r]) for r in stack if r in alone and alone[r][1] > 0]
        if len(pairs) < 3:
            continue
        wlo, whi = interval(pairs, 0, rng)
        clo, chi = interval(pairs, 1, rng)
        if wlo > WALL_TARGET or clo > CPU_TARGET:
            verdict = "over"
        elif whi <= WALL_TARGET and chi <= CPU_TARGET:
            verdict = "within"
        else:
            verdict = "open"
        verdicts[verdict] += 1
        print(f"| {fmt} | {mode} | {client} | {len(pairs)} | {wlo:.2f}-{whi:.2f} "
              f"| {clo:.2f}-{chi:.2f} | {verdict} |")
    print(f"\n{verdicts['over']} cell(s) over a target, {verdicts['within']} within both,"
          f" {verdicts['open']} open (95% bootstrap intervals), of {stack_name} over {alone_name}")


def main(paths, alone_name="image", stack_name="image+filters", cpu_kind="server",
         with_ci=False):
    cells = load(paths, cpu_kind)
    title = {"machine": "the whole VM's busy time during each upload less the client's",
             "client": "the client's own CPU seconds",
             "per-client": "the server's CPU seconds per CPU second of the client"}
    if cpu_kind in title:
        print(f"CPU: {title[cpu_kind]}\n")
    rows = sorted({(t.partition(":")[2] or "raw", m, c)
                   for (t, m, c) in cells if t.startswith("image")})
    print("| format | mode | client | n | alone wall / CPU | stack wall / CPU "
          "| median ratio | min ratio | round wall ratios (low, median, high) "
          "| round median |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    misses = round_misses = 0
    for fmt, mode, client, alone, stack in cell_pairs(cells, rows, alone_name, stack_name):
        aw = [v[0] for v in alone.values()]
        ac = [v[1] for v in alone.values()]
        sw = [v[0] for v in stack.values()]
        sc = [v[1] for v in stack.values()]
        mw = statistics.median(sw) / statistics.median(aw)
        mc = statistics.median(sc) / statistics.median(ac)
        miss = mw > WALL_TARGET or mc > CPU_TARGET
        misses += miss
        paired = sorted(stack[r][0] / alone[r][0] for r in stack if r in alone)
        paired_cpu = [stack[r][1] / alone[r][1] for r in stack
                      if r in alone and alone[r][1] > 0]
        rounds = (f"{paired[0]:.2f}, {statistics.median(paired):.2f}, {paired[-1]:.2f}"
                  if paired else "-")
        round_median = "-"
        if paired and paired_cpu:
            rw, rc = statistics.median(paired), statistics.median(paired_cpu)
            round_miss = rw > WALL_TARGET or rc > CPU_TARGET
            round_misses += round_miss
            round_median = fmt_pair(rw, rc) + (" **" if round_miss else "")
        print(f"| {fmt} | {mode} | {client} | {min(len(aw), len(sw))} "
              f"| {fmt_pair(statistics.median(aw), statistics.median(ac))} "
              f"| {fmt_pair(statistics.median(sw), statistics.median(sc))} "
              f"| {fmt_pair(mw, mc)}{' **' if miss else ''} "
              f"| {fmt_pair(min(sw) / min(aw), min(sc) / min(ac))} | {rounds} "
              f"| {round_median} |")
    print(f"\n{misses} cell(s) over {WALL_TARGET}x wall or {CPU_TARGET}x CPU (median ratio),"
          f" {round_misses} by round median, of {stack_name} over {alone_name}")
    if with_ci:
        intervals(cells, rows, alone_name, stack_name)


if __name__ == "__main__":
    args = sys.argv[1:]
    pair = ["image", "image+filters"]
    cpu_kind = "server"
    with_ci = False
    while args[:1] and args[0].startswith("--"):
        if args[0] == "--pair":
            if len(args) < 3:
                sys.exit("stack-ratios.py: --pair needs two target names")
            pair, args = args[1:3], args[3:]
        elif args[0] == "--ci":
            with_ci, args = True, args[1:]
        elif args[0].startswith("--cpu=") and args[0][6:] in CPU_KINDS:
            cpu_kind, args = args[0][6:], args[1:]
        else:
            sys.exit(f"stack-ratios.py: {args[0]}: unknown option")
    if not args:
        sys.exit(f"usage: stack-ratios.py [--pair ALONE STACK] "
                 f"[--cpu={'|'.join(CPU_KINDS)}] [--ci] RESULTS.tsv [RESULTS.tsv...]")
    main(args, *pair, cpu_kind, with_ci)
