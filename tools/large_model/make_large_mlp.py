"""Writes an MLP whose parameters exceed 2 GiB, saved with ONNX external data.

  make_large_mlp.py OUT_DIR [--features 4096] [--hidden 16384] [--layers 2] [--classes 10]

The defaults give x[N,4096] -> Gemm 4096x16384 -> Relu -> (Gemm 16384x16384 -> Relu) x2
-> Gemm 16384x10 -> logits: 604M float32 parameters, 2.42 GB. The weights are streamed
into OUT_DIR/model.onnx.data one row block at a time (never a whole tensor, let alone
the whole model, in memory twice) in ONNX's external data layout: one file, each tensor
at a 4096-aligned offset, and TensorProtos with data_location EXTERNAL and
location/offset/length entries; OUT_DIR/model.onnx holds only the graph. The model is
then checked by onnx.checker.check_model on its path, which checks the data file too.

Run with Debian's python3 (/usr/bin/python3), which has onnx and numpy. Used by
run_large_model.sh; not part of CI.
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper

ALIGN = 4096
ROWS_PER_BLOCK = 1024


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out_dir")
    p.add_argument("--features", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=16384)
    p.add_argument("--layers", type=int, default=2, help="hidden x hidden layers")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--seed", type=int, default=22)
    args = p.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    data_name = "model.onnx.data"
    rng = np.random.default_rng(args.seed)

    dims = [args.features] + [args.hidden] * (args.layers + 1) + [args.classes]
    initializers, nodes = [], []
    params = 0
    with open(os.path.join(args.out_dir, data_name), "wb") as f:
        def write_tensor(name, shape, scale):
            # Pad to the next aligned offset, then stream the rows block by block.
            pad = (-f.tell()) % ALIGN
            f.write(b"\0" * pad)
            offset = f.tell()
            for r in range(0, shape[0], ROWS_PER_BLOCK):
                rows = min(ROWS_PER_BLOCK, shape[0] - r)
                block = rng.uniform(-scale, scale, size=(rows,) + tuple(shape[1:])).astype(np.float32)
                block.tofile(f)
            t = TensorProto()
            t.name = name
            t.data_type = TensorProto.FLOAT
            t.dims.extend(shape)
            t.data_location = TensorProto.EXTERNAL
            for key, value in (("location", data_name), ("offset", offset), ("length", f.tell() - offset)):
                entry = t.external_data.add()
                entry.key, entry.value = key, str(value)
            initializers.append(t)

        x = "x"
        for i in range(len(dims) - 1):
            fan_in, fan_out = dims[i], dims[i + 1]
            bound = 1.0 / np.sqrt(fan_in)  # torch.nn.Linear's initialization
            write_tensor(f"fc{i}.weight", [fan_out, fan_in], bound)
            write_tensor(f"fc{i}.bias", [fan_out], bound)
            params += fan_out * fan_in + fan_out
            last = i == len(dims) - 2
            y = "logits" if last else f"h{i}"
            nodes.append(helper.make_node("Gemm", [x, f"fc{i}.weight", f"fc{i}.bias"], [y], name=f"fc{i}", transB=1))
            if not last:
                nodes.append(helper.make_node("Relu", [y], [f"a{i}"], name=f"relu{i}"))
                x = f"a{i}"
        data_bytes = f.tell()

    graph = helper.make_graph(nodes, "large_mlp",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", args.features])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", args.classes])],
                              initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="make_large_mlp")
    model.ir_version = 8
    path = os.path.join(args.out_dir, "model.onnx")
    onnx.save_model(model, path)  # the graph only: the data is already in model.onnx.data
    onnx.checker.check_model(path)
    print(f"{path}: {params} parameters ({params * 4 / 1e9:.2f} GB float32), model file "
          f"{os.path.getsize(path)} bytes, data file {data_bytes} bytes")


if __name__ == "__main__":
    main()
