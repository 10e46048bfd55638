"""Exports what torch.onnx.export emits for PyTorch's own attention modules, with inputs
and PyTorch's outputs, for mpc's import/run check (tests/integration/attention_export_test.cc).

Cases (each in OUT_DIR/NAME/: model.onnx, x.npy, expected.npy), opset 17, eval mode,
static shapes [batch 2, sequence 8, width 16], torch.manual_seed(0):
  mha_causal     nn.MultiheadAttention(16, 4, batch_first=True) with a causal boolean
                 attn_mask (torch.triu(ones, 1)): self-attention, the output only
  mha_nomask     the same module without a mask, need_weights=True (averaged weights are
                 a second output)
  encoder_layer  nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, batch_first=True,
                 activation="gelu", dropout=0.0) with a causal mask

Run:  /usr/bin/python3 tests/golden/make_attention_cases.py --out DIR
"""

import argparse
import os

import numpy as np
import torch
from torch import nn

B, T, D, H = 2, 8, 16, 4


class Mha(nn.Module):
    def __init__(self, causal, weights):
        super().__init__()
        self.attn = nn.MultiheadAttention(D, H, batch_first=True)
        self.causal, self.weights = causal, weights
        self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), 1), persistent=False)

    def forward(self, x):
        out, w = self.attn(x, x, x, attn_mask=self.mask if self.causal else None, need_weights=self.weights)
        return (out, w) if self.weights else out


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(D, H, dim_feedforward=32, batch_first=True, activation="gelu",
                                                dropout=0.0)
        self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), 1), persistent=False)

    def forward(self, x):
        return self.layer(x, src_mask=self.mask)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    cases = {"mha_causal": lambda: Mha(True, False), "mha_nomask": lambda: Mha(False, True),
             "encoder_layer": Encoder}
    for name, make in cases.items():
        torch.manual_seed(0)
        model = make().eval()
        x = torch.randn(B, T, D)
        with torch.no_grad():
            y = model(x)
        outs = list(y) if isinstance(y, tuple) else [y]
        d = os.path.join(args.out, name)
        os.makedirs(d, exist_ok=True)
        names = [f"y{i}" for i in range(len(outs))]
        torch.onnx.export(model, (x,), os.path.join(d, "model.onnx"), opset_version=17, input_names=["x"],
                          output_names=names, do_constant_folding=True)
        np.save(os.path.join(d, "x.npy"), x.numpy())
        for n, o in zip(names, outs):
            np.save(os.path.join(d, f"expected_{n}.npy"), o.numpy())
        print(name, "outputs", [tuple(o.shape) for o in outs])


if __name__ == "__main__":
    main()
