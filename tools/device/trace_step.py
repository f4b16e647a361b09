#!/usr/bin/env python3
"""A replayed decode step's timeline from a CERA_CUDA_TRACE_FILE (src/backend/cuda/trace.h).

Each record is one block: its grid's launch id, when it started and when its PDL wait returned
(%globaltimer, ns). A kernel's wait returns once the kernel before it has finished, so the first
wait of kernel i+1 minus the first wait of kernel i is kernel i's share of the step's critical path;
the kernels of a step sum to the step. Steps are cut after the largest launch (the head product).

usage: trace_step.py TRACE.csv [--steps N] [--names a,b,...]
"""
import argparse
import collections
import csv
import bisect
import statistics

MARK = 0x80000000  # trace.h kMark


def kernels(path):
    """Kernel instances in step order. %gridid names a graph node, the same in every replay, so an
    instance is a run of one grid id in records sorted by wait time: a kernel's waits all return
    after the kernel before it has finished, so instances do not interleave."""
    with open(path) as f:
        rows = [(int(r["t_wait"]), int(r["t_start"]), int(r["grid"]), int(r["blocks"]), int(r["threads"]))
                for r in csv.DictReader(f)]
    rows.sort()
    marks = [r for r in rows if r[4] & MARK]
    rows = [r for r in rows if not r[4] & MARK]
    out = []
    for t_wait, t_start, grid, blocks, threads in rows:
        if not out or out[-1]["grid"] != grid or out[-1]["n"] == blocks:
            out.append({"grid": grid, "blocks": blocks, "threads": threads, "n": 0, "start": t_start,
                        "start_last": t_start, "wait": t_wait, "wait_last": t_wait})
        k = out[-1]
        k["n"] += 1
        k["start"] = min(k["start"], t_start)
        k["start_last"] = max(k["start_last"], t_start)
        k["wait_last"] = t_wait
    return [k for k in out if k["n"] == k["blocks"]], marks  # the ring's first, cut instance is dropped


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, default=8, help="average the last N complete steps")
    args = ap.parse_args()
    ks, marks = kernels(args.trace)
    if not ks:
        raise SystemExit("no complete kernels in the trace")
    head = max(k["blocks"] for k in ks)
    cuts = [i for i, k in enumerate(ks) if k["blocks"] == head]
    steps = [ks[a + 1:b + 1] for a, b in zip(cuts, cuts[1:])]
    lens = collections.Counter(len(s) for s in steps)
    n = lens.most_common(1)[0][0]
    steps = [s for s in steps if len(s) == n][-args.steps:]
    print(f"{len(steps)} steps of {n} traced kernels (head: {head} blocks); globaltimer in ns")
    # Kernel i's critical share: next kernel's first wait minus its own (last kernel: to the next
    # step's first kernel's wait, which includes the untraced argmax and the host's step boundary).
    rows = []
    for i in range(n):
        shares, early, spread, waitspan = [], [], [], []
        for si, s in enumerate(steps):
            k = s[i]
            nxt = s[i + 1]["wait"] if i + 1 < n else None
            if nxt is None:
                full = [x for x in ks if x["wait"] > k["wait"]]
                nxt = full[0]["wait"] if full else None
            if nxt is not None:
                shares.append((nxt - k["wait"]) / 1e3)
            early.append((k["wait"] - k["start"]) / 1e3)
            spread.append((k["start_last"] - k["start"]) / 1e3)
            waitspan.append((k["wait_last"] - k["wait"]) / 1e3)
        k0 = steps[-1][i]
        rows.append((i, k0["blocks"], k0["threads"], statistics.median(shares) if shares else float("nan"),
                     statistics.median(early), statistics.median(spread), statistics.median(waitspan)))
    print(f"{'#':>3} {'blocks':>6} {'thr':>4} {'crit us':>8} {'start->wait':>11} {'start spread':>12} {'wait spread':>11}")
    for r in rows:
        print(f"{r[0]:>3} {r[1]:>6} {r[2]:>4} {r[3]:>8.2f} {r[4]:>11.2f} {r[5]:>12.2f} {r[6]:>11.2f}")
    total = sum(r[3] for r in rows)
    print(f"step (sum of shares): {total:.1f} us")
    by_sig = collections.defaultdict(list)
    for r in rows:
        by_sig[(r[1], r[2])].append(r[3])
    print("by launch shape (blocks x threads): launches, total us, mean us")
    for sig, v in sorted(by_sig.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {sig[0]:>6} x {sig[1]:>4}: {len(v):>3} {sum(v):>8.1f} {sum(v) / len(v):>7.2f}")
    # Marks (trace_mark inside a kernel): time after the instance's first wait, per grid and tag.
    if marks:
        inst = collections.defaultdict(list)
        for k in ks:
            inst[k["grid"]].append(k["wait"])
        per = collections.defaultdict(list)
        for t, _, grid, blocks, threads in marks:
            w = inst.get(grid)
            if not w:
                continue
            i = bisect.bisect_right(w, t)  # the nearest instance: a mark before the wait is negative
            near = min((j for j in (i - 1, i) if 0 <= j < len(w)), key=lambda j: abs(t - w[j]))
            per[(blocks, threads & ~MARK)].append((t - w[near]) / 1e3)
        print("marks (grid blocks, tag): n, min / median / max us after the kernel's first wait")
        for (blocks, tag), v in sorted(per.items()):
            print(f"  {blocks:>6} tag {tag}: {len(v):>6} {min(v):>8.2f} {statistics.median(v):>8.2f} {max(v):>8.2f}")

if __name__ == "__main__":
    main()
