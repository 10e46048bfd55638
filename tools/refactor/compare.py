#!/usr/bin/python3
"""Compares two snapshot directories of tools/refactor/snapshot.sh.

Identical files pass. Compile reports and summaries may differ only by passes that
exist on one side alone (a rewrite that became a named pass); everything else in them
(every node's dtype and reason, casts, padding, FP8 decisions, memory plan, model and
program sizes, and each common pass's changed / nodes_after) must be equal.

Usage: tools/refactor/compare.py BEFORE_DIR AFTER_DIR [--allow-new-passes a,b,...]
Prints one line per difference; exit 1 if any.
"""
import argparse
import json
import os
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--allow-new-passes", default="", help="pass names allowed only in AFTER")
    args = p.parse_args()
    allowed = set(filter(None, args.allow_new_passes.split(",")))
    problems = []
    names = sorted(set(os.listdir(args.before)) | set(os.listdir(args.after)))
    for name in names:
        a, b = os.path.join(args.before, name), os.path.join(args.after, name)
        if not (os.path.exists(a) and os.path.exists(b)):
            problems.append(f"{name}: only in {'before' if os.path.exists(a) else 'after'}")
            continue
        ta, tb = open(a).read(), open(b).read()
        if ta == tb:
            continue
        if name.startswith("report-"):
            ra, rb = json.loads(ta), json.loads(tb)
            pa, pb = ra.pop("passes"), rb.pop("passes")
            new = [x["name"] for x in pb if x["name"] not in {y["name"] for y in pa}]
            if set(new) - allowed:
                problems.append(f"{name}: unexpected new passes {sorted(set(new) - allowed)}")
            pb = [x for x in pb if x["name"] not in new]
            if pa != pb:
                problems.append(f"{name}: the common passes differ")
            for key in sorted(set(ra) | set(rb)):
                if ra.get(key) != rb.get(key):
                    problems.append(f"{name}: field {key} differs")
        elif name.startswith("summary-"):
            la = ta.splitlines()
            lb = [l for l in tb.splitlines() if not any(l.startswith(n + " ") for n in allowed)]
            if la != lb:
                problems.append(f"{name}: differs beyond the new passes' rows")
        else:
            problems.append(f"{name}: differs")
    for line in problems:
        print(line)
    print(f"compare: {len(names)} files, {len(problems)} differences")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
