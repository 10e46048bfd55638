#!/usr/bin/env python3
"""Builds the corpus of tiny real architectures exported by PyTorch 2.x (tests/golden/corpus).

Every model is built from its library's constructor / config class with random weights
(torch.manual_seed(0) right before construction; nothing is downloaded), then, in train()
mode and from an identical deep copy each time, exported in up to three ways:

  ts18      torch.onnx.export(model, (x,), path, dynamo=False, opset_version=18,
                              training=torch.onnx.TrainingMode.TRAINING,
                              do_constant_folding=False, input_names=['x'],
                              output_names=['logits'])
  dynamo    torch.onnx.export(model, (x,), path)          # what a user gets by default
  dynamo23  torch.onnx.export(model, (x,), path, opset_version=23)
            kept only when its op types differ from the `dynamo` export's
  ts18fn    the ts18 call with export_modules_as_functions={the model's block classes}
            (FUNCTION_MODULES): the blocks become ONNX local functions; only for the
            models listed there

x is the first batch of the model's features (batch 4, static shapes). A fourth export,
`torch.onnx.export(model, (x,), tmp, optimize=False)`, is made only to diagnose what the
default optimizer did (which initializers it merged/removed/created); it is not kept.

Then PyTorch trains deep copies of the same untrained model for 20 steps (batch i = rows
4i..4i+3, no shuffling, nn.CrossEntropyLoss mean over all positions) and writes each run's
losses (loss of step i before step i's update, '%.9g'):

  f32_adamw   AdamW(lr=1e-3, betas=(0.9,0.999), eps=1e-8, weight_decay=0.01)
  f32_sgd     SGD(lr=0.05, momentum=0.9)         (mlp, decoder_buffers, encoder_layer_mask)
  bf16_adamw  the same AdamW, forward+loss under torch.autocast('cpu', dtype=torch.bfloat16)

Per model directory: features.npy, labels.npy, <run>_losses.txt, <exporter>/model.onnx
(+ model.onnx.data when the exporter writes external data), <exporter>_<run>.spec
(mpc.TrainSpec text). <out>/manifest.json describes every export; <out>/README.md is the
generated status table.

Usage (from the repository root):
  .venv/bin/python tools/export_corpus/make_corpus.py [--models mlp,cnn_bn] [--out tests/golden/corpus]

Deterministic: one torch thread, fixed seeds; rerunning with the pinned versions
(tools/pyenv/requirements.txt) rewrites every file byte for byte.
"""

import argparse
import ast
import collections
import contextlib
import copy
import io
import json
import logging
import math
import os
import re
import shutil
import sys
import tempfile
import traceback
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import onnx
from onnx import numpy_helper

torch.set_num_threads(1)
warnings.filterwarnings("ignore")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
N_EXAMPLES = 80
BATCH = 4
STEPS = 20
EXPORTERS = ("ts18", "dynamo", "dynamo23", "noopt", "ts18fn")
SGD_MODELS = ("mlp", "decoder_buffers", "encoder_layer_mask")

EXPORT_CALLS = {
    "ts18": "torch.onnx.export(model, (x,), path, dynamo=False, opset_version=18, "
            "training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False, "
            "input_names=['x'], output_names=['logits'])",
    "dynamo": "torch.onnx.export(model, (x,), path)",
    "dynamo23": "torch.onnx.export(model, (x,), path, opset_version=23)",
    # The dynamo exporter without onnxscript's inference optimizer (no folding, no merging of
    # equal initializers, no BatchNorm fused into convolutions): what docs/onnx-import.md
    # recommends for training.
    "noopt": "torch.onnx.export(model, (x,), path, optimize=False)",
    # TorchScript with modules written as ONNX local functions (one per class, nested where
    # the classes nest); the classes per model are FUNCTION_MODULES'.
    "ts18fn": "torch.onnx.export(model, (x,), path, dynamo=False, opset_version=18, "
              "training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False, "
              "input_names=['x'], output_names=['logits'], export_modules_as_functions=FUNCTION_MODULES[model])",
}

# The module classes each model's ts18fn export writes as local functions (models not
# listed get no ts18fn export): library blocks, nested functions (a LayerNorm function
# inside a block function), functions with attributes (GroupNorm's num_groups, eps).
FUNCTION_MODULES = {
    "mlp": ["torch.nn.Linear"],
    "cnn_bn": ["torch.nn.BatchNorm2d", "torch.nn.Conv2d"],
    "decoder_buffers": ["make_corpus.DecoderBlock", "torch.nn.LayerNorm"],
    "encoder_layer_mask": ["torch.nn.TransformerEncoderLayer"],
    "vit": ["timm.models.vision_transformer.Block", "timm.layers.mlp.Mlp"],
    "convnext": ["timm.models.convnext.ConvNeXtBlock"],
    "swin": ["torchvision.models.swin_transformer.SwinTransformerBlock"],
    "unet": ["torch.nn.GroupNorm"],
    "efficientnet": ["timm.models._efficientnet_blocks.SqueezeExcite"],
}


def function_classes(case_name):
    """The classes named in FUNCTION_MODULES[case_name]."""
    import importlib
    out = set()
    for path in FUNCTION_MODULES[case_name]:
        module, _, name = path.rpartition(".")
        out.add(globals()[name] if module == "make_corpus" else getattr(importlib.import_module(module), name))
    return out

RUNS = {
    "f32_adamw": dict(opt="adamw", bf16=False,
                      spec="optimizer { adamw { lr: 0.001 beta1: 0.9 beta2: 0.999 eps: 1e-08 weight_decay: 0.01 } }"),
    "f32_sgd": dict(opt="sgd", bf16=False,
                    spec="optimizer { sgd { lr: 0.05 momentum: 0.9 } }"),
    "bf16_adamw": dict(opt="adamw", bf16=True,
                       spec="optimizer { adamw { lr: 0.001 beta1: 0.9 beta2: 0.999 eps: 1e-08 weight_decay: 0.01 } }"),
}


# ----------------------------------------------------------------------------------------
# Models
# ----------------------------------------------------------------------------------------

def build_mlp():
    return nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 5))


def build_cnn_bn():
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))


def _rotate_half(t):
    t1, t2 = t.chunk(2, dim=-1)
    return torch.cat((-t2, t1), dim=-1)


class DecoderBlock(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x, mask, cos, sin):
        b, t, d = x.shape
        hd = d // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q = q.view(b, t, self.heads, hd).transpose(1, 2)
        k = k.view(b, t, self.heads, hd).transpose(1, 2)
        v = v.view(b, t, self.heads, hd).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd)) + mask
        att = att.softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyDecoder(nn.Module):
    """Causal decoder LM whose buffers are a -inf mask, a rotary inv_freq and position_ids."""

    def __init__(self, vocab=64, ctx=16, d=32, heads=4, layers=2):
        super().__init__()
        hd = d // heads
        self.tok_emb = nn.Embedding(vocab, d)
        self.pos_emb = nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(DecoderBlock(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)
        self.register_buffer("mask", torch.full((ctx, ctx), float("-inf")).triu(1))
        self.register_buffer("inv_freq", 1.0 / (10000.0 ** (torch.arange(0, hd, 2).float() / hd)))
        self.register_buffer("position_ids", torch.arange(ctx))

    def forward(self, tokens):
        t = tokens.shape[1]
        pos = self.position_ids[:t]
        freqs = pos.float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        mask = self.mask[:t, :t]
        h = self.tok_emb(tokens) + self.pos_emb(pos)
        for blk in self.blocks:
            h = blk(h, mask, cos, sin)
        return self.head(self.ln_f(h))


def build_decoder_buffers():
    return TinyDecoder()


class EncoderLayerLM(nn.Module):
    """nn.TransformerEncoderLayer called with src_mask = a registered -inf causal mask buffer."""

    def __init__(self, vocab=64, ctx=16, d=32):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx, d)
        self.register_buffer("position_ids", torch.arange(ctx))
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(ctx))
        self.layer = nn.TransformerEncoderLayer(d_model=d, nhead=4, dim_feedforward=64, dropout=0.0,
                                                batch_first=True, activation="gelu")
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        h = self.emb(tokens) + self.pos(self.position_ids)
        h = self.layer(h, src_mask=self.mask)
        return self.head(h)


def build_encoder_layer_mask():
    return EncoderLayerLM()


class LogitsOnly(nn.Module):
    """forward(input_ids) -> model(input_ids=input_ids).logits"""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids).logits


class T5LogitsOnly(nn.Module):
    """forward(input_ids) -> logits, with decoder_input_ids = input_ids shifted right."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        decoder_input_ids = self.model._shift_right(input_ids)
        return self.model(input_ids=input_ids, decoder_input_ids=decoder_input_ids).logits


def build_gpt2():
    import transformers as tf
    cfg = tf.GPT2Config(n_layer=2, n_embd=32, n_head=4, n_positions=32, vocab_size=64,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False,
                        bos_token_id=0, eos_token_id=0)
    return LogitsOnly(tf.GPT2LMHeadModel(cfg))


def build_llama():
    import transformers as tf
    cfg = tf.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=64,
                         max_position_embeddings=32, use_cache=False,
                         bos_token_id=0, eos_token_id=0, pad_token_id=None)
    return LogitsOnly(tf.LlamaForCausalLM(cfg))


def build_bert_mlm():
    import transformers as tf
    cfg = tf.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, vocab_size=64, max_position_embeddings=32,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=0)
    return LogitsOnly(tf.BertForMaskedLM(cfg))


def build_vit():
    import timm
    return timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8,
                             embed_dim=32, depth=2, num_heads=4, num_classes=10)


def build_t5():
    import transformers as tf
    cfg = tf.T5Config(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
                      vocab_size=64, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0,
                      eos_token_id=1, use_cache=False)
    return T5LogitsOnly(tf.T5ForConditionalGeneration(cfg))


def build_convnext():
    import timm
    # ls_init_value 0.5 instead of timm's 1e-6: with 1e-6 the blocks contribute ~1e-6 of
    # the residual stream, so their forward/backward would barely show in the loss.
    return timm.create_model("convnext_tiny", pretrained=False, depths=(1, 1, 2, 1), dims=(8, 16, 24, 32),
                             ls_init_value=0.5, drop_path_rate=0.0, num_classes=10)


def build_efficientnet():
    from timm.models.efficientnet import _gen_efficientnet
    # output_stride=16 (the last stride-2 stage dilated instead) keeps the last stages at 2x2:
    # at 1x1, BatchNorm over the 4 values of a batch makes PyTorch's own f32 and f64 runs
    # differ by 5e-4 (32x32 input) to 0.2 (16x16) after 20 steps; with it they agree to ~1e-6.
    return _gen_efficientnet("efficientnet_b0", channel_multiplier=0.1, depth_multiplier=0.25,
                             pretrained=False, num_classes=10, drop_rate=0.0, drop_path_rate=0.0,
                             output_stride=16)


def build_swin():
    from torchvision.models.swin_transformer import SwinTransformer
    # 16x16 input, patch 2: stage 1 has 8x8 tokens = 2x2 windows of 4x4 (its second block
    # shifted, with the attention mask), then PatchMerging to 4x4 tokens = one window (no shift).
    return SwinTransformer(patch_size=[2, 2], embed_dim=16, depths=[2, 1], num_heads=[2, 4],
                           window_size=[4, 4], stochastic_depth_prob=0.0, num_classes=10)


def _gn_block(i, o):
    return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.GroupNorm(4, o), nn.SiLU())


class TinyUNet(nn.Module):
    """Two-level UNet: GroupNorm, max-pool down, nearest (nn.Upsample) and bilinear
    (F.interpolate) up, skip concatenations, 1x1 per-pixel classification head."""

    def __init__(self, classes=4):
        super().__init__()
        self.enc1 = _gn_block(3, 8)
        self.enc2 = _gn_block(8, 16)
        self.mid = _gn_block(16, 32)
        self.down = nn.MaxPool2d(2)
        self.up_nearest = nn.Upsample(scale_factor=2, mode="nearest")
        self.dec2 = _gn_block(32 + 16, 16)
        self.dec1 = _gn_block(16 + 8, 8)
        self.head = nn.Conv2d(8, classes, 1)

    def forward(self, images):
        e1 = self.enc1(images)
        e2 = self.enc2(self.down(e1))
        m = self.mid(self.down(e2))
        d2 = self.dec2(torch.cat([self.up_nearest(m), e2], dim=1))
        up = F.interpolate(d2, scale_factor=2, mode="bilinear", align_corners=False)
        d1 = self.dec1(torch.cat([up, e1], dim=1))
        return self.head(d1)


def build_unet():
    return TinyUNet()


# name, builder, input (kind, shape-without-N, vocab), classes, label shape-without-N,
# loss layout ('class': [N,C]; 'seq': [N,T,V] flattened to [N*T,V]; 'pixel': [N,C,H,W]),
# data seed, description.
Case = collections.namedtuple("Case", "name build inp vocab classes label_shape layout seed desc")
CASES = [
    Case("mlp", build_mlp, ("float", (20,)), None, 5, (), "class", 1,
         "Sequential(Linear(20,64), ReLU, Linear(64,64), GELU, Linear(64,5))"),
    Case("cnn_bn", build_cnn_bn, ("float", (3, 16, 16)), None, 10, (), "class", 2,
         "Conv(3,16)-BatchNorm2d-ReLU-MaxPool2d-Conv(16,32)-BatchNorm2d-ReLU-AdaptiveAvgPool2d(1)-Flatten-Linear(32,10)"),
    Case("decoder_buffers", build_decoder_buffers, ("tokens", (16,)), 64, 64, (16,), "seq", 3,
         "hand-written causal decoder LM (vocab 64, ctx 16, width 32, 4 heads, 2 layers); buffers: "
         "additive -inf causal mask, rotary inv_freq, position_ids; attention written out"),
    Case("encoder_layer_mask", build_encoder_layer_mask, ("tokens", (16,)), 64, 64, (16,), "seq", 4,
         "Embedding + position Embedding(position_ids buffer) + nn.TransformerEncoderLayer(32, 4, 64, "
         "gelu, batch_first) with src_mask = generate_square_subsequent_mask(16) buffer + Linear head"),
    Case("gpt2", build_gpt2, ("tokens", (16,)), 64, 64, (16,), "seq", 5,
         "transformers GPT2LMHeadModel(n_layer=2, n_embd=32, n_head=4, n_positions=32, vocab 64), logits only"),
    Case("llama", build_llama, ("tokens", (16,)), 64, 64, (16,), "seq", 6,
         "transformers LlamaForCausalLM(hidden 32, intermediate 64, 2 layers, 4 heads, 2 kv heads, vocab 64), logits only"),
    Case("bert_mlm", build_bert_mlm, ("tokens", (16,)), 64, 64, (16,), "seq", 7,
         "transformers BertForMaskedLM(hidden 32, 2 layers, 4 heads, intermediate 64, vocab 64, max_position 32), logits only"),
    Case("vit", build_vit, ("float", (3, 32, 32)), None, 10, (), "class", 8,
         "timm vit_tiny_patch16_224(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4, num_classes=10)"),
    Case("t5", build_t5, ("tokens", (16,)), 64, 64, (16,), "seq", 9,
         "transformers T5ForConditionalGeneration(d_model 32, d_kv 8, d_ff 64, 2+2 layers, 4 heads, vocab 64); "
         "forward(input_ids): decoder_input_ids = model._shift_right(input_ids), returns logits"),
    Case("convnext", build_convnext, ("float", (3, 32, 32)), None, 10, (), "class", 10,
         "timm convnext_tiny(depths=(1,1,2,1), dims=(8,16,24,32), ls_init_value=0.5, num_classes=10)"),
    Case("efficientnet", build_efficientnet, ("float", (3, 32, 32)), None, 10, (), "class", 11,
         "timm efficientnet_b0 generator (_gen_efficientnet) with channel_multiplier=0.1, depth_multiplier=0.25, "
         "output_stride=16, num_classes=10: BatchNorm, SiLU, depthwise (one dilated) convs, squeeze-excite"),
    Case("swin", build_swin, ("float", (3, 16, 16)), None, 10, (), "class", 12,
         "torchvision SwinTransformer(patch_size=[2,2], embed_dim=16, depths=[2,1], num_heads=[2,4], window_size=[4,4])"),
    Case("unet", build_unet, ("float", (3, 16, 16)), None, 4, (16, 16), "pixel", 13,
         "hand-written 2-level UNet: Conv-GroupNorm-SiLU blocks, MaxPool down, nearest nn.Upsample and "
         "bilinear F.interpolate up, skip concat, 1x1 head to 4 classes per pixel"),
]
CASE_BY_NAME = {c.name: c for c in CASES}


# ----------------------------------------------------------------------------------------
# Data, loss, training
# ----------------------------------------------------------------------------------------

def make_data(case):
    rng = np.random.default_rng(case.seed)
    kind, shape = case.inp
    if kind == "float":
        x = rng.standard_normal((N_EXAMPLES,) + shape).astype(np.float32)
    else:
        x = rng.integers(0, case.vocab, (N_EXAMPLES,) + shape, dtype=np.int64)
    y = rng.integers(0, case.classes, (N_EXAMPLES,) + case.label_shape, dtype=np.int64)
    return x, y


def loss_fn(case, logits, labels):
    ce = nn.CrossEntropyLoss()
    if case.layout == "seq":
        return ce(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
    return ce(logits, labels)


def train(case, pristine, x, y, run, f64=False):
    """PyTorch's losses of `run`; f64=True runs the same in float64 (conditioning check only)."""
    cfg = RUNS[run]
    model = copy.deepcopy(pristine)
    if f64:
        model = model.double()
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    if cfg["opt"] == "adamw":
        opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    else:
        opt = torch.optim.SGD(params, lr=0.05, momentum=0.9)
    losses = []
    for i in range(STEPS):
        xb = torch.from_numpy(x[i * BATCH:(i + 1) * BATCH])
        if f64 and xb.is_floating_point():
            xb = xb.double()
        yb = torch.from_numpy(y[i * BATCH:(i + 1) * BATCH])
        opt.zero_grad(set_to_none=True)
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if cfg["bf16"] else contextlib.nullcontext()
        with ctx:
            out = model(xb)
            loss = loss_fn(case, out, yb)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach().float().item()))
    return losses


# ----------------------------------------------------------------------------------------
# Export and inspection
# ----------------------------------------------------------------------------------------

class _ListHandler(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.records = []

    def emit(self, record):
        self.records.append(record.getMessage())


@contextlib.contextmanager
def capture_dedup_log():
    """Collects onnx_ir's 'Replaced initializer A with existing initializer B' messages, and
    the folded_from metadata of every initializer as DeduplicateInitializersPass sees it (an
    intermediate folded constant merged away leaves no other trace of where it came from).
    Observation only: the pass itself runs unchanged."""
    from onnx_ir.passes.common import initializer_deduplication as dedup_mod
    lg = logging.getLogger(dedup_mod.__name__)
    h = _ListHandler()
    old_level, old_prop = lg.level, lg.propagate
    lg.addHandler(h)
    lg.setLevel(logging.INFO)
    lg.propagate = False
    folded_seen = {}
    cls = dedup_mod.DeduplicateInitializersPass
    orig_call = cls.call

    def call(self, model):
        for graph in model.graphs():
            for name, v in graph.initializers.items():
                ff = v.metadata_props.get(META_FOLDED)
                if ff is not None:
                    folded_seen.setdefault(name, ff)
        return orig_call(self, model)

    cls.call = call
    try:
        yield h.records, folded_seen
    finally:
        cls.call = orig_call
        lg.removeHandler(h)
        lg.setLevel(old_level)
        lg.propagate = old_prop


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _clean_text(msg, out_dir, tmp_dir):
    msg = ANSI.sub("", msg)
    for d, repl in ((out_dir, "<out>"), (tmp_dir, "<tmp>"), (REPO, "<repo>")):
        if d:
            msg = msg.replace(d, repl)
    return re.sub(r"0x[0-9a-fA-F]{6,}", "0x..", msg)


def clean_error(e, out_dir, tmp_dir):
    """(first line, next few lines, first line of the innermost cause or None)."""
    msg = _clean_text(f"{type(e).__name__}: {str(e).strip()}", out_dir, tmp_dir)
    lines = [l.rstrip() for l in msg.splitlines() if l.strip()]
    first = lines[0][:400] if lines else type(e).__name__
    cause = e
    while cause.__cause__ is not None:
        cause = cause.__cause__
    cause_line = None
    if cause is not e:
        cl = [l for l in _clean_text(f"{type(cause).__name__}: {str(cause).strip()}", out_dir, tmp_dir).splitlines()
              if l.strip()]
        cause_line = cl[0][:400] if cl else type(cause).__name__
    return first, [l[:300] for l in lines[1:6]], cause_line


@contextlib.contextmanager
def quiet_fds():
    """Sends what the exporters print (Python and C++ alike) to a scratch file."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def do_export(exporter, pristine, x, path, **extra):
    """Exports a fresh deep copy of the untrained model, in train() mode."""
    model = copy.deepcopy(pristine)
    model.train()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with quiet_fds():
        if exporter == "ts18":
            torch.onnx.export(model, (x,), path, dynamo=False, opset_version=18,
                              training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                              input_names=["x"], output_names=["logits"])
        elif exporter == "dynamo":
            torch.onnx.export(model, (x,), path, **extra)
        elif exporter == "dynamo23":
            torch.onnx.export(model, (x,), path, opset_version=23, **extra)
        elif exporter == "noopt":
            torch.onnx.export(model, (x,), path, optimize=False, **extra)
        elif exporter == "ts18fn":
            torch.onnx.export(model, (x,), path, dynamo=False, opset_version=18,
                              training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                              input_names=["x"], output_names=["logits"], **extra)
        else:
            raise ValueError(exporter)


DTYPE_NAMES = {v: k.lower() for k, v in onnx.TensorProto.DataType.items()}


def _shape_of(vi):
    t = vi.type.tensor_type
    dims = []
    for d in t.shape.dim:
        dims.append(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?"))
    return DTYPE_NAMES.get(t.elem_type, str(t.elem_type)), dims


def _count_ops(nodes, counts):
    for n in nodes:
        key = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"
        counts[key] += 1
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                _count_ops(a.g.node, counts)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    _count_ops(g.node, counts)


def _meta(props):
    return {p.key: p.value for p in props}


META_KIND = "pkg.torch.export.graph_signature.InputSpec.kind"
META_PERSISTENT = "pkg.torch.export.graph_signature.InputSpec.persistent"
META_ORIG = "pkg.torch.onnx.original_node_name"
META_FOLDED = "pkg.onnxscript.optimizer.folded_from"


def inspect_export(dirpath, torch_tensors):
    """Manifest entry for dirpath/model.onnx (plus its external data)."""
    path = os.path.join(dirpath, "model.onnx")
    files = {f: os.path.getsize(os.path.join(dirpath, f)) for f in sorted(os.listdir(dirpath))}
    mp = onnx.load(path, load_external_data=False)
    ext_files = sorted({e.value for i in mp.graph.initializer for e in i.external_data if e.key == "location"})
    ext_names = {i.name for i in mp.graph.initializer if i.data_location == onnx.TensorProto.EXTERNAL}
    external = bool(ext_names)
    mpd = onnx.load(path)  # with external data
    opsets = {(o.domain or "ai.onnx"): o.version for o in mp.opset_import}
    counts = collections.Counter()
    _count_ops(mp.graph.node, counts)
    functions = []
    for f in mp.functions:
        fc = collections.Counter()
        _count_ops(f.node, fc)
        functions.append({"domain": f.domain, "name": f.name, "op_types": dict(sorted(fc.items()))})

    vi_meta = {v.name: _meta(v.metadata_props) for v in mp.graph.value_info}
    init_names = {i.name for i in mp.graph.initializer}
    inputs = []
    for v in mp.graph.input:
        if v.name in init_names:
            continue
        dt, shape = _shape_of(v)
        e = {"name": v.name, "dtype": dt, "shape": shape}
        md = _meta(v.metadata_props)
        if META_KIND in md:
            e["kind"] = md[META_KIND]
        inputs.append(e)
    outputs = []
    for v in mp.graph.output:
        dt, shape = _shape_of(v)
        outputs.append({"name": v.name, "dtype": dt, "shape": shape})

    inits = []
    for init in mpd.graph.initializer:
        arr = numpy_helper.to_array(init)
        md = {}
        md.update(vi_meta.get(init.name, {}))
        md.update(_meta(init.metadata_props))
        e = {"name": init.name, "shape": list(init.dims),
             "dtype": DTYPE_NAMES.get(init.data_type, str(init.data_type)),
             "external": init.name in ext_names}
        if META_KIND in md:
            e["kind"] = md[META_KIND]
        if META_PERSISTENT in md:
            e["persistent"] = md[META_PERSISTENT]
        if META_ORIG in md and md[META_ORIG] != init.name:
            e["original_node_name"] = md[META_ORIG]
        if META_FOLDED in md:
            e["folded_from"] = md[META_FOLDED]
        other = {k: v for k, v in md.items() if k not in (META_KIND, META_PERSISTENT, META_ORIG, META_FOLDED)}
        if other:
            e["metadata_other"] = other
        if np.issubdtype(arr.dtype, np.floating) or arr.dtype.kind == "V":
            a = arr.astype(np.float32) if arr.dtype.kind != "V" else None
            nonfinite = int((~np.isfinite(a)).sum()) if a is not None else None
            e["finite"] = nonfinite == 0
            if nonfinite:
                e["nonfinite_count"] = nonfinite
        else:
            e["finite"] = True
        if init.name in torch_tensors:
            t = torch_tensors[init.name].detach().cpu().numpy()
            same = t.shape == arr.shape and t.dtype == arr.dtype and np.array_equal(t, arr, equal_nan=True)
            e["torch_value"] = "equal" if same else "differs"
        inits.append(e)

    try:
        onnx.checker.check_model(path)
        checker = "ok"
    except Exception as ex:  # noqa: BLE001
        checker = clean_error(ex, None, None)[0]

    return {
        "files": files,
        "total_bytes": sum(files.values()),
        "opset": opsets.get("ai.onnx"),
        "opset_imports": dict(sorted(opsets.items())),
        "ir_version": mp.ir_version,
        "producer": f"{mp.producer_name} {mp.producer_version}".strip(),
        "external_data": external,
        "external_data_files": ext_files,
        "onnx_checker": checker,
        "num_nodes": len(mp.graph.node),
        "op_types": dict(sorted(counts.items())),
        "functions": functions,
        "inputs": inputs,
        "outputs": outputs,
        "num_initializers": len(inits),
        "initializers": inits,
    }


def reference_check(dirpath, x, torch_out):
    """Runs the export with onnx.reference on x and compares with PyTorch's train-mode output."""
    from onnx.reference import ReferenceEvaluator
    try:
        mp = onnx.load(os.path.join(dirpath, "model.onnx"))
        sess = ReferenceEvaluator(mp)
        name = [i.name for i in mp.graph.input if i.name not in {t.name for t in mp.graph.initializer}][0]
        out = sess.run(None, {name: x})[0]
        ref = torch_out
        if out.shape != ref.shape:
            return {"error": f"shape {list(out.shape)} != torch {list(ref.shape)}"}
        diff = float(np.max(np.abs(out.astype(np.float64) - ref.astype(np.float64))))
        scale = float(np.max(np.abs(ref)))
        return {"max_abs_diff": float(f"{diff:.2g}"), "max_abs_torch": float(f"{scale:.3g}"),
                "ok": bool(diff <= 1e-4 * max(1.0, scale))}
    except Exception as ex:  # noqa: BLE001
        return {"error": clean_error(ex, None, None)[0]}


def init_values(dirpath):
    mp = onnx.load(os.path.join(dirpath, "model.onnx"))
    return {i.name: numpy_helper.to_array(i) for i in mp.graph.initializer}


def dedup_diagnosis(unopt_dir, default_dir, dedup_log, default_entry):
    """What the default optimizer did to the un-optimized export's initializers."""
    u = init_values(unopt_dir)
    d = init_values(default_dir)
    merged = collections.OrderedDict()
    pat = re.compile(r"Replaced initializer '(.*)' with existing initializer '(.*)'")
    dedup_msgs, folded_seen = dedup_log
    for msg in dedup_msgs:
        m = pat.match(msg)
        if m:
            merged.setdefault(m.group(2), []).append(m.group(1))
    # Follow chains (a merged into b, b later merged into c) so kept names exist in the export.
    resolved = collections.OrderedDict()
    for kept, gone in merged.items():
        k = kept
        seen = set()
        while k not in d and k not in seen:
            seen.add(k)
            nxt = [kk for kk, gg in merged.items() if k in gg]
            if not nxt:
                break
            k = nxt[0]
        resolved.setdefault(k, []).extend(gone)
    merged_all = {g for gs in resolved.values() for g in gs}
    missing = [n for n in u if n not in d]
    new = [n for n in d if n not in u]
    folded = []
    folded_all = set()
    for e in default_entry["initializers"]:
        if e["name"] in new and "folded_from" in e:
            try:
                srcs = [n for n in ast.literal_eval(e["folded_from"]) if n in u]
            except (ValueError, SyntaxError):
                srcs = []
            if srcs:
                folded.append([e["name"], e["shape"], srcs])
                folded_all.update(srcs)
    # Folded constants that were then merged away: where they came from.
    folded_merged = []
    for kept, gs in resolved.items():
        for g in gs:
            if g in u or g not in folded_seen:
                continue
            try:
                srcs = [n for n in ast.literal_eval(folded_seen[g]) if n in u]
            except (ValueError, SyntaxError):
                srcs = []
            if srcs:
                folded_merged.append([kept, g, srcs])
                folded_all.update(srcs)
    removed = [n for n in missing if n not in merged_all and n not in folded_all]
    changed = [n for n in d if n in u and not (d[n].shape == u[n].shape and d[n].dtype == u[n].dtype
                                                and np.array_equal(d[n], u[n], equal_nan=True))]
    merged_orig = [[k, [g for g in gs if g in u]] for k, gs in resolved.items()]
    merged_orig = [m for m in merged_orig if m[1]]
    return {
        "unoptimized_initializers": len(u),
        "default_initializers": len(d),
        "merged": merged_orig,
        "merged_intermediate": [[k, gs] for k, gs in resolved.items() if any(g not in u for g in gs)],
        "folded": folded,
        "folded_then_merged": folded_merged,
        "removed": removed,
        "same_name_new_value": changed,
        "new": new,
    }


def op_type_set(entry):
    s = set(entry["op_types"])
    for f in entry.get("functions", []):
        s |= set(f["op_types"])
    return s


# ----------------------------------------------------------------------------------------
# Writing
# ----------------------------------------------------------------------------------------

def write_spec(path, case, exporter, run, entry):
    feat = entry["inputs"][0]["name"]
    outp = entry["outputs"][0]["name"]
    lines = [
        f"# mpc.TrainSpec: corpus model '{case.name}', export '{exporter}', run '{run}'; "
        f"generated by tools/export_corpus/make_corpus.py",
        f'model: "{exporter}/model.onnx"',
        f'features_input: "{feat}"',
        f'loss {{ type: SOFTMAX_CROSS_ENTROPY output: "{outp}" }}',
        'train_data { npy { features: "features.npy" labels: "labels.npy" } shuffle: false }',
        f"batch_size: {BATCH}",
        f"steps: {STEPS}",
        RUNS[run]["spec"],
        "schedule { constant {} }",
        "seed: 0",
    ]
    if RUNS[run]["bf16"]:
        lines.append("precision { compute: BF16 }")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def versions():
    import onnxscript
    v = {"python": ".".join(map(str, sys.version_info[:3])), "torch": torch.__version__,
         "onnx": onnx.__version__, "onnxscript": onnxscript.__version__, "numpy": np.__version__}
    for mod in ("transformers", "timm", "torchvision"):
        try:
            v[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001
            v[mod] = None
    try:
        import onnx_ir
        v["onnx_ir"] = onnx_ir.__version__
    except Exception:  # noqa: BLE001
        pass
    return v


def run_case(case, out_root, tmp_root):
    print(f"== {case.name}", flush=True)
    mdir = os.path.join(out_root, case.name)
    if os.path.isdir(mdir):
        shutil.rmtree(mdir)
    os.makedirs(mdir)

    torch.manual_seed(0)
    model = case.build()
    model.train()
    pristine = copy.deepcopy(model)
    tensors = dict(pristine.named_parameters())
    tensors.update(dict(pristine.named_buffers()))
    persistent = set(pristine.state_dict().keys())

    x_all, y_all = make_data(case)
    np.save(os.path.join(mdir, "features.npy"), x_all)
    np.save(os.path.join(mdir, "labels.npy"), y_all)
    x = torch.from_numpy(x_all[:BATCH].copy())

    with torch.no_grad():
        m = copy.deepcopy(pristine)
        m.train()
        torch_out = m(x).detach().numpy()

    entry = {
        "description": case.desc,
        "class": f"{type(model).__module__}.{type(model).__qualname__}",
        "num_parameters": int(sum(p.numel() for p in pristine.parameters())),
        "parameters": [[n, list(p.shape)] for n, p in pristine.named_parameters()],
        "buffers": [[n, list(b.shape), str(b.dtype).replace("torch.", ""), n in persistent]
                    for n, b in pristine.named_buffers()],
        "data": {
            "seed": case.seed,
            "features": {"file": "features.npy", "dtype": str(x_all.dtype), "shape": list(x_all.shape),
                         "how": (f"np.random.default_rng({case.seed}).standard_normal({list(x_all.shape)}) as float32"
                                 if case.inp[0] == "float" else
                                 f"np.random.default_rng({case.seed}).integers(0, {case.vocab}, {list(x_all.shape)})")},
            "labels": {"file": "labels.npy", "dtype": str(y_all.dtype), "shape": list(y_all.shape),
                       "how": f"next draw: integers(0, {case.classes}, {list(y_all.shape)})"},
        },
        "torch_output_shape": list(torch_out.shape),
        "loss": {
            "layout": case.layout,
            "class_axis": {"class": 1, "seq": -1, "pixel": 1}[case.layout],
            "pytorch": {"class": "CrossEntropyLoss()(logits [N,C], labels [N])",
                        "seq": "CrossEntropyLoss()(logits.reshape(-1, V), labels.reshape(-1)): mean over N*T positions",
                        "pixel": "CrossEntropyLoss()(logits [N,C,H,W], labels [N,H,W]): mean over N*H*W pixels"}[case.layout],
        },
        "exports": {},
        "runs": {},
    }
    hf = getattr(getattr(model, "model", None), "config", None)
    if hf is not None:
        entry["hf_attn_implementation"] = getattr(hf, "_attn_implementation", None)

    exports = entry["exports"]
    tmp_case = os.path.join(tmp_root, case.name)
    dedup_log = ([], {})
    # ts18fn right after ts18: PyTorch 2.15's TorchScript exporter segfaults (in
    # libtorch_python) on export_modules_as_functions once the dynamo exporter has run in
    # the process (swin, convnext). For the same reason main() runs each model in its own
    # process.
    for exporter in ("ts18", "ts18fn", "dynamo", "dynamo23", "noopt"):
        target = os.path.join(mdir, exporter) if exporter != "dynamo23" else os.path.join(tmp_case, "dynamo23")
        path = os.path.join(target, "model.onnx")
        e = {"call": EXPORT_CALLS[exporter]}
        if exporter == "ts18fn" and case.name not in FUNCTION_MODULES:
            exports[exporter] = {"call": e["call"], "status": "not made"}
            continue
        print(f"   export {exporter}", flush=True)
        try:
            if exporter == "ts18fn":
                e["function_modules"] = FUNCTION_MODULES[case.name]
                do_export(exporter, pristine, x, path, export_modules_as_functions=function_classes(case.name))
            elif exporter == "dynamo":
                with capture_dedup_log() as (recs, seen):
                    do_export(exporter, pristine, x, path)
                dedup_log = (list(recs), dict(seen))
            else:
                do_export(exporter, pristine, x, path)
            e["status"] = "ok"
            e.update(inspect_export(target, tensors))
            e["reference_check"] = reference_check(target, x.numpy(), torch_out)
        except Exception as ex:  # noqa: BLE001
            first, more, cause = clean_error(ex, out_root, tmp_root)
            e = {"call": EXPORT_CALLS[exporter], "status": "error", "error": first,
                 **({"function_modules": FUNCTION_MODULES[case.name]} if exporter == "ts18fn" else {})}
            if cause:
                e["error_cause"] = cause
            if more:
                e["error_more"] = more
            print(f"   {exporter}: {first}" + (f" <- {cause}" if cause else ""), flush=True)
            if os.path.isdir(target):
                shutil.rmtree(target)
        exports[exporter] = e

    # dynamo23: keep only if its op types differ from the default dynamo export's.
    d23 = exports["dynamo23"]
    if d23["status"] == "ok":
        dyn = exports["dynamo"]
        if dyn["status"] == "ok":
            a, b = op_type_set(dyn), op_type_set(d23)
            d23["op_types_only_here"] = sorted(b - a)
            d23["op_types_only_in_dynamo"] = sorted(a - b)
            keep = a != b
        else:
            keep = True
        d23["kept"] = keep
        if keep:
            shutil.move(os.path.join(tmp_case, "dynamo23"), os.path.join(mdir, "dynamo23"))
            d23["files"] = {f: os.path.getsize(os.path.join(mdir, "dynamo23", f))
                            for f in sorted(os.listdir(os.path.join(mdir, "dynamo23")))}
        else:
            d23 = {k: d23[k] for k in ("call", "status", "kept", "opset", "op_types",
                                         "op_types_only_here", "op_types_only_in_dynamo") if k in d23}
            d23["note"] = "same op types as the dynamo export: not written"
            exports["dynamo23"] = d23
    else:
        d23["kept"] = False

    # What the default optimizer did, against an un-optimized export (not kept).
    if exports["dynamo"]["status"] == "ok":
        udir = os.path.join(tmp_case, "unoptimized")
        try:
            do_export("dynamo", pristine, x, os.path.join(udir, "model.onnx"), optimize=False)
            diag = dedup_diagnosis(udir, os.path.join(mdir, "dynamo"), dedup_log, exports["dynamo"])
            u_entry = inspect_export(udir, tensors)
            diag["unoptimized_op_types"] = u_entry["op_types"]
            diag["unoptimized_reference_check"] = reference_check(udir, x.numpy(), torch_out)
            exports["dynamo"]["optimizer_diagnosis"] = diag
        except Exception as ex:  # noqa: BLE001
            exports["dynamo"]["optimizer_diagnosis"] = {"error": clean_error(ex, out_root, tmp_root)[0]}

    # Reference runs.
    runs = ["f32_adamw"] + (["f32_sgd"] if case.name in SGD_MODELS else []) + ["bf16_adamw"]
    for run in runs:
        print(f"   train {run}", flush=True)
        losses = train(case, pristine, x_all, y_all, run)
        with open(os.path.join(mdir, f"{run}_losses.txt"), "w") as f:
            f.write("".join("%.9g\n" % v for v in losses))
        entry["runs"][run] = {"file": f"{run}_losses.txt", "first": float("%.9g" % losses[0]),
                              "last": float("%.9g" % losses[-1]),
                              "finite": all(math.isfinite(v) for v in losses)}
        if not RUNS[run]["bf16"]:
            l64 = train(case, pristine, x_all, y_all, run, f64=True)
            rel = [abs(a - b) / max(abs(b), 1e-30) for a, b in zip(losses, l64)]
            entry["runs"][run]["f64_vs_f32_max_rel_diff"] = float(f"{max(rel):.2g}")
            entry["runs"][run]["f64_vs_f32_rel_diff_step_1_10_20"] = [float(f"{rel[i]:.2g}") for i in (0, 9, 19)]
        else:
            l32 = [float(l) for l in open(os.path.join(mdir, "f32_adamw_losses.txt"))]
            rel = [abs(a - b) / max(abs(b), 1e-30) for a, b in zip(losses, l32)]
            entry["runs"][run]["bf16_vs_f32_max_rel_diff"] = float(f"{max(rel):.2g}")
        for exporter in EXPORTERS:
            ee = exports[exporter]
            if ee["status"] == "ok" and ee.get("kept", True):
                write_spec(os.path.join(mdir, f"{exporter}_{run}.spec"), case, exporter, run, ee)

    entry["exports"] = {k: entry["exports"][k] for k in EXPORTERS}  # the manifest's order
    total = 0
    for root, _, files in os.walk(mdir):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    entry["total_bytes"] = total
    print(f"   {total} bytes", flush=True)
    return entry


def status_cell(e):
    if e is None or e["status"] == "not made":
        return "-"
    if e["status"] != "ok":
        return "error"
    if "kept" in e and not e["kept"]:
        return "ok (same ops, not kept)"
    ref = e.get("reference_check", {})
    tag = ""
    if "ok" in ref and not ref["ok"]:
        tag = ", onnx.reference differs"
    return f"ok (opset {e['opset']}, {e.get('total_bytes', 0)} B{tag})"


def write_readme(out_root, manifest):
    lines = ["# Corpus of PyTorch 2.x exports (generated)", "",
             "Generated by `tools/export_corpus/make_corpus.py`; see `tools/export_corpus/README.md`. "
             "Do not edit: rerun the script. Details of every export are in `manifest.json`.", "",
             "Versions: " + ", ".join(f"{k} {v}" for k, v in manifest["versions"].items()), "",
             "| model | ts18 | dynamo | dynamo23 | noopt | ts18fn | runs |", "|---|---|---|---|---|---|---|"]
    for name, m in manifest["models"].items():
        ex = m["exports"]
        lines.append(f"| {name} | {status_cell(ex.get('ts18'))} | {status_cell(ex.get('dynamo'))} | "
                     f"{status_cell(ex.get('dynamo23'))} | {status_cell(ex.get('noopt'))} | {status_cell(ex.get('ts18fn'))} | "
                     f"{', '.join(m['runs'])} |")
    errs = [(n, k, e["error"], e.get("error_cause")) for n, m in manifest["models"].items() for k, e in m["exports"].items()
            if e["status"] not in ("ok", "not made")]
    if errs:
        lines += ["", "Export errors (first line):", ""]
        lines += [f"- {n} / {k}: `{err}`" + (f" (cause: `{c}`)" if c else "") for n, k, err, c in errs]
    with open(os.path.join(out_root, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(c.name for c in CASES),
                    help="comma-separated subset of: " + ",".join(c.name for c in CASES))
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "golden", "corpus"))
    args = ap.parse_args()
    names = [n for n in args.models.split(",") if n]
    for n in names:
        if n not in CASE_BY_NAME:
            ap.error(f"unknown model {n!r}")
    out_root = os.path.abspath(args.out)
    os.makedirs(out_root, exist_ok=True)
    if len(names) > 1:
        # One process per model: PyTorch 2.15's TorchScript exporter segfaults on
        # export_modules_as_functions after a dynamo export in the same process (see
        # run_case). Each child updates manifest.json and README.md.
        import subprocess
        for n in names:
            subprocess.run([sys.executable, os.path.abspath(__file__), "--models", n, "--out", out_root], check=True)
        return

    man_path = os.path.join(out_root, "manifest.json")
    old = {}
    if os.path.exists(man_path):
        with open(man_path) as f:
            old = json.load(f).get("models", {})

    manifest = {
        "generator": "tools/export_corpus/make_corpus.py",
        "versions": versions(),
        "examples": N_EXAMPLES, "batch_size": BATCH, "steps": STEPS,
        "exports": EXPORT_CALLS,
        "runs": {
            "f32_adamw": "torch.optim.AdamW(lr=1e-3, betas=(0.9,0.999), eps=1e-8, weight_decay=0.01), float32",
            "f32_sgd": "torch.optim.SGD(lr=0.05, momentum=0.9), float32 (mlp, decoder_buffers, encoder_layer_mask)",
            "bf16_adamw": "the same AdamW; forward and loss under torch.autocast('cpu', dtype=torch.bfloat16)",
        },
        "notes": [
            "Every export and run starts from a deep copy of the same untrained model (torch.manual_seed(0) "
            "before construction), in train() mode; x = features[0:4].",
            "initializers[*].kind/persistent/original_node_name: the dynamo exporter's "
            "pkg.torch.export.graph_signature metadata, read from graph.value_info[*].metadata_props (and "
            "initializer.metadata_props); folded_from: pkg.onnxscript.optimizer.folded_from.",
            "initializers[*].torch_value: whether the initializer equals the PyTorch parameter/buffer of the "
            "same name in the untrained model (absent: no tensor of that name).",
            "reference_check: onnx.reference.ReferenceEvaluator on x vs PyTorch's train-mode forward of the "
            "untrained model (ok when max_abs_diff <= 1e-4 * max(1, max_abs_torch)).",
            "optimizer_diagnosis (dynamo): an export with optimize=False (not kept) against the default one: "
            "merged = [kept, [initializers deduplicated into it]] from onnx_ir's DeduplicateInitializersPass "
            "log; folded = [new initializer, shape, [original initializers its folded_from names]] (e.g. "
            "transposed Linear weights, an Expand-ed cls_token, an Unsqueeze-d GroupNorm weight); "
            "folded_then_merged = [kept, merged-away folded constant, [original initializers it was folded "
            "from]] (folded_from as the dedup pass saw it); removed = "
            "gone without being merged or folded (zero Gemm biases dropped, BatchNorm fused into Conv); "
            "same_name_new_value = kept name, different value (BatchNorm-fused Conv weights); new = every "
            "initializer of the default export absent from the un-optimized one.",
        ],
        "models": {},
    }

    tmp_root = tempfile.mkdtemp(prefix="export_corpus_")
    try:
        for c in CASES:
            if c.name in names:
                manifest["models"][c.name] = run_case(c, out_root, tmp_root)
            elif c.name in old:
                manifest["models"][c.name] = old[c.name]
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)

    with open(man_path, "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    write_readme(out_root, manifest)
    total = 0
    for root, _, files in os.walk(out_root):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    print(f"corpus: {total} bytes in {out_root}")


if __name__ == "__main__":
    main()
