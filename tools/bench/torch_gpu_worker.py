#!/usr/bin/env python3
"""The PyTorch side of `tools/bench/bench.py --device cuda`, and the file formats both sides share.

bench.py runs this file as a child process, once per (model, precision, PyTorch variant), so each
measurement has its own CUDA context and its own torch.cuda memory statistics:

    python3 torch_gpu_worker.py '<json config>'          # trains, prints one JSON line (last line)
    python3 torch_gpu_worker.py --make-assets '<json>'   # writes a model's ONNX file and data, prints JSON
    python3 torch_gpu_worker.py --max-batch '<json>'     # the largest batch a zoo model trains (doubling to OOM)

The zoo models (a config with "net": ResNet-18/50, char_gpt, the GPT-2-124M-shaped decoder, the TE-sized block)
come from gpu_models.py: exported there with PyTorch's TorchScript exporter, rebuilt here from the same seed and
proved equal to the ONNX initializers; their batches come from pinned memory (non_blocking copies), the ResNets
train with SGD + momentum (optionally channels_last, cudnn.benchmark on), the transformers with SDPA attention.

Nothing here needs numpy or the `onnx` package (the H100 machine has PyTorch but perhaps neither):
.npy files and the ONNX files of the generated MLPs are written and read with the standard library
and torch alone.

Training step (what one timed step is; the same for eager and torch.compile):
    host batch -> device copy (from pageable memory, as mpc-train's batch copy is), zero_grad(set_to_none),
    forward + CrossEntropyLoss under torch.autocast when the precision is bf16/fp16, backward (through a
    GradScaler for fp16), AdamW.step() (fused=False; foreach left at PyTorch's default), loss.item().
    Each step is timed on the host (perf_counter, the step ends with loss.item(), which waits for the
    GPU) and between two CUDA events; the warm-up steps (where torch.compile compiles) are dropped.
Precisions: f32 = eager FP32 with TF32 off; tf32 = TF32 matmuls on; bf16 / fp16 = autocast to that
dtype with f32 parameters and optimizer (fp16 with torch.amp.GradScaler's dynamic loss scaling).
"""

import ast
import ctypes
import gzip
import json
import os
import statistics
import struct
import sys
import time
import traceback

# --------------------------------------------------------------------------- .npy without numpy

_NPY_DESCR = {"<f4": "float32", "<i8": "int64", "|u1": "uint8", "<f8": "float64", "<i4": "int32"}


def tensor_bytes_view(t):
    """A read-only buffer over a contiguous CPU tensor's bytes (no copy)."""
    assert t.device.type == "cpu" and t.is_contiguous()
    n = t.numel() * t.element_size()
    return memoryview((ctypes.c_char * n).from_address(t.data_ptr())) if n else memoryview(b"")


def write_npy(path, t):
    """Writes a contiguous CPU tensor as a version-1.0 .npy file (little-endian, C order)."""
    import torch
    descr = {torch.float32: "<f4", torch.int64: "<i8", torch.uint8: "|u1"}[t.dtype]
    t = t.contiguous()
    shape = "(" + "".join(f"{d}, " for d in t.shape) + ")" if t.dim() != 1 else f"({t.shape[0]},)"
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}"
    total = 10 + len(header) + 1
    header += " " * ((64 - total % 64) % 64) + "\n"
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
        f.write(tensor_bytes_view(t))
    os.replace(tmp, path)


def read_npy(path):
    """A .npy file (C order; f32, f64, i64, i32 or u8) as a CPU tensor."""
    import torch
    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"\x93NUMPY":
        raise ValueError(f"{path}: not a .npy file")
    major = data[6]
    if major == 1:
        hlen, off = struct.unpack("<H", data[8:10])[0], 10
    else:
        hlen, off = struct.unpack("<I", data[8:12])[0], 12
    header = ast.literal_eval(data[off:off + hlen].decode("latin1"))
    if header.get("fortran_order"):
        raise ValueError(f"{path}: Fortran-order arrays are not supported")
    dtype = getattr(torch, _NPY_DESCR[header["descr"]])
    shape = tuple(header["shape"])
    body = bytearray(data[off + hlen:])
    t = torch.frombuffer(body, dtype=dtype) if body else torch.empty(0, dtype=dtype)
    return t.reshape(shape).clone()


# --------------------------------------------------------------------------- ONNX without the onnx package
# Protocol-buffer wire format, just what an MLP of Gemm/Relu nodes needs (field numbers from onnx.proto).

def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(field, wire):
    return _varint((field << 3) | wire)


def _len(field, payload):
    return _key(field, 2) + _varint(len(payload)) + payload


def _int(field, v):
    return _key(field, 0) + _varint(v)


def _str(field, s):
    return _len(field, s.encode())


def _attr_int(name, v):     # AttributeProto: name 1, i 3, type 20 (INT = 2)
    return _str(1, name) + _int(3, v) + _int(20, 2)


def _attr_float(name, v):   # AttributeProto: name 1, f 2, type 20 (FLOAT = 1)
    return _str(1, name) + _key(2, 5) + struct.pack("<f", v) + _int(20, 1)


def _node(op, inputs, outputs, name, attrs=()):
    """NodeProto: input 1, output 2, name 3, op_type 4, attribute 5."""
    b = b"".join(_str(1, i) for i in inputs) + b"".join(_str(2, o) for o in outputs)
    return b + _str(3, name) + _str(4, op) + b"".join(_len(5, a) for a in attrs)


def _value_info(name, dims):
    """ValueInfoProto for a float tensor; a str dim is symbolic (dim_param)."""
    shape = b"".join(_len(1, _str(2, d) if isinstance(d, str) else _int(1, d)) for d in dims)
    tensor_type = _int(1, 1) + _len(2, shape)          # TypeProto.Tensor: elem_type 1 (FLOAT), shape 2
    return _str(1, name) + _len(2, _len(1, tensor_type))  # ValueInfoProto: name 1, type 2 (tensor_type 1)


def write_mlp_onnx(path, layers, state, input_name="x", output_name="logits"):
    """Linear/ReLU chain as PyTorch's exporter writes it (opset 17): Gemm(transB=1) + Relu, initializers
    named like nn.Sequential's state dict ("0.weight", "0.bias", "2.weight", ...), float32 raw data."""
    import torch
    nodes, inits = [], []
    prev = input_name
    for i in range(len(layers) - 1):
        w, b = f"{2 * i}.weight", f"{2 * i}.bias"
        last = i == len(layers) - 2
        out = output_name if last else f"/{2 * i}/Gemm_output_0"
        nodes.append(_node("Gemm", [prev, w, b], [out], f"/{2 * i}/Gemm",
                           [_attr_float("alpha", 1.0), _attr_float("beta", 1.0), _attr_int("transB", 1)]))
        if not last:
            nodes.append(_node("Relu", [out], [f"/{2 * i + 1}/Relu_output_0"], f"/{2 * i + 1}/Relu"))
            prev = f"/{2 * i + 1}/Relu_output_0"
        for name in (w, b):
            t = state[name].detach().to("cpu", dtype=torch.float32).contiguous()
            # TensorProto: dims 1, data_type 2 (FLOAT = 1), name 8, raw_data 9 (written after this head).
            head = b"".join(_int(1, d) for d in t.shape) + _int(2, 1) + _str(8, name)
            nbytes = t.numel() * 4
            head += _key(9, 2) + _varint(nbytes)
            inits.append((head, t, nbytes))
    graph_head = b"".join(_len(1, n) for n in nodes) + _str(2, "mpc_bench_mlp")
    graph_tail = (_len(11, _value_info(input_name, ["batch", layers[0]])) +
                  _len(12, _value_info(output_name, ["batch", layers[-1]])))
    graph_len = len(graph_head) + len(graph_tail) + sum(
        len(_key(5, 2)) + len(_varint(len(h) + n)) + len(h) + n for h, _, n in inits)
    model_head = (_int(1, 8) + _str(2, "mpc tools/bench") + _str(3, "1") +
                  _len(8, _str(1, "") + _int(2, 17)) + _key(7, 2) + _varint(graph_len))
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(model_head)
        f.write(graph_head)
        for head, t, n in inits:
            f.write(_key(5, 2) + _varint(len(head) + n) + head)
            f.write(tensor_bytes_view(t))
        f.write(graph_tail)
    os.replace(tmp, path)


def _fields(buf, pos, end):
    """(field, wire type, value) of a protobuf message in buf[pos:end]; length-delimited values are
    (start, end) offsets."""
    while pos < end:
        key, pos = _read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            v, pos = _read_varint(buf, pos)
        elif wire == 1:
            v, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            n, pos = _read_varint(buf, pos)
            v, pos = (pos, pos + n), pos + n
        elif wire == 5:
            v, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield field, wire, v


def _read_varint(buf, pos):
    result, shift = 0, 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def read_onnx_initializers(path, floats_only=False):
    """{name: float32 CPU tensor} of an ONNX model's initializers (raw_data or float_data). An initializer of
    another data type (a folded bool mask, an int64 shape) is an error, or with floats_only skipped."""
    import torch
    with open(path, "rb") as f:
        buf = f.read()
    view = memoryview(buf)   # slices of it are not copies
    out = {}
    for field, wire, v in _fields(buf, 0, len(buf)):
        if field != 7 or wire != 2:          # ModelProto.graph
            continue
        for gf, gw, gv in _fields(buf, *v):
            if gf != 5 or gw != 2:           # GraphProto.initializer
                continue
            dims, dtype, name, raw, floats = [], 1, "", None, []
            for tf, tw, tv in _fields(buf, *gv):
                if tf == 1:
                    if tw == 0:
                        dims.append(tv)
                    else:                    # packed
                        p = tv[0]
                        while p < tv[1]:
                            d, p = _read_varint(buf, p)
                            dims.append(d)
                elif tf == 2:
                    dtype = tv
                elif tf == 8:
                    name = buf[tv[0]:tv[1]].decode()
                elif tf == 9:
                    raw = bytearray(view[tv[0]:tv[1]])
                elif tf == 4:
                    if tw == 5:
                        floats.append(struct.unpack("<f", tv)[0])
                    else:
                        floats.extend(struct.unpack(f"<{(tv[1] - tv[0]) // 4}f", buf[tv[0]:tv[1]]))
                elif tf == 14 and tv == 1:
                    raise ValueError(f"{path}: initializer {name!r} has external data; not supported here")
            if dtype != 1 and floats_only:
                continue
            if dtype != 1:
                raise ValueError(f"{path}: initializer {name!r} has ONNX data type {dtype}, expected FLOAT (1)")
            if raw is not None:
                t = torch.frombuffer(raw, dtype=torch.float32) if raw else torch.empty(0)
            else:
                t = torch.tensor(floats, dtype=torch.float32)
            out[name] = t.reshape(dims).clone()
    return out


# --------------------------------------------------------------------------- assets

def make_assets(cfg):
    """Writes (when missing) a model's ONNX file and data set; returns their paths and a note.

    cfg: dir, name, layers, batch, data_batches, and either generate=True (random weights from
    torch.manual_seed(0) in nn.Linear's default init, N(0,1) features, uniform labels) or an existing
    onnx path plus fashion_idx/scale/shift (Fashion-MNIST when the IDX files are there, else random)."""
    if cfg.get("net"):
        return make_net_assets(cfg)
    import torch
    from torch import nn
    d = cfg["dir"]
    os.makedirs(d, exist_ok=True)
    layers = cfg["layers"]
    n = cfg["batch"] * cfg["data_batches"]
    feats = os.path.join(d, f"features_{n}.npy")
    labels = os.path.join(d, f"labels_{n}.npy")
    if cfg.get("generate"):
        onnx_path = os.path.join(d, f"{cfg['name']}.onnx")
        stamp = onnx_path + ".layers"
        want = json.dumps(layers)
        if not (os.path.exists(onnx_path) and os.path.exists(stamp) and open(stamp).read() == want):
            t0 = time.time()
            torch.manual_seed(0)
            mods = []
            for i, (a, b) in enumerate(zip(layers[:-1], layers[1:])):
                mods.append(nn.Linear(a, b))
                if i < len(layers) - 2:
                    mods.append(nn.ReLU())
            write_mlp_onnx(onnx_path, layers, nn.Sequential(*mods).state_dict())
            with open(stamp, "w") as f:
                f.write(want)
            print(f"generated {onnx_path} in {time.time() - t0:.1f} s", file=sys.stderr)
        if not (os.path.exists(feats) and os.path.exists(labels)):
            g = torch.Generator().manual_seed(0)
            write_npy(feats, torch.randn(n, layers[0], generator=g))
            write_npy(labels, torch.randint(0, layers[-1], (n,), generator=g, dtype=torch.int64))
        note = "random: N(0,1) features, uniform labels (torch.Generator seed 0)"
    else:
        onnx_path = cfg["onnx"]
        idx = cfg.get("fashion_idx", "")
        images_gz = os.path.join(idx, "train-images-idx3-ubyte.gz")
        labels_gz = os.path.join(idx, "train-labels-idx1-ubyte.gz")
        real = os.path.exists(images_gz) and os.path.exists(labels_gz)
        marker = os.path.join(d, f"data_{n}.source")
        source = "fashion-mnist" if real else "random"
        have = os.path.exists(marker) and open(marker).read() == source
        if not (have and os.path.exists(feats) and os.path.exists(labels)):
            if real:
                x = _read_idx(images_gz)[:n].to(torch.float32) * cfg["scale"] + cfg["shift"]
                y = _read_idx(labels_gz)[:n].to(torch.int64)
            else:
                g = torch.Generator().manual_seed(0)
                x = torch.randn(n, 1, 28, 28, generator=g)
                y = torch.randint(0, layers[-1], (n,), generator=g, dtype=torch.int64)
            write_npy(feats, x.reshape(n, 1, 28, 28).contiguous())
            write_npy(labels, y)
            with open(marker, "w") as f:
                f.write(source)
        note = (f"the first {n} Fashion-MNIST training images ({idx})" if real else
                f"random data (N(0,1) images, uniform labels): the Fashion-MNIST IDX files are not at {idx}")
    return {"onnx": onnx_path, "features": feats, "labels": labels, "note": note}


def make_net_assets(cfg):
    """A gpu_models net's ONNX file (built from torch.manual_seed(0), exported once per net: its batch axis is
    dynamic) and `data_batches` batches of random data (or a data set of `examples` examples, for the batch
    search). Returns their paths, the data note and the generation times."""
    import torch
    import gpu_models
    net = cfg["net"]
    d = cfg["dir"]
    os.makedirs(d, exist_ok=True)
    out = {}
    if not cfg.get("data_only"):
        onnx_path = os.path.join(d, f"{cfg['name']}.onnx")   # batch axis dynamic: one file for every batch
        stamp = onnx_path + ".net"
        want = json.dumps({"net": net, "torch": torch.__version__}, sort_keys=True)
        if not (os.path.exists(onnx_path) and os.path.exists(stamp) and open(stamp).read() == want):
            t0 = time.time()
            torch.set_num_threads(max(1, os.cpu_count() or 1))
            model = gpu_models.build(net)
            out["exporter"] = gpu_models.export_onnx(net, model, onnx_path)
            with open(stamp, "w") as f:
                f.write(want)
            out["export_s"] = round(time.time() - t0, 1)
            print(f"generated {onnx_path} ({os.path.getsize(onnx_path) / 1048576:.0f} MiB) in {out['export_s']} s",
                  file=sys.stderr)
        out["onnx"] = onnx_path
        out["onnx_mib"] = round(os.path.getsize(onnx_path) / 1048576, 1)
    n = cfg.get("examples") or cfg["batch"] * cfg["data_batches"]
    feats = os.path.join(d, f"features_{n}.npy")
    labels = os.path.join(d, f"labels_{n}.npy")
    if not (os.path.exists(feats) and os.path.exists(labels)):
        t0 = time.time()
        x, y = gpu_models.make_data(net, n)
        write_npy(feats, x)
        write_npy(labels, y)
        out["data_s"] = round(time.time() - t0, 1)
    macs, first = gpu_models.forward_macs(net)
    out.update(features=feats, labels=labels, note=gpu_models.data_note(net), macs=macs, first_macs=first)
    return out


def _read_idx(path):
    import torch
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


# --------------------------------------------------------------------------- training

def backward_and_step(loss, opt, scaler):
    """loss.backward() and the optimizer step, through the fp16 GradScaler when there is one."""
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    else:
        loss.backward()
        opt.step()


def set_tf32(torch, on):
    """Turns TF32 matmuls and cuDNN convolutions on or off with whichever API this torch has; returns what was set.
    (cuDNN's convolutions default to TF32 in PyTorch, unlike its matmuls: an f32 CNN row must turn both off.)"""
    m = torch.backends.cuda.matmul
    conv = getattr(torch.backends.cudnn, "conv", None)
    if hasattr(m, "fp32_precision"):   # torch >= 2.9; mixing it with allow_tf32 is an error there
        m.fp32_precision = "tf32" if on else "ieee"
        said = f"torch.backends.cuda.matmul.fp32_precision = {m.fp32_precision!r}"
        if conv is not None and hasattr(conv, "fp32_precision"):
            conv.fp32_precision = "tf32" if on else "ieee"
            said += f", torch.backends.cudnn.conv.fp32_precision = {conv.fp32_precision!r}"
        return said
    m.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on
    return f"torch.backends.cuda.matmul.allow_tf32 = {m.allow_tf32}, torch.backends.cudnn.allow_tf32 = {on}"


def make_grad_scaler(torch, device):
    try:
        return torch.amp.GradScaler(device)
    except (AttributeError, TypeError):
        return torch.cuda.amp.GradScaler(enabled=device == "cuda")


def adamw_foreach_effective(torch, opt):
    """Whether AdamW.step() takes the multi-tensor (foreach) path with these parameters."""
    try:
        from torch.optim.optimizer import _default_to_fused_or_foreach
        params = [p for g in opt.param_groups for p in g["params"]]
        fused, foreach = _default_to_fused_or_foreach(params, differentiable=False, use_fused=False)
        return bool(foreach) and not bool(fused)
    except Exception:  # private API; absent or changed in this torch
        return None


def matmul_rate(torch, device, dtype, n, reps=10):
    """torch's own n^3 matmul rate at a dtype (GFLOP/s, median), for the record."""
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    ts = []
    for i in range(reps + 3):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        a @ b
        if device == "cuda":
            torch.cuda.synchronize()
        if i >= 3:
            ts.append(time.perf_counter() - t0)
    return 2.0 * n ** 3 / statistics.median(ts) / 1e9


def make_optimizer(torch, cfg, model, info):
    """AdamW (fused=False, foreach at PyTorch's default) or, for the ResNets (their zoo spec), SGD with momentum."""
    if cfg.get("optimizer") == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=cfg["momentum"],
                              weight_decay=cfg["weight_decay"])
        info["optimizer"] = {"name": "SGD", "foreach": opt.defaults.get("foreach"),
                             "foreach_effective": adamw_foreach_effective(torch, opt)}
        return opt
    hyper = dict(lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"], weight_decay=cfg["weight_decay"])
    try:
        opt = torch.optim.AdamW(model.parameters(), fused=False, **hyper)
    except TypeError:   # a torch without AdamW(fused=...) (1.13, the CPU emulation) has no fused path anyway
        opt = torch.optim.AdamW(model.parameters(), **hyper)
    info["adamw"] = {"fused": opt.defaults.get("fused"), "foreach": opt.defaults.get("foreach"),
                     "foreach_effective": adamw_foreach_effective(torch, opt)}
    info["optimizer"] = dict(info["adamw"], name="AdamW")
    return opt


def build_net_model(torch, cfg):
    """A gpu_models net rebuilt from its seed and proved to start from the ONNX file's weights; the variant's
    memory format (channels_last for the CNN variants that use it) and attention (SDPA for the transformers)."""
    import gpu_models
    net = cfg["net"]
    t0 = time.time()
    model = gpu_models.build(net)
    inits = read_onnx_initializers(cfg["onnx"], floats_only=True)
    bad = gpu_models.unmatched_parameters(model, inits)
    if bad:
        raise RuntimeError(f"{len(bad)} torch parameters equal no initializer of {cfg['onnx']}: {bad[:5]}")
    info = {"weights_check": f"all {sum(1 for _ in model.parameters())} parameters equal ONNX initializers "
                             f"byte for byte ({len(inits)} float initializers; {time.time() - t0:.1f} s)"}
    del inits
    if net["kind"] == "resnet":
        cl = cfg["variant"] in ("channels_last", "compile")
        info["memory_format"] = "channels_last" if cl else "contiguous"
        if cfg["device"] == "cuda":
            # What a PyTorch CNN user sets for fixed shapes: cuDNN times its algorithms in the first (warm-up) steps.
            torch.backends.cudnn.benchmark = True
            info["cudnn_benchmark"] = True
    elif cfg.get("attention", "sdpa") == "sdpa":
        n = gpu_models.use_sdpa(model)
        info["attention"] = f"F.scaled_dot_product_attention(is_causal=True) in {n} layers"
    else:
        info["attention"] = "written out (as exported)"
    return model, info


def train(cfg):
    import torch
    from torch import nn
    device = cfg["device"]
    precision = cfg["precision"]
    info = {"torch": torch.__version__, "torch_cuda": torch.version.cuda, "python": sys.version.split()[0],
            "variant": cfg["variant"], "device": device}
    if device == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False")
        info["gpu"] = torch.cuda.get_device_name(0)
        info["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
        info["cudnn"] = torch.backends.cudnn.version()
        info["tf32_setting"] = set_tf32(torch, precision == "tf32")
    torch.manual_seed(0)

    X = read_npy(cfg["features"])
    Y = read_npy(cfg["labels"])
    net = cfg.get("net")
    channels_last = False
    if net:
        model, net_info = build_net_model(torch, cfg)
        info.update(net_info)
        channels_last = net_info.get("memory_format") == "channels_last"
    else:
        layers = cfg["layers"]
        mods = [nn.Flatten()] if cfg.get("flatten") else []
        for i, (a, b) in enumerate(zip(layers[:-1], layers[1:])):
            mods.append(nn.Linear(a, b))
            if i < len(layers) - 2:
                mods.append(nn.ReLU())
        model = nn.Sequential(*mods)
        inits = read_onnx_initializers(cfg["onnx"])
        missing, unexpected = model.load_state_dict(inits, strict=False)
        if missing or unexpected:
            raise RuntimeError(f"ONNX initializers do not match the torch module: missing {missing}, "
                               f"unexpected {unexpected}")
        del inits
    model.to(device)
    if channels_last:
        model.to(memory_format=torch.channels_last)
    if cfg.get("pin_memory") and device == "cuda":
        # The zoo rows copy their (large) batches as a PyTorch input pipeline does: from pinned memory,
        # non_blocking (mpc pins its batch buffers of 1 MiB and more and uploads them ahead).
        X, Y = X.pin_memory(), Y.pin_memory()
        info["batches"] = "pinned host memory, non_blocking copies"
    non_blocking = bool(cfg.get("pin_memory") and device == "cuda")
    opt = make_optimizer(torch, cfg, model, info)
    loss_fn = nn.CrossEntropyLoss()
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = make_grad_scaler(torch, device) if precision == "fp16" else None

    def forward_loss(x, y):
        # Per-position labels (the transformers: logits [B*T, V], labels [B, T]) are flattened.
        if amp_dtype is None:
            out = model(x)
            return loss_fn(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        with torch.autocast(device_type=device, dtype=amp_dtype):
            out = model(x)
            return loss_fn(out.float().reshape(-1, out.shape[-1]), y.reshape(-1))

    step_fn = forward_loss
    if cfg["variant"] == "compile":
        if not hasattr(torch, "compile"):
            raise RuntimeError(f"torch {torch.__version__} has no torch.compile")
        step_fn = torch.compile(forward_loss)   # mode "default"; the optimizer step stays eager
        info["compile"] = ("torch.compile(forward + loss, mode='default'); backward by AOTAutograd; optimizer eager"
                           + ("; channels_last" if channels_last else ""))

    b = cfg["batch"]
    nb = X.shape[0] // b
    total = cfg["warmup"] + cfg["steps"]
    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        info["params_bytes"] = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(total)]
    times, losses = [], []
    first_step_s = None
    steps_taken = [0]
    if scaler is not None and cfg.get("optimizer") == "sgd":
        # GradScaler.step calls optimizer.step() only when the gradients are finite; count those calls
        # (on the host, no synchronisation of its own).
        opt_step = opt.step

        def counted_step(*a, **k):
            steps_taken[0] += 1
            return opt_step(*a, **k)
        opt.step = counted_step
    for step in range(total):
        j = step % nb
        t0 = time.perf_counter()
        if cuda:
            events[step][0].record()
        xb = X[j * b:(j + 1) * b].to(device, non_blocking=non_blocking)
        yb = Y[j * b:(j + 1) * b].to(device, non_blocking=non_blocking)
        if channels_last:
            xb = xb.contiguous(memory_format=torch.channels_last)
        opt.zero_grad(set_to_none=True)
        loss = step_fn(xb, yb)
        backward_and_step(loss, opt, scaler)
        if cuda:
            events[step][1].record()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
        if step == 0:
            first_step_s = times[0]
    # Steps GradScaler skipped (inf/nan gradients): AdamW counts only the steps it took. Read once here,
    # not per step, so that no extra device synchronisation enters the timed loop.
    first = next(iter(model.parameters()))
    taken = opt.state.get(first, {}).get("step")
    if taken is None:   # SGD keeps no step count: the wrapper above counted the steps the scaler let through
        taken = steps_taken[0] if scaler is not None else total
    skipped = total - int(taken.item() if hasattr(taken, "item") else taken)
    if cuda:
        torch.cuda.synchronize()
        ev = [s.elapsed_time(e) / 1000.0 for s, e in events][cfg["warmup"]:]
        info["max_allocated"] = torch.cuda.max_memory_allocated()
        info["max_reserved"] = torch.cuda.max_memory_reserved()
    else:
        ev = []
    timed = times[cfg["warmup"]:]
    res = dict(info, step_times=timed, median_s=statistics.median(timed), mean_s=statistics.fmean(timed),
               event_times=ev, event_median_s=statistics.median(ev) if ev else None, losses=losses,
               skipped_steps=int(skipped), first_step_s=first_step_s, warmup=cfg["warmup"], steps=cfg["steps"])
    mm_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    try:
        res["torch_matmul_gflops"] = matmul_rate(torch, device, mm_dtype, cfg.get("matmul_n", 4096))
        res["torch_matmul_n"] = cfg.get("matmul_n", 4096)
    except Exception as e:  # for the record only
        res["torch_matmul_error"] = f"{type(e).__name__}: {e}"
    return res


def max_batch(cfg):
    """The largest batch this precision and variant trains (the bench's batch search, PyTorch side): the net built
    from its seed, batches doubled from cfg["batch"] up to cfg["max_batch"] while time is left (cfg["time_s"]),
    each trained for 1 + cfg["steps"] steps on random data made on the device, until CUDA runs out of memory.
    Every trial reports its median step time and torch.cuda.max_memory_allocated / reserved."""
    import torch
    import gpu_models
    t_end = time.time() + cfg.get("time_s", 60)
    device, precision = cfg["device"], cfg["precision"]
    info = {"variant": cfg["variant"], "precision": precision, "trials": []}
    if device == "cuda":
        info["tf32_setting"] = set_tf32(torch, precision == "tf32")
    net = cfg["net"]
    model = gpu_models.build(net)
    channels_last = net["kind"] == "resnet" and cfg["variant"] in ("channels_last", "compile")
    if net["kind"] == "resnet" and device == "cuda":
        torch.backends.cudnn.benchmark = True
    if net["kind"] != "resnet":
        gpu_models.use_sdpa(model)
    model.to(device)
    if channels_last:
        model.to(memory_format=torch.channels_last)
    opt = make_optimizer(torch, cfg, model, {})
    loss_fn = torch.nn.CrossEntropyLoss()
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = make_grad_scaler(torch, device) if precision == "fp16" else None
    oom = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    b = cfg["batch"]
    while b <= cfg["max_batch"] and time.time() < t_end:
        trial = {"batch": b}
        x = y = None
        try:
            g = torch.Generator(device=device).manual_seed(0)
            x0, y0 = gpu_models.make_data(dict(net), 0)          # shapes and dtypes only
            x = torch.randn((b,) + tuple(x0.shape[1:]), generator=g, device=device) if x0.is_floating_point() else \
                torch.randint(0, net.get("vocab", 2), (b,) + tuple(x0.shape[1:]), generator=g, device=device)
            y = torch.randint(0, net.get("classes", net.get("vocab", net.get("width", 10))), (b,) + tuple(y0.shape[1:]),
                              generator=g, device=device)
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            if device == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            ts = []
            for _ in range(1 + cfg["steps"]):
                t0 = time.perf_counter()
                opt.zero_grad(set_to_none=True)
                with torch.autocast(device_type=device, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
                    out = model(x)
                    loss = loss_fn(out.float().reshape(-1, out.shape[-1]), y.reshape(-1))
                backward_and_step(loss, opt, scaler)
                loss.item()
                ts.append(time.perf_counter() - t0)
            trial.update(ok=True, median_s=statistics.median(ts[1:]))
            if device == "cuda":
                trial.update(max_allocated=torch.cuda.max_memory_allocated(),
                             max_reserved=torch.cuda.max_memory_reserved())
            info["largest_ok"] = b
        except oom as e:
            trial.update(ok=False, error=f"OutOfMemoryError: {(str(e).splitlines() or [''])[0][:200]}")
        except RuntimeError as e:   # cuDNN / cuBLAS allocation failures surface as RuntimeError
            trial.update(ok=False, error=f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}")
        info["trials"].append(trial)
        print(json.dumps(info), flush=True)   # so far: what a kill at the time limit leaves the bench
        del x, y
        opt.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.empty_cache()
        if not trial["ok"]:
            break
        b *= 2
    if b <= cfg["max_batch"] and time.time() >= t_end and info["trials"] and info["trials"][-1]["ok"]:
        info["cut"] = "time"
    return info


def main(argv):
    if len(argv) == 3 and argv[1] == "--make-assets":
        print(json.dumps(make_assets(json.loads(argv[2]))), flush=True)
        return 0
    if len(argv) == 3 and argv[1] == "--max-batch":
        try:
            res = max_batch(json.loads(argv[2]))
        except Exception as e:
            print(traceback.format_exc(), file=sys.stderr)
            res = {"error": f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"[:400]}
        print(json.dumps(res), flush=True)
        return 0
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    cfg = json.loads(argv[1])
    try:
        res = train(cfg)
    except Exception as e:  # reported as the row's note by bench.py, which goes on with the next row
        tb = traceback.format_exc()
        print(tb, file=sys.stderr)
        first = (str(e).strip().splitlines() or [""])[0]
        res = {"error": f"{type(e).__name__}: {first}"[:400], "traceback_tail": tb[-1500:]}
    print(json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
