"""The zoo-shaped models of `tools/bench/bench.py --device cuda`: ResNet-18/50, char_gpt, a GPT-2-124M-shaped
decoder and one Transformer Engine quickstart-sized block, built from a seed, exported to ONNX, fed random data
and counted (FLOPs), with PyTorch alone.

Why a module of its own: the GPU machine has PyTorch 2.11 but maybe neither torchvision nor numpy, its `onnx`
package is not guaranteed, and nothing can be installed there; and the ONNX files (ResNet-50 90 MiB, the
GPT-2-shaped decoder 623 MiB, the block 772 MiB) are too large to carry (64 MiB). So both sides of a row are made
there, deterministically, from this file:

  - ResNet: `ResNet` below is torchvision's resnet18/resnet50 (`zero_init_residual=True`, 10 classes, as
    models/resnet/make_resnet.py exports them) written out, module for module in torchvision's registration
    order, so that `torch.manual_seed(0)` gives torchvision's weights bit for bit (`check_torchvision` proves it
    where torchvision is installed: `python3 tools/bench/gpu_models.py --self-test`).
  - GPTs: models/char_gpt/char_gpt.py's `CharGpt` (the zoo's decoder: pre-norm blocks, written-out causal
    attention, GELU MLP, learned positions, untied head), at the zoo's size (char_gpt) or GPT-2-124M's shape
    (12 layers, width 768, 12 heads, context 1024, vocab 50257; the untied head makes it 163M parameters).
  - block: one `char_gpt.Block` (LayerNorm, causal self-attention, LayerNorm, 4x GELU MLP) of Transformer Engine's
    quickstart size (hidden 4096, FFN 16384, 32 heads, sequence 2048), its output read as logits over the 4096
    hidden units (softmax cross-entropy against random labels, as the bench's mlp_block_4096 does).

`build(net)` makes the torch module from `torch.manual_seed(0)`; `export_onnx` writes it with the TorchScript
exporter at opset 17 in training mode (the zoo's settings), also when the `onnx` package is missing (it is used
only to splice in onnxscript functions, of which these models have none); `make_data` draws the data from
`torch.Generator().manual_seed(0)`; `forward_macs` counts, without torch, the multiply-accumulates of one
example's forward pass.

The torch side of a row (torch_gpu_worker.py) rebuilds the module from the seed and proves every parameter equal,
byte for byte, to an initializer of the ONNX file mpc trains (of its shape, or of its transpose: the exporter
stores a Linear's weight transposed as MatMul's right operand), so both frameworks start from the same weights.
"""

import hashlib
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CHAR_GPT_DIR = os.path.join(ROOT, "models", "char_gpt")
# models/char_gpt/data/vocab.txt's size (make_char_data.py over Debian's fortunes, 114 byte values). The GPU
# machine has neither the corpus nor the data, so the bench feeds char_gpt random tokens over this vocabulary.
CHAR_GPT_VOCAB = 114
GPT2_VOCAB = 50257


# --------------------------------------------------------------------------- FLOPs (no torch needed)

def _conv_out(h, k, s, p):
    return (h + 2 * p - k) // s + 1


def resnet_macs(arch, image, classes=10):
    """(forward multiply-accumulates of one image, of the first layer) for torchvision's resnet18/resnet50:
    every convolution (out positions x out channels x in channels x kernel) and the classifier."""
    block, counts = RESNET_ARCHS[arch]
    h = _conv_out(image, 7, 2, 3)
    first = h * h * 64 * 3 * 49
    total = first
    h = _conv_out(h, 3, 2, 1)                       # max pool
    inplanes = 64
    for stage, (planes, n) in enumerate(zip((64, 128, 256, 512), counts)):
        for i in range(n):
            stride = 2 if (stage > 0 and i == 0) else 1
            ho = _conv_out(h, 3, stride, 1)
            if block == "basic":
                out = planes
                total += ho * ho * planes * inplanes * 9 + ho * ho * planes * planes * 9
            else:
                out = planes * 4
                total += (h * h * planes * inplanes + ho * ho * planes * planes * 9 + ho * ho * out * planes)
            if stride != 1 or inplanes != out:
                total += ho * ho * out * inplanes        # 1x1 downsample
            inplanes, h = out, ho
    total += inplanes * classes
    return total, first


def gpt_macs(layers, width, context, vocab, ffn=None):
    """(forward multiply-accumulates of one sequence, 0) for the char_gpt architecture: per layer the qkv,
    projection and MLP GEMMs (T·(4w² + 2·w·ffn)) and the attention products Q·Kᵀ and P·V counted over the full
    T×T square (2·T²·w; the causal half is what the usual MFU formulas count too, PaLM / nanoGPT), plus the head
    (T·w·V). Embedding lookups are not GEMMs. The first GEMM's input gradient is needed (it reaches the embedding
    and LayerNorm parameters), hence 0 as the second value."""
    ffn = ffn or 4 * width
    per_layer = context * (4 * width * width + 2 * width * ffn) + 2 * context * context * width
    return layers * per_layer + (context * width * vocab if vocab else 0), 0


def forward_macs(net):
    """(forward MACs of one example, of its first layer) for a net dict (see bench.py's GPU_MODELS)."""
    if net["kind"] == "resnet":
        return resnet_macs(net["arch"], net["image"], net.get("classes", 10))
    if net["kind"] == "gpt":
        return gpt_macs(net["layers"], net["width"], net["context"], net["vocab"])
    if net["kind"] == "block":
        return gpt_macs(1, net["width"], net["context"], 0, net["ffn"])
    raise ValueError(f"unknown net kind {net['kind']!r}")


def tokens_per_example(net):
    """Positions per example: tokens for the transformers (throughput in tokens/s), 1 for images."""
    return net["context"] if net["kind"] in ("gpt", "block") else 1


def parameter_count(net):
    """Trained parameters, from the shapes (no torch)."""
    if net["kind"] == "resnet":
        return RESNET_PARAMS.get(net["arch"], 0) + (512 * (4 if net["arch"] == "resnet50" else 1) + 1) * \
            (net.get("classes", 10) - 1000)
    w, f = net["width"], net.get("ffn") or 4 * net["width"]
    block = 2 * 2 * w + (3 * w * w + 3 * w) + (w * w + w) + (w * f + f) + (f * w + w)
    if net["kind"] == "block":
        return block
    return net["vocab"] * w + net["context"] * w + net["layers"] * block + 2 * w + w * net["vocab"] + net["vocab"]


RESNET_ARCHS = {"resnet18": ("basic", (2, 2, 2, 2)), "resnet50": ("bottleneck", (3, 4, 6, 3))}
RESNET_PARAMS = {"resnet18": 11689512, "resnet50": 25557032}   # torchvision's, 1000 classes


# --------------------------------------------------------------------------- torch modules

def _torch():
    import torch
    from torch import nn
    return torch, nn


def resnet(arch, num_classes=10, zero_init_residual=True):
    """torchvision.models.<arch>(num_classes, zero_init_residual) without torchvision: the same modules,
    registered in the same order, initialized the same way, so the same seed gives the same weights."""
    torch, nn = _torch()

    def conv3x3(i, o, stride=1):
        return nn.Conv2d(i, o, kernel_size=3, stride=stride, padding=1, groups=1, bias=False, dilation=1)

    def conv1x1(i, o, stride=1):
        return nn.Conv2d(i, o, kernel_size=1, stride=stride, bias=False)

    class BasicBlock(nn.Module):
        expansion = 1

        def __init__(self, inplanes, planes, stride=1, downsample=None):
            super().__init__()
            self.conv1 = conv3x3(inplanes, planes, stride)
            self.bn1 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = conv3x3(planes, planes)
            self.bn2 = nn.BatchNorm2d(planes)
            self.downsample = downsample
            self.stride = stride

        def forward(self, x):
            identity = x
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            if self.downsample is not None:
                identity = self.downsample(x)
            out += identity
            return self.relu(out)

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, inplanes, planes, stride=1, downsample=None):
            super().__init__()
            width = planes
            self.conv1 = conv1x1(inplanes, width)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = conv3x3(width, width, stride)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = conv1x1(width, planes * self.expansion)
            self.bn3 = nn.BatchNorm2d(planes * self.expansion)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = downsample
            self.stride = stride

        def forward(self, x):
            identity = x
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            if self.downsample is not None:
                identity = self.downsample(x)
            out += identity
            return self.relu(out)

    class ResNet(nn.Module):
        def __init__(self, block, layers):
            super().__init__()
            self.inplanes = 64
            self.dilation = 1
            self.groups = 1
            self.base_width = 64
            self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(self.inplanes)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
            self.layer1 = self._make_layer(block, 64, layers[0])
            self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
            self.layer3 = self._make_layer(block, 256, layers[2], stride=2)
            self.layer4 = self._make_layer(block, 512, layers[3], stride=2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(512 * block.expansion, num_classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                    nn.init.constant_(m.weight, 1)
                    nn.init.constant_(m.bias, 0)
            if zero_init_residual:
                for m in self.modules():
                    if isinstance(m, Bottleneck) and m.bn3.weight is not None:
                        nn.init.constant_(m.bn3.weight, 0)
                    elif isinstance(m, BasicBlock) and m.bn2.weight is not None:
                        nn.init.constant_(m.bn2.weight, 0)

        def _make_layer(self, block, planes, blocks, stride=1):
            downsample = None
            if stride != 1 or self.inplanes != planes * block.expansion:
                downsample = nn.Sequential(conv1x1(self.inplanes, planes * block.expansion, stride),
                                           nn.BatchNorm2d(planes * block.expansion))
            layers = [block(self.inplanes, planes, stride, downsample)]
            self.inplanes = planes * block.expansion
            for _ in range(1, blocks):
                layers.append(block(self.inplanes, planes))
            return nn.Sequential(*layers)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    kind, counts = RESNET_ARCHS[arch]
    return ResNet(BasicBlock if kind == "basic" else Bottleneck, list(counts))


def _char_gpt_module():
    if CHAR_GPT_DIR not in sys.path:
        sys.path.insert(0, CHAR_GPT_DIR)
    import char_gpt
    return char_gpt


def use_sdpa(model):
    """Makes every char_gpt CausalSelfAttention in `model` run F.scaled_dot_product_attention(is_causal=True)
    (PyTorch's fused flash / memory-efficient kernels) instead of the written-out attention it is exported
    with: the same function, the same parameters, what a PyTorch 2.x user runs."""
    torch, _ = _torch()
    import torch.nn.functional as F
    cg = _char_gpt_module()
    n = 0
    for m in model.modules():
        if isinstance(m, cg.CausalSelfAttention):
            def forward(x, m=m):
                b, t, c = x.shape
                q, k, v = m.qkv(x).split(c, dim=2)
                hd = c // m.heads
                q, k, v = (z.view(b, t, m.heads, hd).transpose(1, 2) for z in (q, k, v))
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                return m.proj(y.transpose(1, 2).reshape(b, t, c))
            m.forward = forward
            n += 1
    return n


def build(net):
    """The net's torch module (CPU, f32, train mode) from torch.manual_seed(0)."""
    torch, nn = _torch()
    torch.manual_seed(0)
    if net["kind"] == "resnet":
        model = resnet(net["arch"], net.get("classes", 10), zero_init_residual=True)
    elif net["kind"] == "gpt":
        cg = _char_gpt_module()
        model = cg.CharGpt(net["vocab"], net["layers"], net["width"], net["heads"], net["context"])
    elif net["kind"] == "block":
        cg = _char_gpt_module()
        if net["ffn"] != 4 * net["width"]:
            raise ValueError("char_gpt.Block's MLP is 4x the width")

        class BlockLogits(nn.Module):
            """One decoder block on [B, T, width] inputs; its output read as logits over width classes."""

            def __init__(self):
                super().__init__()
                self.block = cg.Block(net["width"], net["heads"], net["context"])

            def forward(self, x):
                b, t, c = x.shape
                return self.block(x).reshape(b * t, c)
        model = BlockLogits()
    else:
        raise ValueError(f"unknown net kind {net['kind']!r}")
    return model.train()


def example_input(net, batch):
    torch, _ = _torch()
    if net["kind"] == "resnet":
        return torch.zeros(batch, 3, net["image"], net["image"])
    if net["kind"] == "gpt":
        return torch.zeros(batch, net["context"], dtype=torch.int64)
    return torch.zeros(batch, net["context"], net["width"])


def input_name(net):
    return {"resnet": "image", "gpt": "tokens", "block": "x"}[net["kind"]]


def _allow_export_without_onnx():
    """The TorchScript exporter imports `onnx` only to splice onnxscript-defined functions into the model
    (`_add_onnxscript_fn`); these models have none, so without the package the bytes pass unchanged."""
    try:
        import onnx  # noqa: F401
        return False
    except ImportError:
        pass
    import importlib
    patched = False
    for modname in ("torch.onnx._internal.torchscript_exporter.onnx_proto_utils", "torch.onnx._internal.onnx_proto_utils",
                    "torch.onnx._internal.torchscript_exporter.utils", "torch.onnx.utils"):
        try:
            mod = importlib.import_module(modname)
        except ImportError:
            continue
        if hasattr(mod, "_add_onnxscript_fn"):
            mod._add_onnxscript_fn = lambda model_bytes, custom_opsets: model_bytes
            patched = True
    return patched


def export_onnx(net, model, path):
    """The zoo's export settings: TorchScript exporter, opset 17, training mode (BatchNormalization keeps
    training_mode=1 and its running statistics), constant folding off for the ResNets (as make_resnet.py) and on
    for the transformers (as char_gpt.export). Unlike char_gpt.export, the batch axis stays dynamic for all (mpc
    binds it to the spec's batch and folds the shape arithmetic): the exporter traces by running the forward pass,
    which at the bench's batches takes minutes and ~15 GB for the GPT-2-shaped decoder (its [8192, 50257] logits),
    so the trace runs at batch 1 (2 for the ResNets: batch norm in training mode needs more than one value per
    channel)."""
    torch, _ = _torch()
    patched = _allow_export_without_onnx()
    name = input_name(net)
    kw = dict(opset_version=17, input_names=[name], output_names=["logits"],
              training=torch.onnx.TrainingMode.TRAINING, dynamic_axes={name: {0: "batch"}, "logits": {0: "rows"}},
              do_constant_folding=net["kind"] != "resnet")
    example = (example_input(net, 2 if net["kind"] == "resnet" else 1),)
    tmp = path + ".tmp"
    try:
        torch.onnx.export(model, example, tmp, dynamo=False, **kw)
    except TypeError:   # a torch whose export has no `dynamo` argument (before 2.5): TorchScript is its only one
        torch.onnx.export(model, example, tmp, **kw)
    os.replace(tmp, path)
    return "TorchScript exporter" + (" (no `onnx` package: onnxscript splice skipped)" if patched else "")


def make_data(net, n):
    """(features, labels) CPU tensors of n examples, from torch.Generator seed 0: N(0,1) images and uniform
    labels (ResNets); uniform random token windows, labels the next token (GPTs); N(0,1) hidden states and
    uniform labels per position (block)."""
    torch, _ = _torch()
    g = torch.Generator().manual_seed(0)
    if net["kind"] == "resnet":
        x = torch.randn(n, 3, net["image"], net["image"], generator=g)
        y = torch.randint(0, net.get("classes", 10), (n,), generator=g, dtype=torch.int64)
    elif net["kind"] == "gpt":
        t = net["context"]
        s = torch.randint(0, net["vocab"], (n, t + 1), generator=g, dtype=torch.int64)
        x, y = s[:, :t].contiguous(), s[:, 1:].contiguous()
    else:
        x = torch.randn(n, net["context"], net["width"], generator=g)
        y = torch.randint(0, net["width"], (n, net["context"]), generator=g, dtype=torch.int64)
    return x, y


def data_note(net):
    if net["kind"] == "resnet":
        return (f"random: N(0,1) images 3x{net['image']}x{net['image']}, uniform labels over {net.get('classes', 10)} "
                "classes (torch.Generator seed 0)")
    if net["kind"] == "gpt":
        return (f"random token windows, uniform over the {net['vocab']}-token vocabulary, labels the next token "
                "(torch.Generator seed 0)")
    return (f"random: N(0,1) hidden states [{net['context']}, {net['width']}], uniform labels per position over "
            f"{net['width']} classes (torch.Generator seed 0)")


# --------------------------------------------------------------------------- same weights

def _digest(t):
    t = t.detach().to("cpu").contiguous()
    h = hashlib.blake2b(digest_size=20)
    from torch_gpu_worker import tensor_bytes_view   # noqa: E402 (same directory)
    h.update(tensor_bytes_view(t))
    return (str(t.dtype), tuple(t.shape), h.digest())


def unmatched_parameters(model, inits):
    """Names of the module's parameters equal to no initializer in `inits` ({name: tensor}), byte for byte,
    as they are or (2-D) transposed. Empty: both sides start from the same weights."""
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    have = {_digest(t) for t in inits.values()}
    bad = []
    for name, p in model.named_parameters():
        forms = [p] + ([p.t()] if p.dim() == 2 else [])
        if not any(_digest(f) in have for f in forms):
            bad.append(name)
    return bad


# --------------------------------------------------------------------------- self-test

def check_torchvision():
    """This file's ResNets against torchvision's, state dict for state dict (needs torchvision)."""
    torch, _ = _torch()
    import torchvision
    for arch in RESNET_ARCHS:
        torch.manual_seed(0)
        ref = getattr(torchvision.models, arch)(num_classes=10, zero_init_residual=True).state_dict()
        ours = build({"kind": "resnet", "arch": arch, "image": 64}).state_dict()
        assert list(ref) == list(ours), f"{arch}: state dict keys differ"
        for k in ref:
            assert torch.equal(ref[k], ours[k]), f"{arch}: {k} differs"
        n = sum(v.numel() for k, v in ours.items() if not k.endswith(("running_mean", "running_var", "num_batches_tracked")))
        assert n == parameter_count({"kind": "resnet", "arch": arch}), (arch, n)
        macs = resnet_macs(arch, 224, 1000)[0]
        print(f"{arch}: identical to torchvision ({len(ref)} tensors, {n} parameters); "
              f"{macs / 1e9:.3f} GMACs at 224x224 with 1000 classes")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        check_torchvision()
    else:
        print(__doc__)
