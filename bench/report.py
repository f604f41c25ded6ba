#!/usr/bin/python3
# nbdstack bench/run's helper (Debian python3, standard library only).
#
#   report.py layout MAP.json
#       qcow2 layout from `qemu-img map --output=json`: prints
#       "INVERSIONS DISCONTINUITIES HOST_EXTENTS".  In guest order, over
#       the extents that are allocated in the image file (have an
#       "offset"): an inversion is an extent whose host offset is below
#       the end of the previous allocated one; a discontinuity is one
#       that does not start exactly there; host extents = runs of
#       contiguous allocated extents.
#
#   report.py report RAW.tsv OUTDIR [--readme README.md]
#       Turns bench/run's raw records into OUTDIR/REPORT.md,
#       OUTDIR/results.json and OUTDIR/*.png (gnuplot), and refreshes
#       the generated part of README.md's "Benchmarks" section (between
#       the bench/run markers) when asked.
# SPDX-License-Identifier: BSD-3-Clause

import json
import os
import statistics
import subprocess
import sys

WORKLOADS = [
    ("100M-direct", "1 x 100 MiB direct"),
    ("512B-direct", "1000 x 512 B direct"),
    ("100M-dsync", "1 x 100 MiB dsync"),
    ("512B-dsync", "1000 x 512 B dsync"),
]
# The published table (Linux 5.1, qemu-nbd 4.0, i5-3570, SSD), MB/s.
ORIGINAL = {
    "100M-direct": {"loop raw": 1100, "qemu-nbd raw": 69.9, "qemu-nbd qcow2": 51.8},
    "512B-direct": {"loop raw": 15.6, "qemu-nbd raw": 0.583, "qemu-nbd qcow2": 0.577},
    "100M-dsync": {"loop raw": 218, "qemu-nbd raw": 92.0, "qemu-nbd qcow2": 59.1},
    "512B-dsync": {"loop raw": 0.402, "qemu-nbd raw": 0.577, "qemu-nbd qcow2": 0.548},
}
T1_TARGETS = [
    # name, label, role (peer | ours | reference)
    ("loop-raw", "loop raw (dd)", "peer"),
    ("qemu-nbd-raw", "qemu-nbd raw", "peer"),
    ("qemu-nbd-qcow2", "qemu-nbd qcow2", "peer"),
    ("file-raw", "nbdkit file", "peer"),
    ("memory", "nbdkit memory (floor)", "reference"),
    ("image-raw", "image raw", "ours"),
    ("image-qcow2", "image qcow2", "ours"),
    ("stack-none-raw", "stack cache=none", "ours"),
    ("stack-wb-raw", "stack writeback", "ours"),
]
T2_SERVERS = [
    ("qemu-nbd-imageio", "qemu-nbd (imageio options)", "peer"),
    ("qemu-nbd", "qemu-nbd (defaults)", "peer"),
    ("file", "nbdkit file", "peer"),
    ("image", "image", "ours"),
    ("stack-none", "stack cache=none", "ours"),
    ("stack-wb", "stack writeback", "ours"),
    ("memory", "nbdkit memory (limit)", "reference"),
    ("local", "local nbdcopy --flush (limit)", "reference"),
]
T2_CLIENTS = [
    ("convert", "qemu-img convert -n"),
    ("convert-W", "qemu-img convert -n -W"),
    ("nbdcopy", "nbdcopy --flush"),
    ("imageio", "imageio-style client"),
]
# Table 2 target formats.  qcow2: made by `qemu-img create`, as oVirt
# makes upload targets; qcow2-own: created by our plugin itself
# (format=qcow2 create=true), served only by our servers, so its rows
# take their peers from the qcow2 rows.
T2_FORMATS = ("raw", "qcow2", "qcow2-own")


def peer_format(fmt):
    return "qcow2" if fmt == "qcow2-own" else fmt


def layout(path):
    with open(path) as f:
        entries = json.load(f)
    inv = disc = hostext = 0
    prev_end = None
    for e in entries:
        if "offset" not in e:
            continue
        if prev_end is None or e["offset"] != prev_end:
            hostext += 1
        if prev_end is not None:
            if e["offset"] != prev_end:
                disc += 1
            if e["offset"] < prev_end:
                inv += 1
        prev_end = e["offset"] + e["length"]
    print(inv, disc, hostext)


# ---------------------------------------------------------------- helpers
def num(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return None


def stats(vals):
    vals = [v for v in vals if v is not None]
    if not vals:
        return None
    return {
        "min": min(vals),
        "median": statistics.median(vals),
        "max": max(vals),
        "n": len(vals),
        "runs": vals,
    }


def rate(mb):
    """MB/s (10^6) as the original table writes it."""
    if mb is None:
        return "-"
    if mb >= 1000:
        return "%.2f GB/s" % (mb / 1000)
    if mb >= 1:
        return "%.3g MB/s" % mb
    return "%.0f kB/s" % (mb * 1000)


def mbs(x):
    """MB/s with three significant digits, no unit."""
    if x is None:
        return "-"
    if x >= 100:
        return "%.0f" % x
    if x >= 10:
        return "%.1f" % x
    if x >= 1:
        return "%.2f" % x
    return "%.3f" % x


def secs(s):
    return "-" if s is None else ("%.2f" % s if s < 100 else "%.0f" % s)


def size_h(b):
    if b is None:
        return "-"
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div:
            return "%.2f %s" % (b / div, unit)
    return "%d B" % b


def ratio(x):
    return "-" if x is None else "%.2f" % x


def md_table(header, rows, align=None):
    align = align or ["---"] * len(header)
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    for r in rows:
        out.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(out)


# ---------------------------------------------------------------- report
def report(raw_path, outdir, readme):
    meta, versions, commands = {}, {}, {}
    t1, t1cpu, t1skip, t1err = {}, {}, {}, []
    t2, t2skip, t2err = {}, {}, []
    with open(raw_path) as f:
        for line in f:
            r = line.rstrip("\n").split("\t")
            kind = r[0]
            if kind == "meta":
                meta[r[1]] = r[2]
            elif kind == "version":
                versions[r[1]] = r[2]
            elif kind == "cmd":
                commands[r[1]] = r[2]
            elif kind == "t1":
                t1.setdefault((r[1], r[2]), []).append(
                    {"run": int(r[3]), "mb_s": num(r[4]), "lat_us": num(r[5])})
            elif kind == "t1-cpu":
                t1cpu.setdefault(r[1], []).append(num(r[3]))
            elif kind == "t1-skip":
                t1skip[r[1]] = r[2]
            elif kind == "t1-err":
                t1err.append({"target": r[1], "workload": r[2], "run": int(r[3]),
                              "error": r[4]})
            elif kind == "t2":
                t2.setdefault((r[1], r[2], r[3]), []).append({
                    "run": int(r[4]), "seconds": num(r[5]), "server_cpu_s": num(r[6]),
                    "allocated_bytes": num(r[7]), "file_extents": num(r[8]),
                    "pct_fragmented": num(r[9]), "inversions": num(r[10]),
                    "discontinuities": num(r[11]), "verified": r[12]})
            elif kind == "t2-skip":
                t2skip[(r[1], r[2])] = r[3]
            elif kind == "t2-err":
                t2err.append({"server": r[1], "format": r[2], "client": r[3],
                              "run": int(r[4]), "error": r[5]})

    mode = meta.get("mode", "?")
    vsize = int(meta.get("sample_virtual", "0") or 0)

    # ---- Table 1 cells
    t1cells = {}
    for t, _, _ in T1_TARGETS:
        for w, _ in WORKLOADS:
            c = {"target": t, "workload": w}
            if t in t1skip:
                c["status"] = t1skip[t]
            elif (t, w) in t1:
                st = stats([x["mb_s"] for x in t1[(t, w)]])
                c.update(status="ok", mb_s=st,
                         lat_us=stats([x["lat_us"] for x in t1[(t, w)]]))
            elif any(e["target"] == t and e["workload"] == w for e in t1err):
                c["status"] = "error: " + [e for e in t1err if e["target"] == t
                                           and e["workload"] == w][0]["error"]
            else:
                continue       # not in this run's target list
            t1cells[(t, w)] = c
    t1_present = [x for x in T1_TARGETS if any((x[0], w) in t1cells for w, _ in WORKLOADS)]

    def t1med(t, w):
        c = t1cells.get((t, w))
        return c["mb_s"]["median"] if c and c.get("status") == "ok" else None

    # ---- Table 2 cells
    t2cells = {}
    for fmt in T2_FORMATS:
        for s, _, _ in T2_SERVERS:
            for cl, _ in T2_CLIENTS:
                key = (s, fmt, cl)
                c = {"server": s, "format": fmt, "client": cl}
                if (s, fmt) in t2skip:
                    c["status"] = t2skip[(s, fmt)]
                elif key in t2:
                    runs = t2[key]
                    c["status"] = "ok" if all(x["verified"] == "ok" for x in runs) \
                        else "VERIFY FAILED"
                    for f in ("seconds", "server_cpu_s", "allocated_bytes", "file_extents",
                              "pct_fragmented", "inversions", "discontinuities"):
                        c[f] = stats([x[f] for x in runs])
                    if c["seconds"] and vsize:
                        c["mb_s_virtual"] = vsize / c["seconds"]["median"] / 1e6
                    c["runs"] = runs
                else:
                    errs = [e for e in t2err if (e["server"], e["format"], e["client"]) == key]
                    if not errs:
                        continue
                    c["status"] = "error: " + errs[0]["error"]
                errs = [e for e in t2err if (e["server"], e["format"], e["client"]) == key]
                if errs:
                    c["errors"] = errs
                    if c["status"] == "ok":
                        c["status"] = "error in %d run(s): %s" % (len(errs), errs[0]["error"])
                t2cells[key] = c

    def t2med(s, fmt, cl, field="seconds"):
        c = t2cells.get((s, fmt, cl))
        if not c or c.get("status") != "ok" or not c.get(field):
            return None
        return c[field]["median"]

    roles1 = {t: role for t, _, role in T1_TARGETS}
    labels1 = {t: l for t, l, _ in T1_TARGETS}
    roles2 = {s: role for s, _, role in T2_SERVERS}
    labels2 = {s: l for s, l, _ in T2_SERVERS}
    failed = [c for c in t2cells.values() if c["status"] == "VERIFY FAILED"]

    md = []
    P = md.append
    P("# nbdstack benchmark report")
    P("")
    P("Generated by `%s` (**%s mode**) on %s, commit `%s`, in %s s. "
      "Do not edit: run `bench/run` again." % (
          meta.get("invocation", "bench/run"), mode, meta.get("date", "?"),
          meta.get("commit", "?"), meta.get("duration_s", "?")))
    if mode != "full":
        P("")
        P("> **This is a quick-mode (smoke) run**: %s sample, %s runs per cell. "
          "The reference numbers come from the full mode (`bench/run`)." % (
              meta.get("size"), meta.get("runs")))
    P("")
    if failed or t2err or t1err:
        P("> **FAILURES**: %d upload cell(s) did not verify with `qemu-img compare`, "
          "%d upload(s) and %d small-write run(s) failed: see the tables." % (
              len(failed), len(t2err), len(t1err)))
        P("")
    P("The machine is shared and noisy: only ratios within this run mean much. "
      "Every cell is the min / median / max of %s interleaved runs (every round "
      "runs every cell once, in an order that rotates each round)." % (
          meta.get("t2_runs_done", meta.get("runs"))))
    for k in ("trimmed_matrix", "trimmed_runs"):
        if meta.get(k):
            P("")
            P("Trimmed: %s." % meta[k])
    P("")
    P("## Machine and versions")
    P("")
    rows = [("CPU", "%s, %s cores" % (meta.get("cpu"), meta.get("cores"))),
            ("memory", meta.get("memory")), ("kernel", meta.get("kernel")),
            ("filesystem", meta.get("filesystem")),
            ("load average", "%s before, %s after" % (meta.get("load_before"),
                                                      meta.get("load_after")))]
    rows += [(k, "`%s`" % v) for k, v in versions.items()]
    P(md_table(["", ""], rows))
    P("")

    # ---- headline
    head_rows, head_txt = headline(t2cells, t2med, labels2, roles2)
    P("## Headline")
    P("")
    P(head_txt)
    P("")
    P(head_rows)
    P("")
    P("![upload time per server](upload.png)")
    P("")

    # ---- Table 1
    P("## Table 1: loop device versus NBD")
    P("")
    P("Kernel NBD (`/dev/nbdX`) is not available on this machine, so the NBD "
      "client here is userspace: `bench/smallwrites` (libnbd), one request in "
      "flight (queue depth 1), over a unix socket. *direct* = writes without "
      "flush, one flush at the end (`dd oflag=direct`); *dsync* = FUA on every "
      "write, no flush (`dd oflag=dsync`). 100 MiB is sent as requests of the "
      "server's maximum size (at most 32 MiB), one at a time. The loop row is "
      "`dd` to a loop device over a raw file (`oflag=direct conv=fsync` for "
      "direct, so it also ends with a flush; `oflag=dsync` for dsync). Images "
      "are 100 MiB, preallocated (`qemu-img create -o preallocation=full`). "
      "Each run is the median of %s pass(es) over the same range; MB/s are "
      "10^6 bytes/s." % meta.get("passes", "3"))
    P("")
    P("The original (Linux 5.1, qemu-nbd 4.0, i5-3570, SSD, kernel NBD client):")
    P("")
    P(md_table(["workload", "loop raw", "qemu-nbd raw", "qemu-nbd qcow2"],
               [[wl] + [rate(ORIGINAL[w][k]) for k in ("loop raw", "qemu-nbd raw",
                                                        "qemu-nbd qcow2")]
                for w, wl in WORKLOADS]))
    P("")
    P("This run, median MB/s; *stack* = coalesce + zerodetect + "
      "discard over the image plugin (raw):")
    P("")
    hdr = ["workload"] + [l for _, l, _ in t1_present] + ["winner", "ours / best peer"]
    rows = []
    for w, wl in WORKLOADS:
        row = [wl]
        best = {}
        for t, _, role in t1_present:
            c = t1cells.get((t, w))
            if c is None:
                row.append("-")
            elif c["status"] != "ok":
                row.append("not supported" if c["status"].startswith("not supported")
                           else c["status"].split(":")[0])
            else:
                st = c["mb_s"]
                row.append(mbs(st["median"]))
                best[t] = st["median"]
        win = max(best, key=best.get) if best else None
        peers = [best[t] for t in best if roles1[t] == "peer"]
        ours = [best[t] for t in best if roles1[t] == "ours"]
        row.append("**%s**" % labels1[win] if win else "-")
        row.append(ratio(max(ours) / max(peers)) if ours and peers else "-")
        rows.append(row)
    P(md_table(hdr, rows))
    P("")
    P("*ours / best peer* = our best target's median / the best peer's "
      "(loop, qemu-nbd, nbdkit file); > 1 means ours is faster. The memory "
      "plugin is the NBD round-trip floor, not a peer.")
    skips = sorted({(t, c["status"]) for (t, w), c in t1cells.items() if c["status"] != "ok"})
    for t, st in skips:
        P("")
        P("- %s: %s" % (labels1[t], st))
    cpu_rows = [[labels1[t], secs(statistics.median(v))] for t, v in t1cpu.items() if v]
    if cpu_rows:
        P("")
        P("Server CPU seconds per run (all four workloads, %s pass(es) each), median: %s." % (
            meta.get("passes", "3"), ", ".join("%s %s" % (a, b) for a, b in cpu_rows)))
    P("")
    P("![Table 1: MB/s per workload, log scale](smallwrites.png)")
    P("")
    P("<details><summary>All Table 1 cells: min / median / max MB/s over runs, "
      "mean microseconds per write request (median run)</summary>")
    P("")
    rows = []
    for t, tl, _ in t1_present:
        for w, wl in WORKLOADS:
            c = t1cells.get((t, w))
            if c is None:
                continue
            if c["status"] != "ok":
                rows.append([tl, wl, "**%s**" % c["status"].split(":")[0], "-"])
                continue
            st = c["mb_s"]
            lat = c.get("lat_us")
            rows.append([tl, wl, "%s / %s / %s" % (mbs(st["min"]), mbs(st["median"]),
                                                   mbs(st["max"])),
                         "%.0f" % lat["median"] if lat else "-"])
    P(md_table(["target", "workload", "MB/s min / median / max", "us per write"], rows))
    P("")
    P("</details>")
    P("")
    P("### What this shows")
    P("")
    P(t1_text(t1med, labels1, roles1, t1_present))
    P("")

    # ---- Table 2
    P("## Table 2: image upload")
    P("")
    sample = meta.get("sample", "?")
    sample = sample.split(": ", 1)[1] if ": " in sample else sample
    P("Sample (`bench/make-sample.sh`, `SIZE=%s`): %s." % (meta.get("size"), sample))
    P("")
    P("Every upload goes into a fresh target (raw: sparse `truncate`; qcow2: "
      "`qemu-img create -f qcow2`, 64 KiB clusters, as oVirt makes them; qcow2-own: "
      "created by our plugin, `format=qcow2 create=true size=...`, our servers only, "
      "its ratio taken against the peers' qcow2 row; our qcow2 writer uses its "
      "default `layout=auto`, guest-order (linear) placement into a fresh image) with the server already "
      "listening on a unix socket; the time is the client's wall time including "
      "its final flush. Then the server's CPU (user + system, from `/proc/PID/stat`) "
      "is read, the server is stopped and the target is verified with "
      "`qemu-img compare` (not timed). Clients: `qemu-img convert -n [-W] -f raw "
      "-O raw`, `nbdcopy --flush` (4 connections when the server allows "
      "multi-conn), and `bench/imageio-client` (oVirt imageio's pattern: 4 "
      "connections, each taking its own 128 MiB regions, data in 8 MiB writes, "
      "holes as 128 MiB zero requests, one flush per connection). qemu-nbd runs "
      "with `--persistent --shared=8` (imageio's; needed for 4 connections), with "
      "imageio's options `--cache=none --aio=native --discard=unmap "
      "--detect-zeroes=unmap` or with the defaults. *stack* = coalesce + "
      "zerodetect + discard over our image plugin.")
    P("")
    P("The original (6 GiB raw image onto a 6 GiB LV over 1 GbE iSCSI): imageio "
      "upload 41.9 s; `qemu-img convert -W` to /dev/nbd 48.4 s; to nbdkit file "
      "over a unix socket 55.4 s (-W), 56.3 s; to qemu-nbd 56.0 s (-W), 65.0 s.")
    P("")
    P("Median wall seconds per client and server:")
    P("")
    present2 = [x for x in T2_SERVERS if x[0] != "local" and
                any(k[0] == x[0] for k in t2cells)]
    hdr = ["format", "client"] + [l for _, l, _ in present2] + ["winner", "ours / best peer"]
    rows = []
    for fmt in T2_FORMATS:
        for cl, cll in T2_CLIENTS:
            if not any(k[1] == fmt and k[2] == cl and k[0] != "local" for k in t2cells):
                continue
            row = [fmt, cll]
            best = {}
            for s, _, role in present2:
                c = t2cells.get((s, fmt, cl))
                if c is None:
                    row.append("n/a")
                elif c["status"] == "ok":
                    row.append(secs(c["seconds"]["median"]))
                    if role != "reference":
                        best[s] = c["seconds"]["median"]
                else:
                    row.append("**not supported**" if c["status"].startswith("not supported")
                               else "**%s**" % c["status"].split(":")[0])
            win = min(best, key=best.get) if best else None
            peers = [best[s] for s in best if roles2[s] == "peer"]
            if fmt != peer_format(fmt):
                peers = [v for v in (t2med(s, peer_format(fmt), cl)
                                     for s, _, r in present2 if r == "peer") if v]
            ours = [best[s] for s in best if roles2[s] == "ours"]
            row.append("**%s**" % labels2[win] if win else "-")
            row.append(ratio(min(peers) / min(ours)) if peers and ours else "-")
            rows.append(row)
    P(md_table(hdr, rows))
    P("")
    loc = t2med("local", "raw", "nbdcopy")
    P("*winner* among the real servers (the memory plugin is the NBD path's limit); "
      "*ours / best peer* = best peer's median time / our best median time "
      "(> 1: ours faster). Reference: local `nbdcopy --flush` to a file "
      "(no NBD): %s s. n/a: nbdkit file and memory serve raw bytes only." % secs(loc))
    P("")
    P("All cells, min / median / max wall seconds; MB/s of the virtual size "
      "(median); server CPU seconds and allocated size (median); file extents = "
      "`filefrag` extents of the target; for qcow2, from the image after the "
      "upload: inversions (allocated extents in guest order whose host offset "
      "is below the end of the previous one), host discontinuities and "
      "`qemu-img check`'s % fragmented (medians):")
    P("")
    hdr = ["format", "server", "client", "wall s min / med / max", "MB/s", "server CPU s",
           "allocated", "file extents", "inversions", "discontinuities", "% fragmented",
           "verified"]
    rows = []
    for fmt in T2_FORMATS:
        for s, sl, _ in T2_SERVERS:
            for cl, cll in T2_CLIENTS:
                c = t2cells.get((s, fmt, cl))
                if c is None:
                    continue
                if c["status"] != "ok" and "seconds" not in c:
                    rows.append([fmt, sl, cll, "**%s**" % c["status"].split(":")[0]] +
                                ["-"] * 8)
                    continue
                sc = c["seconds"]
                med = lambda f, fmtf="%.0f": ("-" if not c.get(f) else
                                              fmtf % c[f]["median"])
                rows.append([
                    fmt, sl, cll,
                    "%s / %s / %s" % (secs(sc["min"]), secs(sc["median"]), secs(sc["max"])),
                    "%.0f" % c.get("mb_s_virtual", 0),
                    med("server_cpu_s", "%.2f"),
                    size_h(c["allocated_bytes"]["median"]) if c.get("allocated_bytes") else "-",
                    med("file_extents"),
                    med("inversions") if fmt != "raw" else "-",
                    med("discontinuities") if fmt != "raw" else "-",
                    med("pct_fragmented", "%.2f") if fmt != "raw" else "-",
                    "ok" if c["status"] == "ok" else "**%s**" % c["status"]])
    P(md_table(hdr, rows))
    P("")
    for (s, fmt), st in sorted(t2skip.items()):
        P("- %s, %s: %s" % (labels2[s], fmt, st))
    if t2skip:
        P("")
    for e in t2err:
        P("- **ERROR** %s %s %s run %d: %s" % (e["server"], e["format"], e["client"],
                                               e["run"], e["error"]))
    P("![Table 2: upload time per server, grouped by client](upload.png)")
    P("")
    P("### What this shows")
    P("")
    P(t2_text(t2cells, t2med, labels2, roles2, vsize))
    P("")

    # ---- commands
    P("## Exact command lines")
    P("")
    P("`$TMP` is the run's scratch directory, `$BUILD` the build directory; "
      "nbdkit and qemu-nbd log to a file in `$TMP`. Table 1 (`t1 TARGET WORKLOAD`), "
      "Table 2 (`t2 SERVER FORMAT CLIENT`):")
    P("")
    P("```")
    for k in sorted(commands):
        P("%s: %s" % (k, commands[k]))
    P("```")
    P("")

    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "REPORT.md"), "w") as f:
        f.write("\n".join(md))

    # ---- JSON
    data = {
        "generated_by": meta.get("invocation"), "mode": mode, "meta": meta,
        "machine": {k: meta.get(k) for k in ("cpu", "cores", "memory", "kernel",
                                              "filesystem")},
        "versions": versions, "commands": commands,
        "table1": {
            "unit": "MB/s (10^6 bytes/s), median pass of each run",
            "original": {w: ORIGINAL[w] for w, _ in WORKLOADS},
            "cells": list(t1cells.values()),
            "server_cpu_s": {t: stats(v) for t, v in t1cpu.items()},
            "errors": t1err,
        },
        "table2": {
            "unit": "seconds of client wall time",
            "sample_virtual_bytes": vsize,
            "sample_allocated_bytes": int(meta.get("sample_allocated", "0") or 0),
            "cells": list(t2cells.values()),
            "errors": t2err,
        },
    }
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump(data, f, indent=1, sort_keys=False)
        f.write("\n")

    plots(outdir, t1med, t1_present, t2cells, t2med, present2, mode)
    if readme:
        update_readme(readme, head_txt, head_rows, outdir, mode, meta)


def headline(t2cells, t2med, labels2, roles2):
    """Raw uploads: median seconds per server and client, ours vs peers."""
    servers = [s for s, _, role in T2_SERVERS if s != "local" and
               any(k[0] == s and k[1] == "raw" for k in t2cells)]
    rows = []
    for cl, cll in T2_CLIENTS:
        if not any(k[1] == "raw" and k[2] == cl and k[0] != "local" for k in t2cells):
            continue
        meds = {s: t2med(s, "raw", cl) for s in servers}
        peers = [v for s, v in meds.items() if v and roles2[s] == "peer"]
        ours = [v for s, v in meds.items() if v and roles2[s] == "ours"]
        rows.append([cll] + [secs(meds[s]) for s in servers] +
                    [ratio(min(peers) / min(ours)) if peers and ours else "-"])
    table = md_table(["upload into raw, median s"] + [labels2[s] for s in servers] +
                     ["ours / best peer"], rows)
    txt = ("Upload of the sample image into a raw target, median wall seconds "
           "(lower is better); *ours / best peer* > 1 means our best server "
           "(image plugin alone or the full stack) beat the best of qemu-nbd and "
           "nbdkit file.")
    return table, txt


def fmt_list(items):
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def t1_text(t1med, labels1, roles1, present):
    out = []
    names = [t for t, _, _ in present]
    wins = {}
    for w, wl in WORKLOADS:
        meds = {t: t1med(t, w) for t in names if t1med(t, w)}
        if meds:
            wins[w] = max(meds, key=meds.get)
    loop_wins = [wl for w, wl in WORKLOADS if wins.get(w) == "loop-raw"]
    if wins:
        out.append("The fastest target per workload: %s." % "; ".join(
            "%s, %s (%s)" % (wl, labels1[wins[w]], rate(t1med(wins[w], w)))
            for w, wl in WORKLOADS if w in wins))
    lp, qn = "loop-raw", "qemu-nbd-raw"
    cmp_ = []
    for w, wl in WORKLOADS:
        a, b = t1med(lp, w), t1med(qn, w)
        if a and b:
            o = ORIGINAL[w]["loop raw"] / ORIGINAL[w]["qemu-nbd raw"]
            cmp_.append("%s %.2fx (original %.2fx)" % (wl, a / b, o))
    if cmp_:
        out.append("Loop over qemu-nbd raw, here against the original: %s." %
                   fmt_list(cmp_))
    floor = []
    for w, wl in WORKLOADS:
        m = t1med("memory", w)
        ours = {t: t1med(t, w) for t in names if roles1[t] == "ours" and t1med(t, w)}
        peers = {t: t1med(t, w) for t in names if roles1[t] == "peer" and t1med(t, w)
                 and t != "loop-raw"}
        if m and ours and peers:
            bo = max(ours, key=ours.get)
            bp = max(peers, key=peers.get)
            floor.append("%s: %s %s = %.0f%% of the memory floor (%s), best NBD peer "
                         "%s %s (%.0f%%)" % (
                             wl, labels1[bo], rate(ours[bo]), 100 * ours[bo] / m, rate(m),
                             labels1[bp], rate(peers[bp]), 100 * peers[bp] / m))
    if floor:
        out.append("Over NBD at queue depth 1 every request pays a round trip; "
                   "against the memory plugin (the floor): " + "; ".join(floor) + ".")
    if loop_wins and len(loop_wins) < len(wins):
        out.append("The loop device wins %s; elsewhere an NBD server is faster." %
                   fmt_list(loop_wins))
    return " ".join(out) if out else "No Table 1 results."


def t2_text(t2cells, t2med, labels2, roles2, vsize):
    out = []
    for fmt in T2_FORMATS:
        wins, rat = [], []
        for cl, cll in T2_CLIENTS:
            meds = {s: t2med(s, fmt, cl) for s, _, r in T2_SERVERS
                    if r != "reference" and t2med(s, fmt, cl)}
            if not meds:
                continue
            w = min(meds, key=meds.get)
            wins.append("%s, %s (%s s)" % (cll, labels2[w], secs(meds[w])))
            po = [v for s, v in meds.items() if roles2[s] == "ours"]
            pp = [v for s, v in meds.items() if roles2[s] == "peer"]
            if fmt != peer_format(fmt):
                pp = [v for v in (t2med(s, peer_format(fmt), cl) for s, _, r in T2_SERVERS
                                  if r == "peer") if v]
            if po and pp:
                rat.append(min(pp) / min(po))
        if wins:
            s = "Into %s, the fastest server per client: %s." % (fmt, "; ".join(wins))
            if rat:
                s += (" Our best against the best peer: %.2f-%.2f (over %d clients)." %
                      (min(rat), max(rat), len(rat)))
            elif fmt == "qcow2":
                s += " Our qcow2 rows are not measured (not supported yet), so there is no ratio."
            out.append(s)
    loc = t2med("local", "raw", "nbdcopy")
    mem = [t2med("memory", "raw", c) for c, _ in T2_CLIENTS if t2med("memory", "raw", c)]
    ours = [t2med(s, "raw", c) for s, _, r in T2_SERVERS if r == "ours"
            for c, _ in T2_CLIENTS if t2med(s, "raw", c)]
    if loc and ours:
        out.append("The best raw upload through our servers takes %s s, %.2fx the local "
                   "durable copy (%s s, no NBD)%s." % (
                       secs(min(ours)), min(ours) / loc, secs(loc),
                       "; the memory plugin, the NBD path without a disk, takes %s s "
                       "at best" % secs(min(mem)) if mem else ""))
    # CPU
    cpu = []
    for fmt in ("raw",):
        for cl, cll in T2_CLIENTS:
            q = t2med("qemu-nbd-imageio", fmt, cl, "server_cpu_s")
            o = t2med("stack-none", fmt, cl, "server_cpu_s")
            if q and o:
                cpu.append(o / q)
    if cpu:
        out.append("Server CPU of the stack (cache=none) against qemu-nbd with imageio's "
                   "options, same client, raw: %.2f-%.2fx." % (min(cpu), max(cpu)))
    # qcow2 layout
    lay = []
    for fmt in T2_FORMATS[1:]:
        for s, sl, _ in T2_SERVERS:
            for cl, cll in T2_CLIENTS:
                inv = t2med(s, fmt, cl, "inversions")
                fr = t2med(s, fmt, cl, "pct_fragmented")
                if inv is not None:
                    lay.append("%s %s / %s %d inversions, %.1f%% fragmented" %
                               (fmt, sl, cll, inv, fr or 0))
    if lay:
        out.append("qcow2 layout after the upload: " + "; ".join(lay) + ".")
    return " ".join(out) if out else "No Table 2 results."


# ---------------------------------------------------------------- plots
def gnuplot(script, cwd):
    r = subprocess.run(["gnuplot"], input=script, text=True, cwd=cwd,
                       capture_output=True)
    if r.returncode != 0:
        sys.stderr.write("report: gnuplot failed:\n%s\n" % r.stderr)


COLOR = {
    "loop-raw": "#7b3294", "qemu-nbd-raw": "#1b9e77", "qemu-nbd-imageio": "#1b9e77",
    "qemu-nbd-qcow2": "#66c2a5", "qemu-nbd": "#66c2a5", "file-raw": "#e6ab02",
    "file": "#e6ab02", "memory": "#bbbbbb", "image-raw": "#08519c", "image": "#08519c",
    "image-qcow2": "#6baed6", "stack-none-raw": "#cb181d", "stack-none": "#cb181d",
    "stack-wb-raw": "#fb6a4a", "stack-wb": "#fb6a4a", "local": "#444444",
}


def plot_cmd(datafile, names):
    parts = []
    for i, n in enumerate(names):
        parts.append("%s using %d%s title columnheader(%d) lc rgb '%s'" % (
            "'%s'" % datafile if i == 0 else "''", i + 2, ":xtic(1)" if i == 0 else "",
            i + 2, COLOR.get(n, "#000000")))
    return "plot " + ", \\\n     ".join(parts) + "\n"


SHORT = {"convert": "convert", "convert-W": "convert -W", "nbdcopy": "nbdcopy",
         "imageio": "imageio client"}


def plots(outdir, t1med, t1_present, t2cells, t2med, present2, mode):
    tag = "" if mode == "full" else " (quick mode)"
    # Table 1: grouped bars of MB/s per workload, log scale.
    names = [t for t, _, _ in t1_present]
    labels = {t: l for t, l, _ in T1_TARGETS}
    lines = ["workload\t" + "\t".join('"%s"' % labels[t] for t in names)]
    for w, wl in WORKLOADS:
        vals = [t1med(t, w) for t in names]
        lines.append('"%s"\t' % wl + "\t".join("%.4f" % v if v else "-" for v in vals))
    with open(os.path.join(outdir, "smallwrites.dat"), "w") as f:
        f.write("\n".join(lines) + "\n")
    n = len(names)
    gnuplot("""
set terminal pngcairo size 1100,560 font "sans,10"
set output 'smallwrites.png'
set title "Table 1: loop device versus NBD, queue depth 1%s"
set ylabel "MB/s (log scale)"
set logscale y
set yrange [0.1:*]
set grid ytics
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set datafile missing '-'
set key outside right top vertical
set xtics nomirror
""" % tag + plot_cmd("smallwrites.dat", names), outdir)
    os.unlink(os.path.join(outdir, "smallwrites.dat"))

    # Table 2: time per server, grouped by client (and format).
    servers = [s for s, _, _ in present2] + ["local"]
    slabels = {s: l for s, l, _ in T2_SERVERS}
    lines = ["group\t" + "\t".join('"%s"' % slabels[s] for s in servers)]
    for fmt in T2_FORMATS:
        for cl, cll in T2_CLIENTS:
            if not any(k[1] == fmt and k[2] == cl and k[0] != "local" for k in t2cells):
                continue
            vals = []
            for s in servers:
                v = t2med(s, fmt, "nbdcopy" if s == "local" else cl)
                vals.append("%.3f" % v if v and (s != "local" or fmt == "raw") else "-")
            lines.append('"%s\\n%s"\t' % (fmt, SHORT[cl]) + "\t".join(vals))
    with open(os.path.join(outdir, "upload.dat"), "w") as f:
        f.write("\n".join(lines) + "\n")
    gnuplot("""
set terminal pngcairo size 1100,600 font "sans,10"
set output 'upload.png'
set bmargin 5
set title "Table 2: upload time per server, grouped by client%s (lower is better)"
set ylabel "wall seconds (median)"
set yrange [0:*]
set grid ytics
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set datafile missing '-'
set key outside right top vertical
set xtics nomirror
""" % tag + plot_cmd("upload.dat", servers), outdir)
    os.unlink(os.path.join(outdir, "upload.dat"))


# ---------------------------------------------------------------- README
BEGIN = "<!-- bench/run: begin generated section, do not edit -->"
END = "<!-- bench/run: end generated section -->"


def update_readme(path, head_txt, head_rows, outdir, mode, meta):
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return
    if BEGIN not in text or END not in text:
        sys.stderr.write("report: %s has no bench/run markers; not updated\n" % path)
        return
    rel = os.path.relpath(outdir, os.path.dirname(os.path.abspath(path)))
    body = "\n".join([
        "",
        "From `%s` (%s mode, %s, commit `%s`; full report: [%s/REPORT.md](%s/REPORT.md)):" % (
            meta.get("invocation"), mode, meta.get("date"), meta.get("commit"), rel, rel),
        "",
        head_txt,
        "",
        head_rows,
        "",
        "![upload time per server](%s/upload.png)" % rel,
        "",
    ])
    a = text.index(BEGIN) + len(BEGIN)
    b = text.index(END)
    with open(path, "w") as f:
        f.write(text[:a] + body + text[b:])


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "layout":
        layout(sys.argv[2])
    elif len(sys.argv) >= 4 and sys.argv[1] == "report":
        readme = None
        if len(sys.argv) == 6 and sys.argv[4] == "--readme":
            readme = sys.argv[5]
        report(sys.argv[2], sys.argv[3], readme)
    else:
        sys.stderr.write(__doc__ if __doc__ else
                         "usage: report.py layout MAP.json | report RAW OUTDIR [--readme F]\n")
        sys.exit(2)


if __name__ == "__main__":
    main()
