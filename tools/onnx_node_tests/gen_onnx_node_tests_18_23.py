"""Writes ONNX 1.23's backend node test cases at opsets 18-23 for the ops mpc reads.

Debian's python3-onnx (1.12, which the build uses for tools/onnx_node_tests/
gen_onnx_node_tests.py) knows opsets up to 17 only. The cases for opsets 18-23 come from a
newer onnx and are committed (a few hundred KB) so that CI, which has no PyPI environment,
runs them: every case whose model imports a default-domain opset in 18..23 and whose nodes
are all ops graph/onnx_opsets.cc has rows for (read or not). Same layout as onnx's
generate-data: OUT/test_NAME/model.onnx and test_data_set_K/{input,output}_J.pb.

    .venv/bin/python tools/onnx_node_tests/gen_onnx_node_tests_18_23.py \
        tests/conformance/onnx_node_18_23

Generated with onnx 1.23.2 (tools/pyenv/requirements.txt).
"""
import os
import re
import shutil
import sys
import warnings

import onnx
import onnx.backend.test.case.node as node_cases
from onnx import numpy_helper

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOW, HIGH = 18, 23


def table_ops():
    text = open(os.path.join(REPO, "graph", "onnx_opsets.cc")).read()
    return set(re.findall(r'\{"(\w+)", \d+, kRead', text)) | {"Constant"}


def default_opset(model):
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return imp.version
    return None


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    ops = table_ops()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = node_cases.collect_testcases()
    if os.path.isdir(out):
        shutil.rmtree(out)
    written = 0
    for case in cases:
        model = case.model
        opset = default_opset(model)
        if opset is None or not LOW <= opset <= HIGH:
            continue
        if any(n.domain not in ("", "ai.onnx") or n.op_type not in ops for n in model.graph.node):
            continue
        case_dir = os.path.join(out, case.name)
        os.makedirs(case_dir)
        with open(os.path.join(case_dir, "model.onnx"), "wb") as f:
            f.write(model.SerializeToString())
        for i, (inputs, outputs) in enumerate(case.data_sets):
            data_dir = os.path.join(case_dir, f"test_data_set_{i}")
            os.makedirs(data_dir)
            for kind, values, infos in (("input", inputs, model.graph.input), ("output", outputs, model.graph.output)):
                for j, value in enumerate(values):
                    tensor = numpy_helper.from_array(value, infos[j].name)
                    with open(os.path.join(data_dir, f"{kind}_{j}.pb"), "wb") as f:
                        f.write(tensor.SerializeToString())
        written += 1
    print(f"{written} cases at opsets {LOW}-{HIGH} written to {out} (onnx {onnx.__version__})")


if __name__ == "__main__":
    main()
