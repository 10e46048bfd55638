"""Exports the GPT-style character model (models/char_gpt/char_gpt.py) as ONNX and builds
its dataset (make_char_data.py), ready for `mpc-train --spec models/char_gpt/char_gpt.spec`.

Default size: 6 layers, width 384, 6 heads, context 256 (10.8M parameters), batch 16;
torch.manual_seed(0) initialization. The export has static shapes, so the spec's
batch_size (and eval batch_size) must equal --batch. Neither the model (~43 MB) nor
the data (~40 MB) is committed; both are regenerated deterministically by this script.

Run:  /usr/bin/python3 models/char_gpt/make_char_gpt.py [--layers 6 --width 384 --heads 6
      --context 256 --batch 16] [--out models/char_gpt/char_gpt.onnx]
"""

import argparse
import collections
import os
import subprocess
import sys

import onnx
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from char_gpt import CharGpt, export  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--width", type=int, default=384)
    parser.add_argument("--heads", type=int, default=6)
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--out", default=os.path.join(HERE, "char_gpt.onnx"))
    parser.add_argument("--data", default=os.path.join(HERE, "data"))
    args = parser.parse_args()
    subprocess.run([sys.executable, os.path.join(HERE, "make_char_data.py"), "--context", str(args.context),
                    "--out", args.data], check=True)
    with open(os.path.join(args.data, "vocab.txt")) as f:
        vocab = len(f.read().split())
    torch.manual_seed(0)
    model = CharGpt(vocab, args.layers, args.width, args.heads, args.context)
    export(model, args.out, args.batch, args.context)
    m = onnx.load(args.out)
    onnx.checker.check_model(m)
    params = sum(p.numel() for p in model.parameters())
    print(f"wrote {args.out}: {params} parameters, ops {dict(collections.Counter(n.op_type for n in m.graph.node))}")


if __name__ == "__main__":
    main()
