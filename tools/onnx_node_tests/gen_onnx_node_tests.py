#!/usr/bin/python3
"""Generate ONNX's backend node test cases with Debian's python3-onnx (1.12).

Usage: /usr/bin/python3 gen_onnx_node_tests.py OUTDIR

Writes OUTDIR/node/test_NAME/model.onnx and test_data_set_0/{input,output}_K.pb (as
TensorProto), plus onnx's "real" and "simple" model stubs, which mpc does not use.
The build runs this for tests/conformance (see tests/CMakeLists.txt); it takes ~15 s.

Debian's numpy 1.24 removed aliases that one of onnx 1.12's test cases still uses
(np.float and friends); this restores them, then runs onnx's own generator.
"""
import runpy
import sys

import numpy as np

for alias, builtin in [("float", float), ("int", int), ("bool", bool), ("object", object),
                       ("complex", complex), ("str", str)]:
    if alias not in np.__dict__:
        setattr(np, alias, builtin)

if len(sys.argv) != 2:
    sys.exit(__doc__)
sys.argv = ["cmd_tools", "generate-data", "-o", sys.argv[1]]
runpy.run_module("onnx.backend.test.cmd_tools", run_name="__main__")
