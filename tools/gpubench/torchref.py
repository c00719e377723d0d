#!/usr/bin/env python3
"""torchref.py: the CUDA backend next to ONNX Runtime and PyTorch.

Python standard library, numpy, and (where present) torch and onnxruntime;
no onnx package: the ONNX files are read by the small protobuf decoder
below.

  torchref.py check --dir EXPORT [--engine auto|ort|torch|numpy] [--tol 1e-3]
      EXPORT is what `gpubench export -dir EXPORT` wrote (manifest.json,
      <model>.onnx, <model>_b<batch>_{in,out}.npy). For every model and
      batch, runs the ONNX model on the same input with the reference
      engine and checks our backend's output against it:
      |ours - ref| <= tol * (1 + |ref|) everywhere. auto = onnxruntime
      (CUDA execution provider when it has one, else CPU), else the torch
      interpreter below, else numpy. Exit status 1 when any entry fails.

  torchref.py speed --dir EXPORT [--models resnet50,bert] [--batch 1,8]
                    [--runs 50] [--warmup 10] [--ours latency.json] [--tf32]
                    [--device cuda] [--json out.json]
      PyTorch eager on the GPU: the ONNX graph run node by node with
      torch.nn.functional (the architecture is ours by construction, and
      its output is checked against our backend's at each batch). Times
      one batch with its copies (host input -> GPU -> host output, as
      our InferBatch does): ms p50/p99. With --ours (the JSON of
      `gpubench latency`), prints our p50/p99 next to PyTorch's and the
      ratio. TF32 is off unless --tf32 (our kernels are FP32). --device
      cpu runs it on the CPU (to test this script without a GPU).

  torchref.py selftest
      Checks the protobuf decoder and the numpy interpreter on models it
      builds itself (no GPU, numpy only).
"""

import argparse
import json
import math
import os
import struct
import sys
import time

import numpy as np

# ---------------------------------------------------------------------------
# Protobuf wire format and the ONNX messages we need


def _varint(b, i):
    v, shift = 0, 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        if c < 0x80:
            return v, i
        shift += 7


def _fields(b):
    """Yields (field number, wire type, value) of a message."""
    i, n = 0, len(b)
    while i < n:
        key, i = _varint(b, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 1:
            v = b[i:i + 8]
            i += 8
        elif wt == 2:
            ln, i = _varint(b, i)
            v = b[i:i + ln]
            i += ln
        elif wt == 5:
            v = b[i:i + 4]
            i += 4
        else:
            raise ValueError("protobuf: wire type %d not supported" % wt)
        yield f, wt, v


def _signed(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def _ints(wt, v):
    """A repeated int64 field's values (packed or not)."""
    if wt == 0:
        return [_signed(v)]
    out, i = [], 0
    while i < len(v):
        x, i = _varint(v, i)
        out.append(_signed(x))
    return out


def _floats(wt, v):
    if wt == 5:
        return [struct.unpack("<f", v)[0]]
    return list(struct.unpack("<%df" % (len(v) // 4), v))


DTYPES = {1: np.float32, 6: np.int32, 7: np.int64, 9: np.bool_, 11: np.float64}


def parse_tensor(b):
    dims, dt, name, raw = [], 1, "", None
    fl, il = [], []
    for f, wt, v in _fields(b):
        if f == 1:
            dims += _ints(wt, v)
        elif f == 2:
            dt = v
        elif f == 4:
            fl += _floats(wt, v)
        elif f == 7:
            il += _ints(wt, v)
        elif f == 8:
            name = bytes(v).decode()
        elif f == 9:
            raw = bytes(v)
    if dt not in DTYPES:
        raise ValueError("tensor %s: data type %d not supported" % (name, dt))
    dtype = DTYPES[dt]
    if raw is not None:
        arr = np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype)
    elif dt == 1:
        arr = np.array(fl, dtype=np.float32)
    else:
        arr = np.array(il, dtype=dtype)
    return name, arr.reshape(dims)


def parse_attr(b):
    a = {"ints": [], "floats": []}
    for f, wt, v in _fields(b):
        if f == 1:
            a["name"] = bytes(v).decode()
        elif f == 2:
            a["f"] = struct.unpack("<f", v)[0]
        elif f == 3:
            a["i"] = _signed(v)
        elif f == 4:
            a["s"] = bytes(v).decode()
        elif f == 5:
            a["t"] = parse_tensor(v)[1]
        elif f == 7:
            a["floats"] += _floats(wt, v)
        elif f == 8:
            a["ints"] += _ints(wt, v)
    for k in ("f", "i", "s", "t"):
        if k in a:
            return a["name"], a[k]
    if a["ints"]:
        return a["name"], a["ints"]
    return a["name"], a["floats"]


def parse_node(b):
    n = {"inputs": [], "outputs": [], "attrs": {}, "op": "", "name": "", "domain": ""}
    for f, wt, v in _fields(b):
        if f == 1:
            n["inputs"].append(bytes(v).decode())
        elif f == 2:
            n["outputs"].append(bytes(v).decode())
        elif f == 3:
            n["name"] = bytes(v).decode()
        elif f == 4:
            n["op"] = bytes(v).decode()
        elif f == 5:
            k, x = parse_attr(v)
            n["attrs"][k] = x
        elif f == 7:
            n["domain"] = bytes(v).decode()
    return n


def _value_name(b):
    for f, wt, v in _fields(b):
        if f == 1:
            return bytes(v).decode()
    return ""


def load_onnx(path):
    """The graph of an ONNX file: {"nodes", "inits", "inputs", "outputs"}."""
    with open(path, "rb") as fh:
        data = memoryview(fh.read())
    graph = None
    for f, wt, v in _fields(data):
        if f == 7:
            graph = v
    if graph is None:
        raise ValueError("%s: no graph" % path)
    g = {"nodes": [], "inits": {}, "inputs": [], "outputs": []}
    for f, wt, v in _fields(graph):
        if f == 1:
            g["nodes"].append(parse_node(v))
        elif f == 5:
            name, arr = parse_tensor(v)
            g["inits"][name] = arr
        elif f == 11:
            g["inputs"].append(_value_name(v))
        elif f == 12:
            g["outputs"].append(_value_name(v))
    g["inputs"] = [x for x in g["inputs"] if x not in g["inits"]]
    return g


# ---------------------------------------------------------------------------
# The interpreter: the graph's nodes in order, over an ops table


def _reshape_dims(shape, spec):
    out = []
    for i, d in enumerate(int(x) for x in spec):
        out.append(shape[i] if d == 0 else d)
    return out


def _pool_pads(a, nd=2):
    p = list(a.get("pads", [0] * (2 * nd)))
    return p[:nd], p[nd:]


class NumpyOps:
    """Reference semantics in numpy (float32 in, float64 accumulation
    where it matters); slow, for the self-test and as a last resort."""

    name = "numpy"

    def const(self, arr):
        return arr

    def to_host(self, x):
        return np.asarray(x, dtype=np.float32)

    def Conv(self, a, x, w, b=None):
        sh, sw = a.get("strides", [1, 1])
        (pt, pl), (pb, pr) = _pool_pads(a)
        if a.get("dilations", [1, 1]) != [1, 1]:
            raise ValueError("Conv: dilations not supported")
        g = a.get("group", 1)
        n, c, h, wd = x.shape
        o, cg, kh, kw = w.shape
        xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
        win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
        ho, wo = win.shape[2], win.shape[3]
        win = win.reshape(n, g, cg, ho, wo, kh, kw)
        wg = w.reshape(g, o // g, cg, kh, kw)
        y = np.einsum("ngchwij,gocij->ngohw", win, wg, optimize=True).reshape(n, o, ho, wo)
        if b is not None:
            y = y + b.reshape(1, -1, 1, 1)
        return y.astype(np.float32)

    def BatchNormalization(self, a, x, s, b, m, v):
        eps = a.get("epsilon", 1e-5)
        r = lambda t: t.reshape(1, -1, 1, 1)
        return ((x - r(m)) / np.sqrt(r(v) + eps) * r(s) + r(b)).astype(np.float32)

    def Relu(self, a, x):
        return np.maximum(x, 0)

    def Tanh(self, a, x):
        return np.tanh(x)

    def Clip(self, a, x, lo=None, hi=None):
        return np.clip(x, -np.inf if lo is None else lo, np.inf if hi is None else hi)

    def Add(self, a, x, y):
        return x + y

    def Mul(self, a, x, y):
        return x * y

    def Div(self, a, x, y):
        return x / y

    def Erf(self, a, x):
        return np.vectorize(math.erf, otypes=[np.float64])(x).astype(np.float32)

    def MaxPool(self, a, x):
        kh, kw = a["kernel_shape"]
        sh, sw = a.get("strides", [1, 1])
        (pt, pl), (pb, pr) = _pool_pads(a)
        n, c, h, w = x.shape
        rnd = math.ceil if a.get("ceil_mode", 0) else math.floor
        ho = int(rnd((h + pt + pb - kh) / sh)) + 1
        wo = int(rnd((w + pl + pr - kw) / sw)) + 1
        if a.get("ceil_mode", 0):  # a window must start inside the input or left pad
            ho -= (ho - 1) * sh >= h + pt
            wo -= (wo - 1) * sw >= w + pl
        eb = max(0, (ho - 1) * sh + kh - (h + pt))
        er = max(0, (wo - 1) * sw + kw - (w + pl))
        xp = np.pad(x, ((0, 0), (0, 0), (pt, eb), (pl, er)), constant_values=-np.inf)
        win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
        return win[:, :, :ho, :wo].max(axis=(4, 5))

    def GlobalAveragePool(self, a, x):
        return x.mean(axis=(2, 3), keepdims=True, dtype=np.float64).astype(np.float32)

    def Flatten(self, a, x):
        ax = a.get("axis", 1)
        return x.reshape(int(np.prod(x.shape[:ax])), -1)

    def Gemm(self, a, x, w, b=None):
        if a.get("transA", 0):
            x = x.T
        if a.get("transB", 0):
            w = w.T
        y = a.get("alpha", 1.0) * (x.astype(np.float64) @ w)
        if b is not None:
            y = y + a.get("beta", 1.0) * b
        return y.astype(np.float32)

    def MatMul(self, a, x, y):
        return np.matmul(x.astype(np.float64), y).astype(np.float32)

    def Reshape(self, a, x, shape):
        return x.reshape(_reshape_dims(x.shape, shape))

    def Transpose(self, a, x):
        return np.transpose(x, a.get("perm", None))

    def Softmax(self, a, x):
        ax = a.get("axis", -1)
        e = np.exp(x - x.max(axis=ax, keepdims=True))
        return (e / e.sum(axis=ax, keepdims=True)).astype(np.float32)

    def LayerNormalization(self, a, x, g, b=None):
        ax = a.get("axis", -1)
        eps = a.get("epsilon", 1e-5)
        axes = tuple(range(ax % x.ndim, x.ndim))
        m = x.mean(axis=axes, keepdims=True, dtype=np.float64)
        v = ((x - m) ** 2).mean(axis=axes, keepdims=True)
        y = (x - m) / np.sqrt(v + eps) * g
        if b is not None:
            y = y + b
        return y.astype(np.float32)

    def Concat(self, a, *xs):
        return np.concatenate(xs, axis=a.get("axis", 0))


class TorchOps:
    """The same operators as torch.nn.functional calls on a device."""

    def __init__(self, device):
        import torch
        import torch.nn.functional as F

        self.t, self.F, self.device = torch, F, device
        self.name = "torch (%s)" % device

    def const(self, arr):
        if arr.dtype == np.float32 and arr.ndim == 0:
            return float(arr)  # scalars (Clip bounds, scales) stay on the host: no sync to read them
        if arr.dtype == np.float32:
            return self.t.from_numpy(np.ascontiguousarray(arr)).to(self.device)
        return arr  # shapes and other integer constants stay on the host

    def to_host(self, x):
        return x.detach().float().cpu().numpy()

    def Conv(self, a, x, w, b=None):
        (pt, pl), (pb, pr) = _pool_pads(a)
        if (pt, pl) != (pb, pr):
            x = self.F.pad(x, (pl, pr, pt, pb))
            pt = pl = 0
        return self.F.conv2d(x, w, b, stride=tuple(a.get("strides", [1, 1])), padding=(pt, pl),
                             dilation=tuple(a.get("dilations", [1, 1])), groups=a.get("group", 1))

    def BatchNormalization(self, a, x, s, b, m, v):
        return self.F.batch_norm(x, m, v, s, b, False, 0.0, a.get("epsilon", 1e-5))

    def Relu(self, a, x):
        return self.F.relu(x)

    def Tanh(self, a, x):
        return self.t.tanh(x)

    def Clip(self, a, x, lo=None, hi=None):
        f = lambda v: None if v is None else v if isinstance(v, float) else float(v.reshape(-1)[0])
        return self.t.clamp(x, f(lo), f(hi))

    def Add(self, a, x, y):
        return x + y

    def Mul(self, a, x, y):
        return x * y

    def Div(self, a, x, y):
        return x / y

    def Erf(self, a, x):
        return self.t.erf(x)

    def MaxPool(self, a, x):
        (pt, pl), (pb, pr) = _pool_pads(a)
        if (pt, pl) != (pb, pr):
            x = self.F.pad(x, (pl, pr, pt, pb), value=float("-inf"))
            pt = pl = 0
        return self.F.max_pool2d(x, tuple(a["kernel_shape"]), tuple(a.get("strides", [1, 1])),
                                 (pt, pl), ceil_mode=bool(a.get("ceil_mode", 0)))

    def GlobalAveragePool(self, a, x):
        return x.mean(dim=(2, 3), keepdim=True)

    def Flatten(self, a, x):
        return self.t.flatten(x, a.get("axis", 1))

    def Gemm(self, a, x, w, b=None):
        if a.get("transA", 0):
            x = x.t()
        if a.get("alpha", 1.0) == 1.0 and a.get("beta", 1.0) == 1.0 and a.get("transB", 0):
            return self.F.linear(x, w, b)
        if a.get("transB", 0):
            w = w.t()
        y = a.get("alpha", 1.0) * (x @ w)
        return y if b is None else y + a.get("beta", 1.0) * b

    def MatMul(self, a, x, y):
        return self.t.matmul(x, y)

    def Reshape(self, a, x, shape):
        return x.reshape(_reshape_dims(list(x.shape), shape))

    def Transpose(self, a, x):
        perm = a.get("perm", None) or list(range(x.dim()))[::-1]
        return x.permute(*perm)

    def Softmax(self, a, x):
        return self.t.softmax(x, dim=a.get("axis", -1))

    def LayerNormalization(self, a, x, g, b=None):
        ax = a.get("axis", -1) % x.dim()
        return self.F.layer_norm(x, tuple(x.shape[ax:]), g, b, a.get("epsilon", 1e-5))

    def Concat(self, a, *xs):
        return self.t.cat(xs, dim=a.get("axis", 0))


class Interpreter:
    """Runs a parsed ONNX graph with an ops table; weights converted once."""

    def __init__(self, g, ops):
        self.g, self.ops = g, ops
        missing = sorted({n["op"] for n in g["nodes"] if not hasattr(ops, n["op"])})
        if missing:
            raise ValueError("operators not supported: %s" % ", ".join(missing))
        self.consts = {k: ops.const(v) for k, v in g["inits"].items()}

    def __call__(self, x):
        env = dict(self.consts)
        env[self.g["inputs"][0]] = x
        for n in self.g["nodes"]:
            args = [env[i] if i else None for i in n["inputs"]]
            y = getattr(self.ops, n["op"])(n["attrs"], *args)
            env[n["outputs"][0]] = y
        return env[self.g["outputs"][0]]


# ---------------------------------------------------------------------------
# check


def agree(ours, ref, tol):
    """Max |ours-ref|, max of it relative to 1+|ref|, and whether it is
    within tol everywhere."""
    ours = np.asarray(ours, np.float64)
    ref = np.asarray(ref, np.float64).reshape(ours.shape)
    d = np.abs(ours - ref)
    rel = d / (1 + np.abs(ref))
    return float(d.max()), float(rel.max()), bool(np.all(rel <= tol)) and bool(np.all(np.isfinite(ours)))


def pick_engine(want):
    """The reference engine: (name, run(onnx path, graph, x) -> array)."""
    if want in ("auto", "ort"):
        try:
            import onnxruntime as ort

            prov = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in ort.get_available_providers()]
            sessions = {}

            def session(path):
                # FP32 as ours: TF32 off in the CUDA EP where the option exists
                if prov[0] == "CUDAExecutionProvider":
                    try:
                        return ort.InferenceSession(path, providers=[("CUDAExecutionProvider", {"use_tf32": "0"})] + prov[1:])
                    except Exception as e:  # an ORT without the option
                        print("onnxruntime: use_tf32=0 refused (%s); default CUDA EP options" % e, file=sys.stderr)
                return ort.InferenceSession(path, providers=prov)

            def run_ort(path, g, x):
                if path not in sessions:
                    sessions.clear()  # one model at a time in GPU memory
                    sessions[path] = session(path)
                s = sessions[path]
                return s.run(None, {s.get_inputs()[0].name: x})[0]

            return "onnxruntime %s (%s)" % (ort.__version__, prov[0]), run_ort
        except ImportError:
            if want == "ort":
                raise
    if want in ("auto", "torch"):
        try:
            import torch

            dev = "cuda" if torch.cuda.is_available() else "cpu"
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            ops = TorchOps(dev)

            def run_torch(path, g, x):
                with torch.inference_mode():
                    return ops.to_host(Interpreter(g, ops)(ops.const(x)))

            return ops.name, run_torch
        except ImportError:
            if want == "torch":
                raise
    ops = NumpyOps()
    return ops.name, lambda path, g, x: Interpreter(g, ops)(x)


def cmd_check(args):
    with open(os.path.join(args.dir, "manifest.json")) as fh:
        man = json.load(fh)
    name, run = pick_engine(args.engine)
    print("reference: %s; ours: the %s backend; tolerance %g x (1 + |ref|)" % (name, man["backend"], args.tol))
    print("| model | size | batch | outputs | max abs diff | max rel diff | ok |")
    print("|---|---|--:|--:|--:|--:|---|")
    graphs, failed, rows = {}, 0, []
    for e in man["entries"]:
        path = os.path.join(args.dir, e["onnx"])
        if path not in graphs:
            graphs.clear()
            graphs[path] = load_onnx(path)
        x = np.load(os.path.join(args.dir, e["input"]))
        ours = np.load(os.path.join(args.dir, e["output"]))
        ref = np.asarray(run(path, graphs[path], x))
        if ref.size != ours.size:
            d, rel, ok = float("inf"), float("inf"), False
        else:
            d, rel, ok = agree(ours, ref, args.tol)
        failed += not ok
        rows.append(dict(model=e["model"], batch=e["batch"], max_abs=d, max_rel=rel, ok=ok))
        print("| %s | %s | %d | %d | %.3g | %.3g | %s |" % (e["model"], e.get("size", ""), e["batch"], ours.size, d, rel,
                                                           "ok" if ok else "FAIL"))
        sys.stdout.flush()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(reference=name, backend=man["backend"], tol=args.tol, rows=rows), fh, indent=1)
    print("%d passed, %d failed" % (len(rows) - failed, failed))
    return 1 if failed else 0


# ---------------------------------------------------------------------------
# speed


def pct(v, p):
    v = sorted(v)
    k = max(0, min(len(v) - 1, int(math.ceil(p / 100.0 * len(v))) - 1))
    return v[k]


def cmd_speed(args):
    import torch

    dev = args.device
    if dev == "cuda" and not torch.cuda.is_available():
        print("speed: torch sees no CUDA device", file=sys.stderr)
        return 1
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    devname = torch.cuda.get_device_name(0) if dev == "cuda" else "cpu"
    ops = TorchOps(dev)
    with open(os.path.join(args.dir, "manifest.json")) as fh:
        man = json.load(fh)
    ours = {}
    if args.ours:
        with open(args.ours) as fh:
            for r in json.load(fh):
                ours[(r["model"], r["batch"])] = r
    batches = [int(b) for b in args.batch.split(",")]
    rows = []
    print("PyTorch %s eager on %s, TF32 %s; one batch with its copies (host -> GPU -> host), %d runs after %d warm-up"
          % (torch.__version__, devname, "on" if args.tf32 else "off", args.runs, args.warmup))
    print("| model | batch | torch p50 (ms) | torch p99 (ms) | ours p50 (ms) | ours p99 (ms) | ours / torch (p50) | torch vs our output (max rel diff) |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|")
    for m in args.models.split(","):
        ents = [e for e in man["entries"] if e["model"] == m]
        if not ents:
            print("speed: %s is not in the export" % m, file=sys.stderr)
            return 1
        g = load_onnx(os.path.join(args.dir, ents[0]["onnx"]))
        net = Interpreter(g, ops)
        for b in batches:
            e = next((e for e in ents if e["batch"] == b), None)
            if e is not None:
                x = np.load(os.path.join(args.dir, e["input"]))
                want = np.load(os.path.join(args.dir, e["output"]))
            else:
                shape = list(ents[0]["in_shape"])
                shape[0] = b
                x, want = np.random.default_rng(b).standard_normal(shape).astype(np.float32), None
            xt = torch.from_numpy(x)
            if dev == "cuda":
                xt = xt.pin_memory()
            lat = []
            with torch.inference_mode():
                for k in range(args.warmup + args.runs):
                    sync()
                    t0 = time.perf_counter()
                    y = net(xt.to(dev, non_blocking=True)).to("cpu")
                    sync()
                    if k >= args.warmup:
                        lat.append((time.perf_counter() - t0) * 1e3)
            diff, rel = "–", None
            if want is not None:
                _, rel, _ = agree(want, y.numpy(), 1e-3)
                diff = "%.3g" % rel
            p50, p99 = pct(lat, 50), pct(lat, 99)
            o = ours.get((m, b))
            o50 = o99 = ratio = "–"
            if o:
                o50, o99, ratio = "%.3f" % o["p50_ms"], "%.3f" % o["p99_ms"], "%.2f" % (o["p50_ms"] / p50)
            print("| %s | %d | %.3f | %.3f | %s | %s | %s | %s |" % (m, b, p50, p99, o50, o99, ratio, diff))
            sys.stdout.flush()
            rows.append(dict(model=m, batch=b, torch_p50_ms=p50, torch_p99_ms=p99,
                             ours_p50_ms=o["p50_ms"] if o else None, ours_p99_ms=o["p99_ms"] if o else None,
                             max_rel_diff=rel))
        del net
        if dev == "cuda":
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(torch=torch.__version__, device=devname, tf32=args.tf32, rows=rows), fh, indent=1)
    return 0


# ---------------------------------------------------------------------------
# selftest: the decoder and the numpy interpreter on hand-built models


def _pb_varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        c = v & 0x7F
        v >>= 7
        if v:
            out.append(c | 0x80)
        else:
            out.append(c)
            return bytes(out)


def _pb_field(f, wt, payload):
    key = _pb_varint(f << 3 | wt)
    if wt == 0:
        return key + _pb_varint(payload)
    if wt == 5:
        return key + payload
    return key + _pb_varint(len(payload)) + payload


def _pb_tensor(name, arr, raw=True):
    b = b"".join(_pb_field(1, 0, d) for d in arr.shape)
    b += _pb_field(2, 0, 1 if arr.dtype == np.float32 else 7)
    b += _pb_field(8, 2, name.encode())
    if raw:
        b += _pb_field(9, 2, arr.astype(arr.dtype.newbyteorder("<")).tobytes())
    elif arr.dtype == np.float32:
        b += _pb_field(4, 2, struct.pack("<%df" % arr.size, *arr.reshape(-1)))
    else:
        b += _pb_field(7, 2, b"".join(_pb_varint(int(v)) for v in arr.reshape(-1)))
    return b


def _pb_node(op, ins, outs, ints=None, i=None, f=None):
    b = b"".join(_pb_field(1, 2, x.encode()) for x in ins)
    b += b"".join(_pb_field(2, 2, x.encode()) for x in outs)
    b += _pb_field(4, 2, op.encode())
    for k, v in (ints or {}).items():  # unpacked, as proto2 writes them
        b += _pb_field(5, 2, _pb_field(1, 2, k.encode()) + b"".join(_pb_field(8, 0, x) for x in v))
    for k, v in (i or {}).items():
        b += _pb_field(5, 2, _pb_field(1, 2, k.encode()) + _pb_field(3, 0, v))
    for k, v in (f or {}).items():
        b += _pb_field(5, 2, _pb_field(1, 2, k.encode()) + _pb_field(2, 5, struct.pack("<f", v)))
    return b


def cmd_selftest(args):
    rng = np.random.default_rng(7)
    fails = []

    def check(what, got, want, tol=1e-5):
        _, rel, ok = agree(got, want, tol)
        print("%-34s max rel diff %.3g %s" % (what, rel, "ok" if ok else "FAIL"))
        if not ok:
            fails.append(what)

    # a conv net: Conv(pad 1, stride 2) -> BN -> Relu -> MaxPool(ceil) ->
    # grouped Conv -> GlobalAveragePool -> Flatten -> Gemm(transB)
    w1 = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b1 = rng.standard_normal(4).astype(np.float32)
    bn = [rng.random(4).astype(np.float32) + 0.5 for _ in range(4)]
    w2 = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    fc = rng.standard_normal((5, 4)).astype(np.float32)
    fcb = rng.standard_normal(5).astype(np.float32)
    inits = [("w1", w1), ("b1", b1), ("g", bn[0]), ("bb", bn[1]), ("m", bn[2]), ("v", bn[3]), ("w2", w2),
             ("fc", fc), ("fcb", fcb)]
    nodes = [
        _pb_node("Conv", ["x", "w1", "b1"], ["c1"], ints={"strides": [2, 2], "pads": [1, 1, 1, 1]}),
        _pb_node("BatchNormalization", ["c1", "g", "bb", "m", "v"], ["n1"], f={"epsilon": 1e-5}),
        _pb_node("Relu", ["n1"], ["r1"]),
        _pb_node("MaxPool", ["r1"], ["p1"], ints={"kernel_shape": [3, 3], "strides": [2, 2]}, i={"ceil_mode": 1}),
        _pb_node("Conv", ["p1", "w2"], ["c2"], ints={"pads": [1, 1, 1, 1]}, i={"group": 2}),
        _pb_node("GlobalAveragePool", ["c2"], ["a2"]),
        _pb_node("Flatten", ["a2"], ["f2"], i={"axis": 1}),
        _pb_node("Gemm", ["f2", "fc", "fcb"], ["y"], i={"transB": 1}),
    ]
    graph = b"".join(_pb_field(1, 2, n) for n in nodes)
    graph += b"".join(_pb_field(5, 2, _pb_tensor(k, v, raw=(k != "fcb"))) for k, v in inits)
    graph += _pb_field(11, 2, _pb_field(1, 2, b"x")) + _pb_field(12, 2, _pb_field(1, 2, b"y"))
    model = _pb_field(1, 0, 8) + _pb_field(7, 2, graph)
    path = os.path.join(args.tmp, "selftest_cnn.onnx")
    with open(path, "wb") as fh:
        fh.write(model)
    g = load_onnx(path)
    check("decode: weights", g["inits"]["w1"], w1, 0)
    check("decode: float_data weights", g["inits"]["fcb"], fcb, 0)
    if g["inputs"] != ["x"] or g["outputs"] != ["y"] or [n["op"] for n in g["nodes"]][3] != "MaxPool":
        fails.append("decode: graph structure")
    x = rng.standard_normal((2, 3, 11, 11)).astype(np.float32)
    got = Interpreter(g, NumpyOps())(x)
    # the same net written out with loops
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    c1 = np.zeros((2, 4, 6, 6))
    for o in range(4):
        for i in range(6):
            for j in range(6):
                c1[:, o, i, j] = (xp[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3] * w1[o]).sum(axis=(1, 2, 3)) + b1[o]
    r = lambda t: t.reshape(1, -1, 1, 1)
    n1 = np.maximum((c1 - r(bn[2])) / np.sqrt(r(bn[3]) + 1e-5) * r(bn[0]) + r(bn[1]), 0)
    p1 = np.zeros((2, 4, 3, 3))  # ceil((6-3)/2)+1 = 3 windows, the last one clipped
    for i in range(3):
        for j in range(3):
            p1[:, :, i, j] = n1[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3].max(axis=(2, 3))
    pp = np.pad(p1, ((0, 0), (0, 0), (1, 1), (1, 1)))
    c2 = np.zeros((2, 4, 3, 3))
    for o in range(4):
        gi = o // 2
        for i in range(3):
            for j in range(3):
                c2[:, o, i, j] = (pp[:, 2 * gi:2 * gi + 2, i:i + 3, j:j + 3] * w2[o]).sum(axis=(1, 2, 3))
    want = c2.mean(axis=(2, 3)) @ fc.T + fcb
    check("numpy interpreter: conv net", got, want)

    # an attention block as the zoo's BERT writes it
    S, H, A = 4, 8, 2
    D = H // A
    wq = rng.standard_normal((H, H)).astype(np.float32)
    lg = rng.random(H).astype(np.float32) + 0.5
    lb = rng.standard_normal(H).astype(np.float32)
    inits = [("wq", wq), ("split", np.array([0, 0, A, D], np.int64)), ("merge", np.array([0, 0, H], np.int64)),
             ("scale", np.array(1 / math.sqrt(D), np.float32)), ("sqrt2", np.array(math.sqrt(2), np.float32)),
             ("one", np.array(1, np.float32)), ("half", np.array(0.5, np.float32)), ("lg", lg), ("lb", lb)]
    nodes = [
        _pb_node("MatMul", ["x", "wq"], ["q"]),
        _pb_node("Reshape", ["q", "split"], ["qs"]),
        _pb_node("Transpose", ["qs"], ["qt"], ints={"perm": [0, 2, 1, 3]}),
        _pb_node("Transpose", ["qs"], ["kt"], ints={"perm": [0, 2, 3, 1]}),
        _pb_node("MatMul", ["qt", "kt"], ["s0"]),
        _pb_node("Mul", ["s0", "scale"], ["s"]),
        _pb_node("Softmax", ["s"], ["p"], i={"axis": -1}),
        _pb_node("MatMul", ["p", "qt"], ["ctx"]),
        _pb_node("Transpose", ["ctx"], ["ct"], ints={"perm": [0, 2, 1, 3]}),
        _pb_node("Reshape", ["ct", "merge"], ["cm"]),
        _pb_node("Div", ["cm", "sqrt2"], ["d"]),
        _pb_node("Erf", ["d"], ["e"]),
        _pb_node("Add", ["e", "one"], ["e1"]),
        _pb_node("Mul", ["cm", "e1"], ["h0"]),
        _pb_node("Mul", ["h0", "half"], ["h"]),
        _pb_node("Add", ["h", "x"], ["res"]),
        _pb_node("LayerNormalization", ["res", "lg", "lb"], ["y"], i={"axis": -1}, f={"epsilon": 1e-12}),
    ]
    graph = b"".join(_pb_field(1, 2, n) for n in nodes)
    graph += b"".join(_pb_field(5, 2, _pb_tensor(k, v, raw=(k != "split"))) for k, v in inits)
    graph += _pb_field(11, 2, _pb_field(1, 2, b"x")) + _pb_field(12, 2, _pb_field(1, 2, b"y"))
    path = os.path.join(args.tmp, "selftest_attn.onnx")
    with open(path, "wb") as fh:
        fh.write(_pb_field(7, 2, graph))
    g = load_onnx(path)
    check("decode: int64_data shape", g["inits"]["split"], np.array([0, 0, A, D]), 0)
    x = rng.standard_normal((2, S, H)).astype(np.float32)
    got = Interpreter(g, NumpyOps())(x)
    q = (x.astype(np.float64) @ wq).reshape(2, S, A, D).transpose(0, 2, 1, 3)
    s = q @ q.transpose(0, 1, 3, 2) / math.sqrt(D)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    cm = (p @ q).transpose(0, 2, 1, 3).reshape(2, S, H)
    h = cm * 0.5 * (1 + np.vectorize(math.erf)(cm / math.sqrt(2))) + x
    m, v = h.mean(-1, keepdims=True), h.var(-1, keepdims=True)
    check("numpy interpreter: attention", got, (h - m) / np.sqrt(v + 1e-12) * lg + lb)
    d, rel, ok = agree(np.array([1.0, 2.0]), np.array([1.0, 2.5]), 1e-3)
    if ok or abs(d - 0.5) > 1e-12:
        fails.append("agree: a 0.5 difference passed")
    print("selftest: %d passed, %d failed" % (6 - len(fails), len(fails)))
    return 1 if fails else 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="our outputs vs ONNX Runtime (or torch, numpy)")
    c.add_argument("--dir", required=True)
    c.add_argument("--engine", default="auto", choices=["auto", "ort", "torch", "numpy"])
    c.add_argument("--tol", type=float, default=1e-3)
    c.add_argument("--json", default="")
    s = sub.add_parser("speed", help="PyTorch eager latency next to ours")
    s.add_argument("--dir", required=True)
    s.add_argument("--models", default="resnet50,bert")
    s.add_argument("--batch", default="1,8")
    s.add_argument("--runs", type=int, default=50)
    s.add_argument("--warmup", type=int, default=10)
    s.add_argument("--ours", default="", help="gpubench latency -json output")
    s.add_argument("--tf32", action="store_true")
    s.add_argument("--device", default="cuda", help="cuda (the measurement) or cpu (a test of this script)")
    s.add_argument("--json", default="")
    t = sub.add_parser("selftest", help="decoder and numpy interpreter checks")
    t.add_argument("--tmp", default=os.environ.get("TMPDIR", "/tmp"))
    args = p.parse_args(argv)
    return {"check": cmd_check, "speed": cmd_speed, "selftest": cmd_selftest}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
