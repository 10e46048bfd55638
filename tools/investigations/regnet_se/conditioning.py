#!/usr/bin/env python3
"""Issue 44: why are regnet_y_400mf's gradients at 64x64 so far from float64 in f32?

PyTorch only (no mpc): same model, data and loss as regnet_se.py.
1. Per BatchNorm (from the loss backwards): the relative error of its incoming gradient dY
   in f32 (mkldnn and native), the cancellation in its bias gradient sum_{n,h,w} dY
   (kappa = || sum |dY| || / || sum dY ||, over channels), and the bias gradient's error.
2. Float64 runs with f32-sized noise: every Conv/BatchNorm output (forward) or every
   gradient arriving at a Conv/BatchNorm output (backward) multiplied by (1 + 2^-24 r),
   r uniform in [-1, 1]. If these alone move the gradients by ~1e-2, the gradient is
   ill-conditioned and any f32 implementation lands anywhere in that range.

  OMP_NUM_THREADS=1 .venv/bin/python tools/investigations/regnet_se/conditioning.py --bs 8 --hw 64 --seed 0
"""
import argparse
import copy
import warnings

warnings.filterwarnings("ignore")
import numpy as np
import torch
import torch.nn as nn

import regnet_se as R

torch.set_num_threads(1)
U = 2.0 ** -24


def no_inplace(m):
    for mod in m.modules():
        if hasattr(mod, "inplace"):
            mod.inplace = False
    return m


def run(model0, x, y, dtype, mkldnn=True, fwd_noise=None, bwd_noise=None):
    m = no_inplace(copy.deepcopy(model0)).to(dtype)
    m.train()
    names = {mod: n for n, mod in m.named_modules()}
    dys, xin, hs = {}, {}, []

    def fhook(mod, inp, out):
        if isinstance(mod, nn.BatchNorm2d):
            xin[names[mod]] = inp[0].detach().double().numpy().copy()
        if fwd_noise is not None:
            out = out * (1 + U * (2 * torch.rand(out.shape, generator=fwd_noise, dtype=out.dtype) - 1))
        if out.requires_grad:
            n = names[mod]

            def th(g, n=n):
                if bwd_noise is not None:
                    g = g * (1 + U * (2 * torch.rand(g.shape, generator=bwd_noise, dtype=g.dtype) - 1))
                if isinstance(mod, nn.BatchNorm2d):
                    dys[n] = g.detach().double().clone()
                return g
            out.register_hook(th)
        return out

    for mod in m.modules():
        if isinstance(mod, (nn.Conv2d, nn.BatchNorm2d)):
            hs.append(mod.register_forward_hook(fhook))
    prev = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = mkldnn
    try:
        out = m(torch.from_numpy(x).to(dtype))
        loss = nn.CrossEntropyLoss()(out, torch.from_numpy(y))
        loss.backward()
    finally:
        torch.backends.mkldnn.enabled = prev
    g = {n: p.grad.detach().double().numpy().copy() for n, p in m.named_parameters()}
    bn_order = [n for n, mod in m.named_modules() if isinstance(mod, nn.BatchNorm2d)]
    return g, {k: v.numpy() for k, v in dys.items()}, bn_order, xin


def glob(g, g64, keys):
    num = sum(np.sum((g[k] - g64[k]) ** 2) for k in keys)
    den = sum(np.sum(g64[k] ** 2) for k in keys)
    return float(np.sqrt(num / den))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bs", type=int, default=8)
    ap.add_argument("--hw", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--noise-runs", type=int, default=3)
    ap.add_argument("--all-bn", action="store_true", help="print every BatchNorm, not only block4/3")
    a = ap.parse_args()
    model0 = R.make_model(a.seed)
    x, y = R.make_data(a.seed, a.bs, a.hw)

    g64, dy64, order, xin64 = run(model0, x, y, torch.float64)
    g32, dy32, _, _ = run(model0, x, y, torch.float32)
    gnm, dynm, _, _ = run(model0, x, y, torch.float32, mkldnn=False)
    keys = list(g64)
    se1 = [k for k in keys if k.endswith("se.fc1.weight")]

    print(f"bs={a.bs} hw={a.hw} seed={a.seed}")
    print("Per BatchNorm, from the loss backwards. dY = gradient arriving at the BN output.")
    print("kappa_b = ||sum|dY| || / ||sum dY|| (cancellation in the bias gradient), kappa_w likewise for sum dY*xhat")
    print(f"{'BatchNorm':40s} {'NHW':>5s} {'kappa_b':>8s} {'kappa_w':>8s} | {'dY err':>8s} {'bias err':>8s} {'w err':>8s} | "
          f"{'dY err':>8s} {'bias err':>8s}   (f32 mkldnn | f32 native)")
    bnmods = dict(model0.named_modules())
    for n in reversed(order):
        if not a.all_bn and not ("block4" in n or "block3-5" in n):
            continue
        d64 = dy64[n]
        nhw = d64.shape[0] * d64.shape[2] * d64.shape[3]
        s = d64.sum(axis=(0, 2, 3))
        kb = np.linalg.norm(np.abs(d64).sum(axis=(0, 2, 3))) / np.linalg.norm(s)
        xi = xin64[n]
        mu = xi.mean(axis=(0, 2, 3), keepdims=True)
        xh = (xi - mu) / np.sqrt(xi.var(axis=(0, 2, 3), keepdims=True) + bnmods[n].eps)
        t = d64 * xh
        kw = np.linalg.norm(np.abs(t).sum(axis=(0, 2, 3))) / np.linalg.norm(t.sum(axis=(0, 2, 3)))
        e = lambda d: np.linalg.norm(d - d64) / np.linalg.norm(d64)
        print(f"{n.replace('trunk_output.', ''):40s} {nhw:5d} {kb:8.1e} {kw:8.1e} | {e(dy32[n]):8.1e} "
              f"{R.rel(g32[n + '.bias'], g64[n + '.bias']):8.1e} {R.rel(g32[n + '.weight'], g64[n + '.weight']):8.1e} | "
              f"{e(dynm[n]):8.1e} {R.rel(gnm[n + '.bias'], g64[n + '.bias']):8.1e}")

    print()
    print("Float64 with f32-sized noise (relative 2^-24) vs clean float64:")
    print(f"{'run':32s} {'global':>9s} {'max se.fc1.w':>12s} {'median param':>12s}")

    def line(name, g):
        print(f"{name:32s} {glob(g, g64, keys):9.2e} {max(R.rel(g[k], g64[k]) for k in se1):12.2e} "
              f"{np.median([R.rel(g[k], g64[k]) for k in keys]):12.2e}")
    line("f32 (mkldnn, PyTorch default)", g32)
    line("f32 (mkldnn disabled)", gnm)
    for i in range(a.noise_runs):
        gen = torch.Generator().manual_seed(100 + i)
        line(f"f64 + forward noise #{i}", run(model0, x, y, torch.float64, fwd_noise=gen)[0])
    for i in range(a.noise_runs):
        gen = torch.Generator().manual_seed(200 + i)
        line(f"f64 + backward noise #{i}", run(model0, x, y, torch.float64, bwd_noise=gen)[0])
    # input only: the data rounded differently (one ulp-sized change of x)
    xp = (x.astype(np.float64) * (1 + U * (2 * np.random.default_rng(7).random(x.shape) - 1)))
    line("f64, input x*(1+2^-24 r)", run(model0, xp, y, torch.float64)[0])


if __name__ == "__main__":
    main()
