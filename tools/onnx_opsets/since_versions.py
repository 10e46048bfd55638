"""Prints ONNX's since-versions for the ops graph/onnx_opsets.cc lists, to check its rows.

For each op: every definition from the one in force at opset 13 up to opset 23 (the range
mpc reads), as ONNX's own schema history gives it. A row missing from the table, or one
the table has that ONNX does not, is printed as a difference. Needs an `onnx` that knows
opset 23 (tools/pyenv/setup.sh installs onnx 1.23.2 into .venv):

    .venv/bin/python tools/onnx_opsets/since_versions.py
"""
import os
import re
import sys

import onnx.defs

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOW, HIGH = 13, 23


def table_rows():
    text = open(os.path.join(REPO, "graph", "onnx_opsets.cc")).read()
    rows = {}
    for op, since in re.findall(r'\{"(\w+)", (\d+), kRead', text):
        rows.setdefault(op, []).append(int(since))
    return rows


def onnx_history():
    history = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain == "":
            history.setdefault(schema.name, []).append(schema.since_version)
    return {op: sorted(v) for op, v in history.items()}


def main():
    rows, history = table_rows(), onnx_history()
    differences = 0
    for op, listed in sorted(rows.items()):
        versions = history.get(op, [])
        in_force = max([v for v in versions if v <= LOW], default=min(versions, default=0))
        expected = [v for v in versions if in_force <= v <= HIGH]
        mark = "" if listed == expected else "   <-- differs"
        differences += bool(mark)
        print(f"{op:26s} table {listed}  onnx {expected}{mark}")
    print(f"{differences} ops differ (onnx {onnx.__version__})")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
