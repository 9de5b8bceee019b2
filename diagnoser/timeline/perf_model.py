"""FLOPs and bytes moved per aten op, from the shapes and dtypes `record_shapes=True` records.

Input: an op's name and the lists Kineto writes in its args: `Input Dims` (one shape per
argument, [] for non-tensors, a list of shapes for a TensorList), `Input type` (dtype names:
"float", "c10::BFloat16", "Scalar", ...), `Concrete Inputs` (the scalar arguments as text:
"[16, 16]", "True", "1") and, from PyTorch 2.1, `Input Strides` (one stride list per tensor
argument). Output: `Work(flops, bytes, dtype, family, strided)` or None for an op the model does not
cover (views, allocations, ops of unknown signature).

Strides, where recorded, change two things: an input broadcast by a stride of 0 (`expand`) is read
once per distinct element, so its bytes count the dims it really walks (and a view that overlaps
itself, `unfold`, at most the span it addresses); and a bandwidth-bound op is
`strided` when a full-size input is not walked with unit stride in the order the others are (a
transposed or permuted view against contiguous inputs, a step slice): its loads are uncoalesced, the
cause KERN020 names. Inputs that share one layout (all channels_last) are not strided.

Conventions (where TraceLens's perf model, AMD-AGI/TraceLens `perf_model.py`, differs it is said):
- a multiply-add is 2 FLOPs; bytes are the compulsory traffic (each input read once, each output
  written once): a lower bound, so the achieved TB/s is a lower bound too;
- the op's compute dtype is its first floating tensor input's; outputs take that dtype unless the
  op says otherwise (`_scaled_mm` writes 2-byte output: its out_dtype is not recorded);
- bandwidth-bound families count 1 FLOP per output element (nominal: it only places the op on the
  roofline's memory side; their roof is bandwidth, never FLOP/s).
"""
from __future__ import annotations

import ast
import math
from dataclasses import dataclass, replace

DTYPE_BYTES = {
    "double": 8, "float": 4, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4,
    "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1,
    "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1, "c10::Float8_e4m3fnuz": 1, "c10::Float8_e5m2fnuz": 1,
    "c10::complex<float>": 8, "c10::complex<double>": 16,
}
# dtype name -> the key of the peaks table (diagnoser/timeline/device_peaks.py)
DTYPE_CLASS = {
    "double": "fp64", "float": "fp32", "c10::Half": "fp16", "c10::BFloat16": "bf16",
    "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8", "c10::Float8_e4m3fnuz": "fp8", "c10::Float8_e5m2fnuz": "fp8",
}


NO_UNIT_STRIDE = "no unit stride"


@dataclass(frozen=True)
class Work:
    """What one call of an op does: FLOPs, compulsory bytes, compute dtype class, op family."""

    flops: float
    bytes: float
    dtype: str  # fp32 / bf16 / fp16 / fp8 / fp64 / "" (integer or unknown)
    family: str  # gemm / conv / attention / elementwise / copy / norm / softmax / reduction
    strided: bool = False  # a bandwidth-bound op with a full-size input walked without unit stride (Input Strides)

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes > 0 else 0.0


class Args:
    """An op's recorded arguments, read defensively (any odd value reads as absent)."""

    def __init__(self, dims, types, concrete, strides=None):
        self.dims = dims if isinstance(dims, list) else []
        self.types = types if isinstance(types, list) else []
        self.concrete = concrete if isinstance(concrete, list) else []
        self.strides = strides if isinstance(strides, list) else []

    def stride(self, i: int) -> list[int] | None:
        """The i-th argument's recorded strides, when they fit its shape."""
        s, d = self.strides[i] if i < len(self.strides) else None, self.shape(i)
        if (isinstance(s, list) and d is not None and len(s) == len(d)
                and all(isinstance(x, int) and not isinstance(x, bool) for x in s)):
            return s
        return None

    def elements_read(self, i: int) -> int:
        """Distinct elements of the i-th tensor: a dim of stride 0 (broadcast by `expand`) is read once, and
        views that overlap themselves (`unfold`, `as_strided` windows) at most the span they address."""
        d, s = self.shape(i), self.stride(i)
        if s is None:
            return math.prod(d)
        if not all(d):
            return 0
        span = 1 + sum((n - 1) * abs(st) for n, st in zip(d, s))
        return min(math.prod(n for n, st in zip(d, s) if st != 0), span)

    def inner_dim(self, i: int):
        """The dim (counted from the last: -1, -2, ...) a tensor walks with unit stride, NO_UNIT_STRIDE when
        it has none (a step slice), None when its strides are not recorded or no dim has extent."""
        d, s = self.shape(i), self.stride(i)
        if s is None:
            return None
        walked = [(abs(st), j - len(d)) for j, (n, st) in enumerate(zip(d, s)) if n > 1 and st != 0]
        if not walked:
            return None
        return next((j for st, j in walked if st == 1), NO_UNIT_STRIDE)

    def shape(self, i: int) -> list[int] | None:
        d = self.dims[i] if i < len(self.dims) else None
        if isinstance(d, list) and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in d):
            return d if (d or self.is_tensor(i)) else None
        return None

    def is_tensor(self, i: int) -> bool:
        return i < len(self.types) and self.types[i] in DTYPE_BYTES

    def esize(self, i: int) -> int:
        return DTYPE_BYTES.get(self.types[i], 0) if i < len(self.types) else 0

    def tbytes(self, i: int) -> float:
        s = self.shape(i)
        return float(self.elements_read(i)) * self.esize(i) if s is not None and self.is_tensor(i) else 0.0

    def value(self, i: int):
        """The i-th concrete input as a Python value (int, float, bool, list), or None."""
        v = self.concrete[i] if i < len(self.concrete) else None
        if not isinstance(v, str) or not v:
            return None
        if v in ("True", "False"):
            return v == "True"
        try:
            return ast.literal_eval(v)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None

    def dtype(self) -> str:
        for t in self.types:
            if t in DTYPE_CLASS:
                return DTYPE_CLASS[t]
        return ""

    def first_esize(self) -> int:
        for t in self.types:
            if t in DTYPE_CLASS:
                return DTYPE_BYTES[t]
        return 0


def _mn(a, b):
    if a is None or b is None or len(a) != 2 or len(b) != 2 or a[1] != b[0]:
        return None
    return a[0], a[1], b[1]


# --- GEMMs -----------------------------------------------------------------------------------
def gemm(name: str, a: Args) -> Work | None:
    """mm / addmm / bmm / baddbmm / matmul / linear / _scaled_mm: 2*M*N*K FLOPs per matrix
    (times the batch), plus M*N for a bias or `beta*input` term; bytes = A + B + bias + C.

    matmul broadcasts its batch dimensions (numpy rules; 1-D operands are a row or a column).
    linear's weight is [N, K]. _scaled_mm (fp8): A and B at 1 byte, its output at 2 bytes (the
    out_dtype is not recorded; bf16 is what fp8 training uses), scales ignored. TraceLens counts
    GEMMs the same way (2MNK + M*N for a bias); its bytes-per-element table (the version read)
    knows fp8 only as e4m3fnuz (AMD's), so an NVIDIA e4m3fn GEMM gets no bytes there."""
    es = a.first_esize()
    bias = 0.0
    if name in ("aten::mm", "aten::_scaled_mm"):
        mnk = _mn(a.shape(0), a.shape(1))
        if mnk is None:
            return None
        m, k, n = mnk
        batch = 1
        if name == "aten::_scaled_mm":
            return Work(2.0 * m * n * k, float(m * k + k * n) * max(a.esize(0), 1) + 2.0 * m * n, "fp8", "gemm")
    elif name == "aten::addmm":
        mnk = _mn(a.shape(1), a.shape(2))
        if mnk is None:
            return None
        m, k, n = mnk
        batch, bias = 1, a.tbytes(0)
    elif name in ("aten::bmm", "aten::baddbmm"):
        off = 1 if name == "aten::baddbmm" else 0
        x, y = a.shape(off), a.shape(off + 1)
        if x is None or y is None or len(x) != 3 or len(y) != 3 or x[0] != y[0] or x[2] != y[1]:
            return None
        batch, m, k, n = x[0], x[1], x[2], y[2]
        bias = a.tbytes(0) if off else 0.0
    elif name == "aten::linear":
        x, w = a.shape(0), a.shape(1)
        if x is None or w is None or len(w) != 2 or not x or x[-1] != w[1]:
            return None
        batch, m, k, n = 1, math.prod(x[:-1]), w[1], w[0]
        bias = a.tbytes(2) if a.shape(2) else 0.0
    elif name == "aten::matmul":
        r = _matmul_dims(a.shape(0), a.shape(1))
        if r is None:
            return None
        batch, m, k, n = r
    else:
        return None
    flops = 2.0 * batch * m * n * k + (batch * m * n if bias else 0.0)
    nbytes = float(batch * (m * k + k * n + m * n)) * es + bias
    if name == "aten::matmul":  # a broadcast operand is read once, not once per batch
        nbytes = a.tbytes(0) + a.tbytes(1) + float(batch * m * n) * es
    return Work(flops, nbytes, a.dtype(), "gemm")


def _matmul_dims(x, y):
    if not x or not y:
        return None
    x = [1] + x if len(x) == 1 else x
    y = y + [1] if len(y) == 1 else y
    if x[-1] != y[-2]:
        return None
    bx, by = x[:-2], y[:-2]
    n = max(len(bx), len(by))
    bx, by = [1] * (n - len(bx)) + bx, [1] * (n - len(by)) + by
    batch = 1
    for p, q in zip(bx, by):
        if p != q and 1 not in (p, q):
            return None
        batch *= max(p, q)
    return batch, x[-2], x[-1], y[-1]


# --- convolutions ----------------------------------------------------------------------------
# op -> index of (stride, padding, dilation, transposed, groups); None: not recorded (False / 1)
_CONV_ARGS = {
    "aten::conv1d": (3, 4, 5, None, 6), "aten::conv2d": (3, 4, 5, None, 6), "aten::conv3d": (3, 4, 5, None, 6),
    "aten::convolution": (3, 4, 5, 6, 8), "aten::_convolution": (3, 4, 5, 6, 8),
    "aten::cudnn_convolution": (3, 2, 4, None, 5),
}


def conv(name: str, a: Args) -> Work | None:
    """Convolution forward: 2 * N * C_out * prod(out spatial) * (C_in / groups) * prod(kernel)
    FLOPs, out = floor((in + 2*pad - dil*(k-1) - 1) / stride) + 1; transposed convolutions count
    their input positions instead (weight [C_in, C_out/groups, *k]). Bias adds are left out.
    `convolution_backward` (grad_output, input, weight, ..., output_mask) is one forward's FLOPs
    for each of grad_input and grad_weight its output_mask asks for. Bytes: input + weight + output
    (backward: grad_output + input + weight + the gradients written). The backward's
    output_mask decides its FLOPs (a first layer computes no grad_input: 1x, not 2x)."""
    if name == "aten::convolution_backward":
        go, x, w = a.shape(0), a.shape(1), a.shape(2)
        if go is None or x is None or w is None or len(x) < 3 or len(x) != len(w) or len(go) != len(x):
            return None
        transposed, groups = bool(a.value(7)), a.value(9) or 1
        mask = a.value(10)
        mask = mask if isinstance(mask, list) and len(mask) == 3 else [True, True, False]
        fwd = _conv_flops(x, w, go, bool(transposed), int(groups))
        flops = fwd * (int(bool(mask[0])) + int(bool(mask[1])))
        es = a.first_esize()
        nbytes = a.tbytes(0) + a.tbytes(1) + a.tbytes(2) + (a.tbytes(1) if mask[0] else 0) + (a.tbytes(2) if mask[1] else 0)
        return Work(flops, nbytes if es else 0.0, a.dtype(), "conv")
    idx = _CONV_ARGS.get(name)
    if idx is None:
        return None
    x, w = a.shape(0), a.shape(1)
    if x is None or w is None or len(x) < 3 or len(x) != len(w):
        return None
    sp = len(x) - 2
    stride, pad, dil = (_per_dim(a.value(i), sp, d) for i, d in zip(idx[:3], (1, 0, 1)))
    if stride is None or pad is None or dil is None or 0 in stride:
        return None
    transposed = bool(a.value(idx[3])) if idx[3] is not None else False
    groups = a.value(idx[4]) or 1
    if not isinstance(groups, int) or groups <= 0:
        return None
    if transposed:
        opad = _per_dim(a.value(7), sp, 0) or [0] * sp
        out = [(i - 1) * s - 2 * p + d * (k - 1) + op + 1
               for i, s, p, d, k, op in zip(x[2:], stride, pad, dil, w[2:], opad)]
        cout = w[1] * groups
    else:
        out = [(i + 2 * p - d * (k - 1) - 1) // s + 1 for i, s, p, d, k in zip(x[2:], stride, pad, dil, w[2:])]
        cout = w[0]
    if min(out) <= 0:
        return None
    y = [x[0], cout] + out
    es = a.first_esize()
    flops = _conv_flops(x, w, y, transposed, groups)
    return Work(flops, a.tbytes(0) + a.tbytes(1) + float(math.prod(y)) * es, a.dtype(), "conv")


def _conv_flops(x, w, y, transposed: bool, groups: int) -> float:
    k = math.prod(w[2:])
    if transposed:  # each input position scatters into C_out/groups * k outputs
        return 2.0 * x[0] * x[1] * math.prod(x[2:]) * w[1] * k
    return 2.0 * y[0] * y[1] * math.prod(y[2:]) * (x[1] // max(groups, 1)) * k


def _per_dim(v, n: int, default: int):
    if v is None:
        return [default] * n
    if isinstance(v, int) and not isinstance(v, bool):
        return [v] * n
    if isinstance(v, list) and all(isinstance(x, int) for x in v):
        return v * n if len(v) == 1 else v if len(v) == n else None
    return None


# --- attention -------------------------------------------------------------------------------
# op -> (index of is_causal, backward?, index of the first of q, k, v)
_ATTN = {
    "aten::scaled_dot_product_attention": (5, False, 0),
    "aten::_scaled_dot_product_flash_attention": (4, False, 0),
    "aten::_scaled_dot_product_efficient_attention": (6, False, 0),
    "aten::_scaled_dot_product_cudnn_attention": (6, False, 0),
    "aten::_scaled_dot_product_flash_attention_backward": (11, True, 1),
    "aten::_scaled_dot_product_efficient_attention_backward": (11, True, 1),
    "aten::_scaled_dot_product_cudnn_attention_backward": (14, True, 1),
}


def attention(name: str, a: Args) -> Work | None:
    """SDPA and its flash / memory-efficient / cuDNN kernels, q [B, H, Lq, D], k [B, Hk, Lk, D],
    v [B, Hk, Lk, Dv]: forward 2*B*H*P*(D + Dv) FLOPs, P the (query, key) pairs computed: Lq*Lk,
    or with is_causal (top-left aligned, torch's convention) sum over rows i of min(i+1, Lk).
    Backward: 2.5x the forward (five matmuls against two: dV, dP, dS->dQ, dK and the recomputed
    S), so the flash kernels' recomputation is counted as work done. Bytes: q, k, v read and out
    written once (backward: q, k, v, out, grad_out read, dq, dk, dv written). TraceLens (like FlashAttention's
    benchmarks) halves the causal work, Lq*Lk/2: within Lq/2 pairs of ours for Lq = Lk, and
    wrong for Lq != Lk, where top-left alignment keeps min(i+1, Lk) keys in row i."""
    spec = _ATTN.get(name)
    if spec is None:
        return None
    ci, bwd, q0 = spec
    q, k, v = a.shape(q0), a.shape(q0 + 1), a.shape(q0 + 2)
    if q is None or k is None or v is None or len(q) != 4 or len(k) != 4 or len(v) != 4:
        return None
    b, h, lq, d = q
    lk, dv = k[2], v[3]
    causal = a.value(ci) is True
    pairs = _causal_pairs(lq, lk) if causal else lq * lk
    flops = 2.0 * b * h * pairs * (d + dv)
    es = a.first_esize()
    out = float(b * h * lq * dv) * es
    qkv = a.tbytes(q0) + a.tbytes(q0 + 1) + a.tbytes(q0 + 2)
    if bwd:
        return Work(2.5 * flops, 2 * qkv + 2 * out, a.dtype(), "attention")
    return Work(flops, qkv + out, a.dtype(), "attention")


def _causal_pairs(lq: int, lk: int) -> int:
    """sum_{i<lq} min(i+1, lk)."""
    full = min(lq, lk)
    return full * (full + 1) // 2 + max(lq - lk, 0) * lk


# --- bandwidth-bound families ----------------------------------------------------------------
_ELEMENTWISE = frozenset(
    "add sub mul div neg abs exp log sqrt rsqrt pow relu gelu silu sigmoid tanh clamp where "
    "threshold_backward gelu_backward silu_backward sigmoid_backward tanh_backward "
    "fill masked_fill zero dropout native_dropout mish hardtanh leaky_relu erf sin cos reciprocal "
    "addcmul addcdiv lerp _foreach_add _foreach_mul".split())
_COPY = frozenset("copy_ _to_copy clone contiguous cat stack".split())
_NORM = {"aten::native_layer_norm": 1, "aten::native_batch_norm": 1, "aten::native_group_norm": 1,
         "aten::_fused_rms_norm": 1, "aten::rms_norm": 1, "aten::layer_norm": 1, "aten::batch_norm": 1,
         "aten::group_norm": 1, "aten::native_layer_norm_backward": 2, "aten::native_batch_norm_backward": 2,
         "aten::cudnn_batch_norm": 1, "aten::cudnn_batch_norm_backward": 2, "aten::native_group_norm_backward": 2}
_SOFTMAX = {"aten::_softmax": 2, "aten::softmax": 2, "aten::_log_softmax": 2, "aten::log_softmax": 2,
            "aten::_softmax_backward_data": 3, "aten::_log_softmax_backward_data": 3}
_REDUCTION = frozenset("sum mean amax amin max min var std norm linalg_vector_norm argmax argmin prod any all".split())


def bandwidth(name: str, a: Args) -> Work | None:
    """Bytes moved by the memory-bound families, each tensor argument read once and the output
    written once:
    - elementwise (add, mul, gelu, their backward ops, in-place forms): inputs + one output of
      the broadcast shape (an in-place op writes its first input; a .out overload, its last
      tensor after a scalar, is the output and is written, not read);
    - copies and casts (copy_, _to_copy, clone, contiguous, cat): source read and destination
      written (copy_'s destination is its first argument; a cast writes at the source's size
      unless the destination's dtype is recorded); index_select (embedding lookups) moves the
      selected rows only, twice (read, write), and its index;
    - norms (layer / batch / group / RMS): every tensor argument read, one output of x's size
      written (forward: x, weight, bias in, y out; backward: grad_y, x, statistics, weight in,
      grad_x out; the small weight gradients left out);
    - softmax / log_softmax: 2 passes (read, write); their backward 3 (grad, out, grad_in);
    - reductions (sum, mean, amax, var, norm): the input read (the output is small or, for a
      partial reduction, counted from the recorded dims).
    FLOPs are nominal (1 per element of the largest tensor)."""
    op = name.split("::", 1)[-1]
    base = op[:-1] if op.endswith("_") and op != "copy_" else op
    tensors = [i for i in range(len(a.dims)) if a.is_tensor(i) and a.shape(i) is not None]
    if not tensors or not a.dtype() and not a.first_esize():
        return None
    big = max(float(math.prod(a.shape(i))) for i in tensors)
    es = a.first_esize()
    read = sum(a.tbytes(i) for i in tensors)
    if name in _NORM:
        return Work(big, read + a.tbytes(0), a.dtype(), "norm")  # backward: its inputs + grad_x
    if name in _SOFTMAX:
        return Work(big, a.tbytes(0) * _SOFTMAX[name], a.dtype(), "softmax")
    if op == "index_select":  # embedding lookup: the selected rows read and written, the index read
        x, dim, idx = a.shape(0), a.value(1), a.shape(2)
        if x is None or idx is None or not isinstance(dim, int) or not -len(x) <= dim < len(x) or not x[dim]:
            return None
        out = math.prod(x) // x[dim] * math.prod(idx)
        return Work(float(out), 2.0 * out * es + a.tbytes(2), a.dtype(), "copy")
    if op in _COPY:
        if op == "copy_" and len(tensors) >= 2:
            return Work(big, a.tbytes(0) + a.tbytes(1), a.dtype(), "copy")
        return Work(big, 2 * read, a.dtype(), "copy")
    if base in _REDUCTION:
        return Work(big, read, a.dtype(), "reduction")
    if base in _ELEMENTWISE:
        out_arg = _out_argument(a, tensors)
        if out_arg is not None:  # mul.out(self, 2.0, out=t): read self, write out
            return Work(big, read, a.dtype(), "elementwise")
        shapes = [a.shape(i) for i in tensors]
        out = _broadcast(shapes)
        if out is None:
            return None
        written = float(math.prod(out)) * es
        return Work(float(math.prod(out)), read + written, a.dtype(), "elementwise")
    return None


def _out_argument(a: Args, tensors: list[int]) -> int | None:
    """The `out=` tensor of an elementwise op's .out overload: a last tensor argument with elements
    that follows a scalar (an argument of no dims), as in mul.out(self, other: Scalar, out)."""
    last = tensors[-1]
    if last != len(a.dims) - 1 or not a.shape(last):
        return None
    before = [a.shape(i) for i in range(last)]
    return last if any(s is None or s == [] for s in before) and len(tensors) >= 2 else None


def _broadcast(shapes):
    n = max(len(s) for s in shapes)
    out = [1] * n
    for s in shapes:
        for j, d in enumerate([1] * (n - len(s)) + list(s)):
            if d != 1 and out[j] not in (1, d):
                return None
            out[j] = max(out[j], d) if d != 1 else out[j]
    return out


_MODELS = (gemm, conv, attention, bandwidth)
BANDWIDTH_FAMILIES = ("elementwise", "copy", "norm", "softmax", "reduction")
GEMM_NAMES = frozenset(("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul",
                        "aten::linear", "aten::_scaled_mm"))
MODELED = GEMM_NAMES | frozenset(_CONV_ARGS) | {"aten::convolution_backward"} | frozenset(_ATTN)


def is_modeled(name: str) -> bool:
    """Whether `work()` has a model for this op name (before looking at its arguments)."""
    if name in MODELED or name in _NORM or name in _SOFTMAX:
        return True
    if not name.startswith("aten::"):
        return False
    op = name[6:]
    base = op[:-1] if op.endswith("_") and op != "copy_" else op
    return op in _COPY or op == "index_select" or base in _REDUCTION or base in _ELEMENTWISE


def _strided(a: Args) -> bool:
    """Some full-size tensor input is walked without unit stride, or along another dim than the others
    (its strides recorded): the op's loads are uncoalesced."""
    tensors = [i for i in range(len(a.dims)) if a.is_tensor(i) and a.shape(i)]
    if not tensors:
        return False
    big = max(math.prod(a.shape(i)) for i in tensors)
    inner = {a.inner_dim(i) for i in tensors if math.prod(a.shape(i)) == big and big > 1}
    inner.discard(None)
    return NO_UNIT_STRIDE in inner or len(inner) > 1


def work(name: str, dims, types, concrete, strides=None) -> Work | None:
    """The op's Work from its recorded arguments, or None (no model, or arguments it cannot use)."""
    a = Args(dims, types, concrete, strides)
    for model in _MODELS:
        try:
            w = model(name, a)
            if w is not None and w.family in BANDWIDTH_FAMILIES and a.strides and _strided(a):
                w = replace(w, strided=True)
        except (TypeError, ValueError, IndexError, OverflowError, ZeroDivisionError):
            w = None
        if w is not None:
            return w if w.bytes > 0 or w.flops > 0 else None
    return None
