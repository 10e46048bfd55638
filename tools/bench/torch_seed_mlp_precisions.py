#!/usr/bin/python3
"""Seed MLP (1024-4096-4096-10, batch 256, AdamW) step time in Debian PyTorch (CPU), f32 and
bf16 autocast, median of 6 steps after 2 warm-up. Companion to tools/bench/bench.py for the
bf16 row until bench.py runs mpc in bf16 itself. Run: /usr/bin/python3 THIS_FILE"""
import time, torch, torch.nn as nn, numpy as np, statistics, sys
torch.set_num_threads(2); torch.manual_seed(0)
m = nn.Sequential(nn.Linear(1024,4096), nn.ReLU(), nn.Linear(4096,4096), nn.ReLU(), nn.Linear(4096,10))
opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.0)
x = torch.randn(256,1024); y = torch.randint(0,10,(256,))
lf = nn.CrossEntropyLoss()
def step(bf16):
    opt.zero_grad(set_to_none=True)
    if bf16:
        with torch.autocast('cpu', dtype=torch.bfloat16):
            out = m(x)
        loss = lf(out.float(), y)
    else:
        loss = lf(m(x), y)
    loss.backward(); opt.step(); return loss.item()
for bf16 in (False, True):
    for _ in range(2): step(bf16)
    ts=[]
    for _ in range(6):
        t=time.perf_counter(); step(bf16); ts.append(time.perf_counter()-t)
    print('torch', 'bf16' if bf16 else 'f32', 'median ms/step %.1f' % (1000*statistics.median(ts)))
