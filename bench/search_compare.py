#!/usr/bin/env python3
"""Compares two searches of the same keys, each in its own store: a reference (exhaustive)
and a candidate strategy (guided). For every key both tuned it reports the space, how many
candidates each measured, each search's wall time, and how good the candidate's winner is.

"Good" is judged with one timer: the reference job measured every candidate, the candidate
strategy's winner among them, in the same process, against the same inputs, minutes apart at
most. So ratio = reference job's time of the candidate's winner config / reference job's best
time (both first-pass trial times: neither has the finalists' re-measurement), and also the
two stores' entry times (each search's final-round median) for what each search would serve.

Usage: search_compare.py REFERENCE.db CANDIDATE.db [--json OUT.json]
Reads the stores only (sqlite3, read-only URIs).
"""
import argparse
import json
import sqlite3
import statistics
import sys


def open_ro(path):
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def keys_of(db):
    """key -> (entry time_ns, entry config, job id, job strategy, job stop_reason, seconds)"""
    out = {}
    cols = {r[1] for r in db.execute("PRAGMA table_info(jobs)")}
    stop = "j.stop_reason" if "stop_reason" in cols else "''"
    q = (f"SELECT e.device_model, e.template_id, e.dtype, e.shape, e.time_ns, e.config, e.job_id,"
         f" j.strategy, {stop}, e.tuning_seconds FROM entries e JOIN jobs j ON j.id = e.job_id")
    for row in db.execute(q):
        out[row[:4]] = dict(time=row[4], config=row[5], job=row[6], strategy=row[7],
                            stop=row[8], seconds=row[9])
    return out


def trials_of(db, job):
    """config JSON -> first-pass time_ns of the ok trials; and the count of all trials"""
    ok, n = {}, 0
    for config, outcome, t in db.execute(
            "SELECT config, outcome, time_ns FROM trials WHERE job_id = ?", (job,)):
        n += 1
        if outcome == "ok" and t > 0:
            ok[config] = t
    return ok, n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("reference")
    ap.add_argument("candidate")
    ap.add_argument("--json", help="write the per-key table here")
    ap.add_argument("--within", type=float, default=0.02, help="tolerance of 'as good' (0.02)")
    args = ap.parse_args()
    ref_db, cand_db = open_ro(args.reference), open_ro(args.candidate)
    ref, cand = keys_of(ref_db), keys_of(cand_db)
    rows = []
    for key in sorted(set(ref) & set(cand)):
        r, c = ref[key], cand[key]
        ref_trials, space = trials_of(ref_db, r["job"])
        _, measured = trials_of(cand_db, c["job"])
        best = min(ref_trials.values()) if ref_trials else float("nan")
        same_timer = ref_trials.get(c["config"])
        rows.append(dict(
            key="/".join(key[1:]), space=space, measured=measured,
            ref_seconds=r["seconds"], cand_seconds=c["seconds"],
            ratio_same_timer=(same_timer / best) if same_timer else None,
            ratio_entries=c["time"] / r["time"] if r["time"] > 0 else None,
            stop=c["stop"], strategy=c["strategy"]))
    if not rows:
        sys.exit("no key tuned in both stores")

    print(f"{'key':58} {'space':>5} {'meas':>4} {'ref s':>6} {'cand s':>6} {'same-timer':>10} "
          f"{'entries':>7}  stop")
    for row in rows:
        st = f"{row['ratio_same_timer']:.3f}" if row["ratio_same_timer"] else "-"
        en = f"{row['ratio_entries']:.3f}" if row["ratio_entries"] else "-"
        print(f"{row['key'][:58]:58} {row['space']:5d} {row['measured']:4d} "
              f"{row['ref_seconds']:6.1f} {row['cand_seconds']:6.1f} {st:>10} {en:>7}  "
              f"{row['stop'][:60]}")
    judged = [r for r in rows if r["ratio_same_timer"]]
    within = sum(1 for r in judged if r["ratio_same_timer"] <= 1 + args.within)
    within_entries = sum(1 for r in rows if r["ratio_entries"] and r["ratio_entries"] <= 1 + args.within)
    measured, space = sum(r["measured"] for r in rows), sum(r["space"] for r in rows)
    wall = [r["cand_seconds"] / r["ref_seconds"] for r in rows if r["ref_seconds"] > 0]
    summary = dict(
        keys=len(rows),
        within_same_timer=within, judged_same_timer=len(judged),
        within_entries=within_entries,
        measured_fraction=measured / space if space else None,
        median_measured_fraction=statistics.median(r["measured"] / r["space"] for r in rows),
        median_wall_ratio=statistics.median(wall) if wall else None,
        ref_seconds=sum(r["ref_seconds"] for r in rows),
        cand_seconds=sum(r["cand_seconds"] for r in rows),
        worst_same_timer=max((r["ratio_same_timer"] for r in judged), default=None))
    print(f"\nkeys {len(rows)}: candidate's winner within {100 * args.within:.0f} % of the best "
          f"(same timer) on {within}/{len(judged)}; entries within on {within_entries}/{len(rows)}; "
          f"worst {summary['worst_same_timer']:.3f}")
    print(f"measured {measured}/{space} candidates ({100 * summary['measured_fraction']:.1f} %), "
          f"median per key {100 * summary['median_measured_fraction']:.1f} %; "
          f"median wall ratio {summary['median_wall_ratio']:.3f}; "
          f"tuning seconds {summary['ref_seconds']:.0f} vs {summary['cand_seconds']:.0f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(summary=summary, keys=rows), f, indent=1)


if __name__ == "__main__":
    main()
