#!/usr/bin/env python3
"""Summarise result.json files written by regnet_se.py: global errors, se.fc1 rows, and the
first parameter (walking backwards from fc) whose error exceeds a threshold."""
import json
import sys
import numpy as np

COLS = ["mpc", "torch32", "nomkldnn", "cl"]


def glob(rows, k):
    n2 = sum(r["norm64"] ** 2 for r in rows)
    return np.sqrt(sum(r[k] ** 2 * r["norm64"] ** 2 for r in rows) / n2)


for path in sys.argv[1:]:
    res = json.load(open(path))
    rows = res["rows"]
    cols = [c for c in COLS if c in rows[0]]
    print(f"== {path}: bs={res['bs']} hw={res['hw']} seed={res['seed']}  loss mpc {res['loss_mpc']:.8f} "
          f"t32 {res['loss_torch32']:.8f} t64 {res['loss_torch64']:.8f}")
    print("  global:", "  ".join(f"{c} {glob(rows, c):.2e}" for c in cols))
    print("  median over params:", "  ".join(f"{c} {np.median([r[c] for r in rows]):.2e}" for c in cols))
    print("  max se.fc1.weight:", "  ".join(
        f"{c} {max(r[c] for r in rows if r['name'].endswith('se.fc1.weight')):.2e}" for c in cols))
    for c in cols:
        for r in reversed(rows):
            if r[c] > 1e-3:
                print(f"  first (from the loss) param with {c} error > 1e-3: {r['name']} ({r[c]:.2e})")
                break
    if "-v" in sys.argv[0:1] or True:
        print("  " + f"{'se.fc1.weight of':28s}" + "".join(f"{c:>10s}" for c in cols))
        for r in rows:
            if r["name"].endswith("se.fc1.weight"):
                nm = r["name"].replace("trunk_output.", "").replace(".f.se.fc1.weight", "")
                print(f"  {nm:28s}" + "".join(f"{r[c]:10.2e}" for c in cols))
