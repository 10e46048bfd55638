#!/usr/bin/env python3
"""Issue 44: does mpc's f32 accumulation of the BatchNorm batch statistics explain why its
gradient errors at batch 32 sit ~1.5-2.7x above PyTorch's (mkldnn) default?

PyTorch f32 (mkldnn convolutions) with every training BatchNorm's batch mean and variance
replaced, in the forward values only, by an emulation of mpc's CPU kernel
(backends/cpu/kernels_batch_norm.cc, single thread):
  * after a group-1 Conv with an output plane >= 16 (the channels-last pass converts the
    BN too): rows of [N*H*W, C] in chunks of kRowChunk = 128, each chunk's rows in groups of
    q (q*C >= 256); per (chunk, slot) partial sums over the groups in f32, then FoldChunks
    adds all partials in order, in f32 (sum, then the two-pass squared deviations);
  * otherwise (NCHW): each (n, c) plane summed, then sum[c] += plane over n, in f32.
The gradient still flows through PyTorch's exact batch-norm formula (the emulated statistics
enter as value corrections, x + (emulated - exact).detach()), so only the forward rounding
changes. Also a control: the same orders with float64 accumulators.

  OMP_NUM_THREADS=1 .venv/bin/python tools/investigations/regnet_se/bn_emulation.py --bs 32 --hw 64 --seeds 0,1,2,3
"""
import argparse
import copy
import json
import os
import warnings

warnings.filterwarnings("ignore")
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import regnet_se as R

torch.set_num_threads(1)
K_ROW_CHUNK = 128


def group_rows(c):
    q = 1
    while q * 2 * c <= 256 and q * 2 <= K_ROW_CHUNK:
        q *= 2
    return q


def cl_sum(v, acc):
    """mpc's channels-last per-channel sum of v [N, C, H, W] (f32 input), accumulators `acc`."""
    n, c, h, w = v.shape
    rows = v.permute(0, 2, 3, 1).reshape(n * h * w, c).to(acc)
    m = rows.shape[0]
    q = group_rows(c)
    assert m % K_ROW_CHUNK == 0 and K_ROW_CHUNK % q == 0
    r = rows.reshape(m // K_ROW_CHUNK, K_ROW_CHUNK // q, q, c)
    part = torch.zeros(m // K_ROW_CHUNK, q, c, dtype=acc)
    for g in range(K_ROW_CHUNK // q):  # AddRunValues: sequential over the groups of a chunk
        part = part + r[:, g]
    part = part.reshape(-1, c)
    out = torch.zeros(c, dtype=acc)
    for k in range(part.shape[0]):  # FoldChunks: every partial row in order
        out = out + part[k]
    return out


def nchw_sum(v, acc):
    planes = v.to(acc).sum(dim=(2, 3))  # per (n, c) plane (tiny planes here: 2x2)
    out = torch.zeros(v.shape[1], dtype=acc)
    for i in range(v.shape[0]):
        out = out + planes[i]
    return out


def patch(model, acc):
    """Make every BatchNorm2d compute its batch statistics' values the mpc way."""
    convs = {}
    prev = None
    for n, mod in model.named_modules():
        if isinstance(mod, nn.Conv2d):
            prev = mod
        if isinstance(mod, nn.BatchNorm2d):
            convs[mod] = prev

    def fwd(self, x):
        conv = convs[self]
        cl = conv is not None and conv.groups == 1 and x.shape[2] * x.shape[3] >= 16
        summ = cl_sum if cl else nchw_sum
        m = x.shape[0] * x.shape[2] * x.shape[3]
        with torch.no_grad():
            xd = x.detach()
            mean_e = (summ(xd, acc) / m).to(torch.float32)
            d = xd - mean_e.view(1, -1, 1, 1)  # f32, as the kernel's A(p[k]) - m
            var_e = (summ(d * d if acc == torch.float32 else (d.double() ** 2), acc) / m).to(torch.float32)
        mean = x.mean(dim=(0, 2, 3))
        var = x.var(dim=(0, 2, 3), unbiased=False)
        mean = mean + (mean_e - mean).detach()
        var = var + (var_e - var).detach()
        xh = (x - mean.view(1, -1, 1, 1)) * torch.rsqrt(var.view(1, -1, 1, 1) + self.eps)
        return xh * self.weight.view(1, -1, 1, 1) + self.bias.view(1, -1, 1, 1)

    for mod in convs:
        mod.forward = fwd.__get__(mod)
    return model


def grads(model0, x, y, acc=None):
    m = copy.deepcopy(model0).train()
    if acc is not None:
        patch(m, acc)
    out = m(torch.from_numpy(x))
    loss = nn.CrossEntropyLoss()(out, torch.from_numpy(y))
    loss.backward()
    return {n: p.grad.detach().double().numpy() for n, p in m.named_parameters()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bs", type=int, default=32)
    ap.add_argument("--hw", type=int, default=64)
    ap.add_argument("--seeds", default="0,1,2,3")
    ap.add_argument("--root", default="/tmp/regnet_se", help="where regnet_se.py's runs are (for mpc's numbers)")
    a = ap.parse_args()
    print(f"bs={a.bs} hw={a.hw}: global relative gradient error vs float64 (all parameters)")
    print(f"{'seed':>4s} {'mpc':>9s} {'torch f32':>10s} {'torch+mpc BN f32':>17s} {'torch+mpc BN f64':>17s}")
    for seed in [int(s) for s in a.seeds.split(",")]:
        model0 = R.make_model(seed)
        x, y = R.make_data(seed, a.bs, a.hw)
        g64 = R.torch_grads(model0, x, y, torch.float64)[1]
        keys = list(g64)
        glob = lambda g: np.sqrt(sum(np.sum((g[k] - g64[k]) ** 2) for k in keys) / sum(np.sum(g64[k] ** 2) for k in keys))
        mpc = "n/a"
        for d in (f"s{seed}_bs{a.bs}", f"bs{a.bs}") if a.hw == 64 else (f"hw{a.hw}_bs{a.bs}",):
            p = os.path.join(a.root, d, "result.json")
            if os.path.exists(p):
                res = json.load(open(p))
                if res["seed"] == seed and res["hw"] == a.hw:
                    rows = res["rows"]
                    mpc = "%9.2e" % np.sqrt(sum(r["mpc"] ** 2 * r["norm64"] ** 2 for r in rows) / sum(r["norm64"] ** 2 for r in rows))
                    break
        print(f"{seed:4d} {mpc:>9s} {glob(grads(model0, x, y)):10.2e} {glob(grads(model0, x, y, torch.float32)):17.2e} "
              f"{glob(grads(model0, x, y, torch.float64)):17.2e}", flush=True)


if __name__ == "__main__":
    main()
