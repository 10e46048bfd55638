#!/usr/bin/env python3
"""Issue 44: accuracy of the training-mode BatchNorm batch mean in mpc (f32 accumulation)
against PyTorch f32 (CPU, contiguous: accumulates in double) and channels_last (f32), all
against float64. mpc's batch mean is read back from the running mean its one training step
wrote (exported by regnet_se.py: after.onnx): rm1 = m*rm0 + (1-m)*mean.

  .venv/bin/python tools/investigations/regnet_se/bn_stats.py --bs 32 --hw 64 --seed 0 --work /tmp/regnet_se/bs32
"""
import argparse, copy, os, warnings
warnings.filterwarnings("ignore")
import numpy as np, onnx, torch, torch.nn as nn
from onnx import numpy_helper
import regnet_se as R
torch.set_num_threads(1)

ap = argparse.ArgumentParser()
ap.add_argument("--bs", type=int, default=32); ap.add_argument("--hw", type=int, default=64)
ap.add_argument("--seed", type=int, default=0); ap.add_argument("--work", required=True)
a = ap.parse_args()
model0 = R.make_model(a.seed)
x, _ = R.make_data(a.seed, a.bs, a.hw)
w0, w1 = R.onnx_weights(os.path.join(a.work, "model.onnx")), R.onnx_weights(os.path.join(a.work, "after.onnx"))
mom = {}
for node in onnx.load(os.path.join(a.work, "model.onnx")).graph.node:
    if node.op_type == "BatchNormalization":
        mom[node.input[3]] = next((at.f for at in node.attribute if at.name == "momentum"), 0.9)


def means(dtype, cl=False):
    m = copy.deepcopy(model0).to(dtype).train()
    xb = torch.from_numpy(x).to(dtype)
    if cl:
        m = m.to(memory_format=torch.channels_last); xb = xb.contiguous(memory_format=torch.channels_last)
    out = {}
    for n, mod in m.named_modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.register_forward_hook(lambda mod, inp, o, n=n: out.__setitem__(
                n, inp[0].double().mean(dim=(0, 2, 3)).detach().numpy()))  # f64 mean of that run's own input
            mod.register_forward_hook(lambda mod, inp, o, n=n: out.__setitem__(
                n + ":own", torch.native_batch_norm(inp[0], None, None, None, None, True, 0.0, mod.eps)[1].double().numpy()))
    with torch.no_grad():
        m(xb)
    return out

t64, t32, tcl = means(torch.float64), means(torch.float32), means(torch.float32, cl=True)
print(f"bs={a.bs} hw={a.hw} seed={a.seed}: per BatchNorm, ||mean - exact mean of the same f32 input|| / ||mean||")
print("(the accumulation error alone), then the total error against the float64 run")
print(f"{'BatchNorm':36s} {'M':>7s} | {'torch acc':>9s} {'cl acc':>9s} | {'mpc tot':>9s} {'torch tot':>9s} {'cl tot':>9s}")
rows = []
for n in [k for k in t64 if not k.endswith(":own")]:
    rmk = n + ".running_mean"
    mm = mom[rmk]
    mpc_mean = (w1[rmk] - mm * w0[rmk]) / (1 - mm)
    ref = t64[n]
    e = lambda v: np.linalg.norm(v - ref) / np.linalg.norm(ref)
    acc = lambda d: np.linalg.norm(d[n + ":own"] - d[n]) / np.linalg.norm(d[n])
    M = a.bs * {"stem": (a.hw // 2) ** 2}.get(n.split(".")[0], 0)
    rows.append((e(mpc_mean), e(t32[n + ":own"]), e(tcl[n + ":own"])))
    print(f"{n.replace('trunk_output.', ''):36s} {M if M else '':>7} | {acc(t32):9.1e} {acc(tcl):9.1e} | "
          f"{rows[-1][0]:9.1e} {rows[-1][1]:9.1e} {rows[-1][2]:9.1e}")
r = np.array(rows)
print("median total error: mpc %.2e  torch f32 %.2e  torch channels_last %.2e" % tuple(np.median(r, axis=0)))
