#!/usr/bin/env python3
"""`tensorfmt scan` against picklescan and fickling: detections of the attack corpus
(tests/fixtures/scan, made by its make.py), false alarms on the repository's benign
fixtures (the files tests/tests/scan.rs scans), and files scanned per second.

    cargo build --release -p tensorfmt --bin tensorfmt
    py="$(TENSORFMT_REQUIREMENTS=benches/py/scan-requirements.txt bash scripts/pyenv.sh | tail -n 1)"
    "$py" benches/scan_compare.py [--tensorfmt target/release/tensorfmt] [--runs 3]

Prints a markdown table. tensorfmt runs once over all the files (one process, its
start included); picklescan (`scan_file_path`, `scan_directory_path` for a folder) and
fickling (`scan_file`, graceful; a folder's `.metadata`) through their APIs in this
process, file after file. Each time is the best of `--runs`. A detection or a false
alarm is a `dangerous` verdict of tensorfmt, a file picklescan counts infected, and for
fickling (two rows of one run) a file it rates above LIKELY_SAFE (what its command line
calls unsafe) or at LIKELY_UNSAFE and above; files a scanner could not read (tensorfmt's
`cannot verify`, picklescan's scan errors, fickling's) are counted apart.
"""

import argparse
import json
import logging
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures")


def files(folder, exts):
    d = os.path.join(FIX, folder)
    if not os.path.isdir(d):
        return []
    return sorted(
        os.path.join(d, f)
        for f in os.listdir(d)
        if os.path.isfile(os.path.join(d, f)) and f.rsplit(".", 1)[-1] in exts
    )


def benign():
    out = files("pytorch", {"pt", "pth"})
    out += files("numpy_pickle", {"pkl"})
    out += files(os.path.join("pickle", "valid"), {"pkl"})
    out += [os.path.join(FIX, "dcp", w) for w in ("world2", "world4")]
    out += files("objects", {"pt", "pth", "pkl", "joblib", "sav", "ckpt", "pickle", "bin", "gz", "z"})
    return out


def attacks():
    scan = os.path.join(FIX, "scan")
    with open(os.path.join(scan, "manifest.json")) as f:
        manifest = json.load(f)
    tops = sorted({e["path"].split("/")[0] for e in manifest})
    return [os.path.join(scan, t) for t in tops]


def best(runs, fn):
    times, result = [], None
    for _ in range(runs):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return min(times), result


def run_tensorfmt(exe, paths):
    out = subprocess.run([exe, "scan", "--json", *paths], capture_output=True, check=False)
    doc = json.loads(out.stdout)
    flagged, errors = set(), set()
    for f in doc["files"]:
        if f["verdict"] == "dangerous":
            flagged.add(f["path"])
        elif f["verdict"] == "cannot verify":
            errors.add(f["path"])
    return flagged, errors


def run_picklescan(paths):
    from picklescan.scanner import scan_directory_path, scan_file_path

    flagged, errors = set(), set()
    for p in paths:
        try:
            r = scan_directory_path(p) if os.path.isdir(p) else scan_file_path(p)
        except Exception:
            errors.add(p)
            continue
        if r.infected_files > 0:
            flagged.add(p)
        elif r.scan_err:
            errors.add(p)
    return flagged, errors


def run_fickling(paths):
    """fickling's severity of each path (None when it raised) and whether it reported
    errors reading it, its output silenced."""
    import contextlib
    import warnings

    import fickling

    severity = {}
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
        warnings.simplefilter("ignore")
        for p in paths:
            target = os.path.join(p, ".metadata") if os.path.isdir(p) else p
            try:
                r = fickling.scan_file(target, graceful=True)
                severity[p] = (r.severity, bool(r.errors))
            except Exception:
                severity[p] = (None, True)
    return severity


def fickling_at(severities, least):
    """fickling's verdicts read with `least` as the lowest severity that flags a file."""
    flagged = {p for p, (s, _) in severities.items() if s is not None and s >= least}
    errors = {p for p, (_, e) in severities.items() if e}
    return flagged, errors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tensorfmt", default=os.path.join(ROOT, "target", "release", "tensorfmt"))
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    logging.disable(logging.CRITICAL)
    good, bad = benign(), attacks()
    paths = good + bad
    from fickling.analysis import Severity

    timed = [
        ("tensorfmt scan", lambda: run_tensorfmt(args.tensorfmt, paths)),
        ("picklescan 1.0.5", lambda: run_picklescan(paths)),
        ("fickling 0.1.12", lambda: run_fickling(paths)),
    ]
    rows = []
    for name, fn in timed:
        secs, result = best(args.runs, fn)
        rate = len(paths) / secs
        if name.startswith("fickling"):
            rows.append((f"{name}, any finding (its CLI's unsafe)", rate, fickling_at(result, Severity.POSSIBLY_UNSAFE)))
            rows.append((f"{name}, LIKELY_UNSAFE or worse", rate, fickling_at(result, Severity.LIKELY_UNSAFE)))
        else:
            rows.append((name, rate, result))
    print(f"{len(bad)} payloads, {len(good)} benign files, best of {args.runs} runs\n")
    print("| scanner | detections | false alarms | unreadable (benign / payloads) | files/s |")
    print("|---|---|---|---|---|")
    missed = {}
    for name, rate, (flagged, errors) in rows:
        hits = [p for p in bad if p in flagged]
        alarms = [p for p in good if p in flagged]
        err_good = sum(p in errors for p in good)
        err_bad = sum(p in errors for p in bad)
        print(
            f"| {name} | {len(hits)} of {len(bad)} | {len(alarms)} of {len(good)} "
            f"| {err_good} / {err_bad} | {rate:,.0f} |"
        )
        missed[name + ": missed"] = [os.path.basename(p) for p in bad if p not in flagged]
        missed[name + ": false alarms"] = [os.path.relpath(p, FIX) for p in alarms]
    print()
    for name, lst in missed.items():
        if lst:
            print(f"- {name}: {', '.join(lst)}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
