"""ONNX external data fixtures and checks for tests/graph/onnx_external_data_test.cc.

  save DIR           writes DIR/inline.onnx (weights inside) and DIR/ext.onnx with its
                     tensors >= 1024 bytes in DIR/weights.data, as onnx.save_model lays
                     them out (all tensors in one file, Constant attributes included).
  check EXT INLINE   loads both with onnx (external data resolved by onnx itself), runs
                     the checker on the file path (which checks the data file) and
                     compares every initializer exactly; EXT must use external data.

Run with Debian's python3 (MPC_PYTHON), which has onnx and numpy.
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def save(out_dir):
    rng = np.random.default_rng(22)
    # Never all zeros: uniform in [-1, 1) and strictly nonzero.
    def rand(*shape):
        return (rng.uniform(-1.0, 1.0, size=shape) + 1e-3).astype(np.float32)

    w1, b1 = rand(64, 16), rand(64)  # w1: 4096 bytes, external; b1: 256 bytes, inline
    w2, b2 = rand(8, 64), rand(8)    # w2: 2048 bytes, external
    shift = rand(4, 64)              # a Constant's value attribute: 1024 bytes, external
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h1"], name="fc1", transB=1),
        helper.make_node("Constant", [], ["shift"], name="shift_const",
                         value=numpy_helper.from_array(shift, "shift_value")),
        helper.make_node("Add", ["h1", "shift"], ["h2"], name="add_shift"),
        helper.make_node("Relu", ["h2"], ["a1"], name="relu"),
        helper.make_node("Gemm", ["a1", "w2", "b2"], ["y"], name="fc2", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "ext_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save_model(model, f"{out_dir}/inline.onnx")
    onnx.save_model(model, f"{out_dir}/ext.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.data", size_threshold=1024, convert_attribute=True)


def check(ext_path, inline_path):
    bare = onnx.load(ext_path, load_external_data=False)
    external = [t.name for t in bare.graph.initializer if t.data_location == TensorProto.EXTERNAL]
    assert external, f"{ext_path}: no initializer uses external data"
    onnx.checker.check_model(ext_path)  # by path: the checker then checks the data file too
    ext, inline = onnx.load(ext_path), onnx.load(inline_path)
    a = {t.name: numpy_helper.to_array(t) for t in ext.graph.initializer}
    b = {t.name: numpy_helper.to_array(t) for t in inline.graph.initializer}
    assert a.keys() == b.keys(), (sorted(a), sorted(b))
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
        assert np.array_equal(a[name], b[name]), f"{name} differs"
        assert np.any(a[name] != 0), f"{name} is all zeros"
    print(f"ok: {len(a)} initializers equal, external: {', '.join(external)}")


if __name__ == "__main__":
    if sys.argv[1] == "save":
        save(sys.argv[2])
    elif sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3])
    else:
        sys.exit(f"unknown mode {sys.argv[1]}")
