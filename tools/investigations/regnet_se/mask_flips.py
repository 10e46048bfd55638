#!/usr/bin/env python3
"""Issue 44: attribute each f32 gradient's error to ReLU inputs that sit within f32 rounding
of zero (a "mask flip": the f32 forward puts the element on the other side of the kink than
float64 does, so the backward passes, or blocks, that element's whole gradient).

1. Float64 forward + backward (graph kept). Candidates: ReLU input elements with
   |v| < tau * median|v| of their tensor.
2. For each candidate, the exact change of every parameter gradient if its mask flipped:
   Delta_i = +-vjp(ReLU input -> params, e_i * dL/d(ReLU output)_i).
   (A flip changes the forward by |v|, ~1e-6 relative: negligible; it changes the backward
   below that ReLU only, linearly.)
3. For each f32 gradient (mpc's from regnet_se.py's grads.npz, PyTorch mkldnn, native,
   channels_last): greedily pick the flips that explain e = g - g64, report which, and the
   per-parameter error left once they are applied to the float64 reference.

  OMP_NUM_THREADS=1 .venv/bin/python tools/investigations/regnet_se/mask_flips.py \
      --bs 8 --hw 64 --seed 0 --grads /tmp/regnet_se/bs8/grads.npz
"""
import argparse
import copy
import warnings

warnings.filterwarnings("ignore")
import numpy as np
import torch
import torch.nn as nn

import regnet_se as R
import conditioning as C

torch.set_num_threads(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bs", type=int, default=8)
    ap.add_argument("--hw", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tau", type=float, default=3e-5)
    ap.add_argument("--max-cand", type=int, default=400)
    ap.add_argument("--coords", type=int, default=0, help="fit on this many random coordinates (0: all)")
    ap.add_argument("--grads", required=True, help="grads.npz from regnet_se.py (mpc/, t32/, t64/)")
    a = ap.parse_args()
    model0 = R.make_model(a.seed)
    x, y = R.make_data(a.seed, a.bs, a.hw)

    # float64 forward with every ReLU input and output kept
    m = C.no_inplace(copy.deepcopy(model0)).double()
    m.train()
    names = {mod: n for n, mod in m.named_modules()}
    rin, rout = {}, {}

    def fh(mod, inp, out):
        n = names[mod]
        assert n not in rin, f"ReLU {n} called twice"
        rin[n], rout[n] = inp[0], out
        out.retain_grad()
    for mod in m.modules():
        if isinstance(mod, nn.ReLU):
            mod.register_forward_hook(fh)
    out = m(torch.from_numpy(x).double())
    loss = nn.CrossEntropyLoss()(out, torch.from_numpy(y))
    params = [p for _, p in m.named_parameters()]
    pnames = [n for n, _ in m.named_parameters()]
    loss.backward(retain_graph=True)
    g64 = {n: p.grad.detach().numpy().copy() for n, p in zip(pnames, params)}

    # candidates
    cands = []
    for n, v in rin.items():
        vv = v.detach().numpy()
        med = np.median(np.abs(vv))
        r = np.abs(vv) / med
        for idx in np.argwhere(r < a.tau):
            idx = tuple(int(i) for i in idx)
            # dL/d(ReLU output) at the element, read now: later autograd.grad calls would
            # accumulate into the retained .grad
            cands.append((float(r[idx]), n, idx, rout[n].grad[idx].item()))
    cands.sort()
    print(f"bs={a.bs} hw={a.hw} seed={a.seed}: {len(cands)} ReLU input elements with |v| < {a.tau:g} * median "
          f"(of {sum(v.numel() for v in rin.values())} in {len(rin)} ReLUs)")
    cands = cands[:a.max_cand]

    nparam = sum(p.numel() for p in params)
    # The selection works on a fixed random subset of the gradient's coordinates (--coords;
    # 0 = all); the chosen flips' full deltas are recomputed for the final errors.
    sub = np.sort(np.random.default_rng(0).choice(nparam, a.coords, replace=False)) if a.coords else slice(None)

    def delta(k):
        r, n, idx, up = cands[k]
        v = rin[n]
        sign = 1.0 if v[idx].item() <= 0 else -1.0  # closed mask opens: +, open mask closes: -
        go = torch.zeros_like(v)
        go[idx] = sign * up
        gs = torch.autograd.grad(v, params, grad_outputs=go, retain_graph=True, allow_unused=True)
        return np.concatenate([(g.detach().numpy() if g is not None else np.zeros(p.shape)).ravel()
                               for g, p in zip(gs, params)])
    D = np.zeros((len(cands), a.coords or nparam), dtype=np.float32)
    for k in range(len(cands)):
        D[k] = delta(k)[sub]
    G = (D.astype(np.float64) @ D.T.astype(np.float64)) if len(D) else np.zeros((0, 0))
    flat64 = np.concatenate([g64[n].ravel() for n in pnames])
    sizes = [g64[n].size for n in pnames]

    z = np.load(a.grads)
    assert np.allclose(np.concatenate([z["t64/" + n].ravel() for n in pnames]), flat64, rtol=1e-10, atol=1e-15), \
        "grads.npz is from another model/data"
    impls = {"mpc": "mpc/", "torch f32": "t32/"}
    flats = {k: np.concatenate([z[p + n].ravel() for n in pnames]) for k, p in impls.items()}
    for label, kw in (("torch f32 native", dict(mkldnn=False)), ("torch f32 channels_last", dict(channels_last=True))):
        _, g, _ = R.torch_grads(model0, x, y, torch.float32, **kw)
        flats[label] = np.concatenate([g[n].ravel() for n in pnames])

    def per_param(flat_ref, flat):
        out, o = [], 0
        for s in sizes:
            out.append(np.linalg.norm(flat[o:o + s] - flat_ref[o:o + s]) / np.linalg.norm(flat_ref[o:o + s]))
            o += s
        return np.array(out)

    se1 = [i for i, n in enumerate(pnames) if n.endswith("se.fc1.weight")]
    print(f"{'implementation':26s} {'err before':>10s} {'max se.fc1':>10s} | {'flips':>5s} {'err after':>10s} "
          f"{'max se.fc1':>10s} {'max param':>10s}  flipped elements (ReLU, index, |v|/median)")
    for k, fl in flats.items():
        e = fl - flat64
        before = np.linalg.norm(e) / np.linalg.norm(flat64)
        b = D.astype(np.float64) @ e[sub] if len(D) else np.zeros(0)
        ee = float(e[sub] @ e[sub])

        def cost(sel):  # ||e - sum_{i in sel} D_i||^2 from the Gram matrix
            sel = list(sel)
            return ee - 2 * b[sel].sum() + G[np.ix_(sel, sel)].sum()
        chosen = []
        while True:  # greedy additions, then single removals and swaps, until nothing helps
            best, move = cost(chosen), None
            for i in range(len(D)):
                if i not in chosen and cost(chosen + [i]) < 0.98 * best:
                    best, move = cost(chosen + [i]), chosen + [i]
            for j in chosen:
                rest = [c for c in chosen if c != j]
                if cost(rest) < 0.98 * best:
                    best, move = cost(rest), rest
                for i in range(len(D)):
                    if i not in chosen and cost(rest + [i]) < 0.98 * best:
                        best, move = cost(rest + [i]), rest + [i]
            if move is None:
                break
            chosen = move
        ref = flat64 + (sum(delta(i) for i in chosen) if chosen else 0)
        pb, pa = per_param(flat64, fl), per_param(ref, fl)
        after = np.linalg.norm(fl - ref) / np.linalg.norm(ref)
        desc = "; ".join(f"{cands[i][1].replace('trunk_output.', '')}{list(cands[i][2])} {cands[i][0]:.1e}" for i in chosen)
        print(f"{k:26s} {before:10.2e} {pb[se1].max():10.2e} | {len(chosen):5d} {after:10.2e} {pa[se1].max():10.2e} "
              f"{pa.max():10.2e}  {desc}")


if __name__ == "__main__":
    main()
