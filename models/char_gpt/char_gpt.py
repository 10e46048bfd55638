"""A GPT-style character-level decoder, defined once for export and for golden runs.

Pre-norm transformer blocks (LayerNorm -> causal multi-head self-attention -> residual,
LayerNorm -> MLP(4x, GELU) -> residual), learned token and position embeddings, a final
LayerNorm and an untied output projection. Attention is written out (q, k, v
projections, scaled QK^T, a causal mask applied with masked_fill, softmax, weighted
sum), which is what torch.onnx.export emits for scaled-dot-product attention: MatMul,
Transpose, Reshape, Mul/Div, Where (the mask), Softmax. Dropout is omitted so runs are
deterministic and comparable step by step.

The logits are returned flattened to [batch*context, vocab] so a plain softmax
cross-entropy against labels flattened to [batch*context] is the language-model loss.
"""

import math

import torch
from torch import nn


class CausalSelfAttention(nn.Module):
    def __init__(self, width, heads, context):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        mask = torch.tril(torch.ones(context, context, dtype=torch.bool))
        self.register_buffer("causal", mask.view(1, 1, context, context), persistent=False)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        hd = c // self.heads
        q = q.view(b, t, self.heads, hd).transpose(1, 2)
        k = k.view(b, t, self.heads, hd).transpose(1, 2)
        v = v.view(b, t, self.heads, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(~self.causal[:, :, :t, :t], float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, width, heads, context):
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, context)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class CharGpt(nn.Module):
    def __init__(self, vocab, layers=6, width=384, heads=6, context=256):
        super().__init__()
        self.context = context
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Parameter(torch.zeros(1, context, width))
        nn.init.normal_(self.pos, std=0.02)
        self.blocks = nn.Sequential(*[Block(width, heads, context) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens):
        b, t = tokens.shape
        x = self.tok(tokens) + self.pos[:, :t, :]
        x = self.ln_f(self.blocks(x))
        return self.head(x).reshape(b * t, -1)


def export(model, path, batch, context):
    """Exports with static shapes (the batch is fixed by the spec) and constant folding,
    so shape arithmetic is folded into constants; opset 17."""
    dummy = torch.zeros(batch, context, dtype=torch.int64)
    torch.onnx.export(
        model, (dummy,), path,
        opset_version=17,
        input_names=["tokens"],
        output_names=["logits"],
        training=torch.onnx.TrainingMode.TRAINING,
        do_constant_folding=True,
    )
