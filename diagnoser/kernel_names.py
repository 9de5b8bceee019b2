"""Demangled kernel names, the pieces every reader and analysis cuts the same way: a name without
its parameters, the one way to shorten a name (`short_name`, for each purpose), whose code a
kernel is (cuBLAS, cuDNN, ..., user code), the GPU generation and the program's framework a set of names
tells (the timeline, the Nsight Compute report, runs, findings and reports use them)."""
from __future__ import annotations

import functools
import re

from .program_kinds import GPU_ARCHS


def without_parameters(name: str) -> str:
    """The name up to its parameter list: the first `(` outside template brackets
    (`void f<int>(float*)` -> `void f<int>`; `(anonymous namespace)` at the start is kept)."""
    depth = 0
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and i > 0:
            return name[:i]
    return name


# ---------------------------------------------------------------- one way to shorten a name, for each purpose

# What a shortened name is for decides what of it is kept:
LABEL = "label"            # text a sentence or table holds: the function's name, `<…>` where templates were
EVIDENCE = "evidence"      # who built the kernel: namespace and template arguments kept (`at::`, `vllm::`, sm90)
NCU_FILTER = "ncu filter"  # `ncu --kernel-name-base demangled -k regex:`: the base name Nsight Compute matches
MATCH_KEY = "match key"    # one spelling for every tool's (Nsight Systems, Nsight Compute, Kineto): to match launches
FUNCTION = "function"      # the function's name alone, as Nsight Compute's `--kernel-name-base function` prints it
PURPOSES = (LABEL, EVIDENCE, NCU_FILTER, MATCH_KEY, FUNCTION)
SHORT_NAME_LIMIT = 60  # characters of a label or evidence, the cut marked with an ellipsis

_RETURN_TYPE = re.compile(r"^void\s+")
_ANONYMOUS_SCOPE = re.compile(r"(<unnamed>|\(anonymous namespace\))::")
_BASE = re.compile(r"[^<(]*")
# a generic wrapper's name says nothing: cutlass::Kernel2<cutlass_80_simt_sgemm_...> is named by its instance
GENERIC_KERNEL_NAMES = {"Kernel", "Kernel2", "kernel", "device_kernel"}
_FIRST_TEMPLATE_ARGUMENT = re.compile(r"<\s*([A-Za-z_][\w]*)")
# Nsight Systems and Nsight Compute demangle the same symbol differently: `at::native::f<(int)8, ...>`
# vs `at::f<8, ...>`, `<unnamed>::` or not. The match key drops scopes, integer casts and spaces.
_SCOPE = re.compile(r"(<unnamed>|\(anonymous namespace\)|[A-Za-z_]\w*)::")
_CAST = re.compile(r"\((?:unsigned |signed )?(?:int|long|long long|short|char|bool|unsigned|size_t)\)(?=-?\w)")
_SPACE = re.compile(r"\s+")
_UNSIGNED = re.compile(r"\b(\d+)(?:ull|ul|ll|u|l)\b")
_LAMBDA = re.compile(r"\[lambda\(([^()]*)\)\(instance(\d+)\)\]")  # nsys/ncu spelling of Kineto's {lambda(..)#N}
_BOOL = {"false": "0", "true": "1"}
_IDENTIFIER = re.compile(r"[A-Za-z_~][A-Za-z0-9_~]*")


def short_name(name, purpose: str = LABEL, limit: int = SHORT_NAME_LIMIT) -> str:
    """`name` (a demangled C++ kernel name, or any subject's name) shortened for `purpose` (LABEL,
    EVIDENCE, NCU_FILTER, MATCH_KEY or FUNCTION: what it is for decides what is kept); a label or
    evidence is cut to `limit` characters."""
    if purpose == LABEL:
        return _cut(_label(str(name)), limit)
    if purpose == EVIDENCE:
        return _cut(without_parameters(_RETURN_TYPE.sub("", name.strip())), limit)
    if purpose == NCU_FILTER:
        return _base_name(name, limit)
    if purpose == MATCH_KEY:
        return _match_key(name)
    if purpose == FUNCTION:
        return _function(name)
    raise ValueError(f"a kernel name is shortened for one of {PURPOSES}, not {purpose!r}")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _label(name: str) -> str:
    """No return type, namespaces, template or call arguments (`void at::native::f<float>(int)` ->
    `f<…>`); a name that is no C++ signature (it has spaces: `Memcpy HtoD (Pinned)`) is kept."""
    text = _RETURN_TYPE.sub("", _ANONYMOUS_SCOPE.sub("", name.strip()))
    base = _BASE.match(text).group(0)
    if base and ("::" in base or len(base) < len(text)) and " " not in base.strip():
        rest = text[len(base):]
        text = (base.split("::")[-1] or base) + ("<\u2026>" if rest.startswith("<") else "")
    return text


def _base_name(name: str, limit: int) -> str:
    """The function's base name (no return type, scope, templates, args), or a generic wrapper's
    instance: a distinctive part of the name that Nsight Compute's `-k regex:` finds."""
    n = _RETURN_TYPE.sub("", name.strip()).replace("(anonymous namespace)", "anonymous")
    depth, base = 0, []
    for ch in n:
        if ch in "<(":
            if depth == 0 and ch == "(":
                break
            depth += 1
            continue
        if ch in ">)":
            depth -= 1
            continue
        if depth == 0:
            base.append(ch)
    short = "".join(base).split("::")[-1].strip()
    if short in GENERIC_KERNEL_NAMES:
        inner = _FIRST_TEMPLATE_ARGUMENT.search(n)
        short = inner.group(1) if inner else short
    return short or n[:limit]


def _function(name: str) -> str:
    """`void ns::f<int>(float*)` -> `f`; `nvjet_x` stays `nvjet_x`; no identifier: the name unchanged."""
    s = without_parameters(name.strip())
    out, depth = [], 0  # drop template arguments
    for ch in s:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    last = "".join(out).strip().split("::")[-1].split()
    m = _IDENTIFIER.search(last[-1]) if last else None
    return m.group(0) if m else name


def _match_key(name) -> str:
    """A demangled kernel name as every tool prints it: scopes, integer casts, `u` suffixes, `void`,
    `const`, spaces and the call's parameter list dropped (CUPTI writes `(T1*, int)` where nsys writes
    `(float*, int)`), false/true as 0/1 (Nsight Systems' `<32, 0>` is Kineto's `<32u, false>`)."""
    text = re.sub(r"\b(void|const)\b", "", _CAST.sub("", _SCOPE.sub("", str(name or ""))))
    text = _LAMBDA.sub(r"{lambda(\1)#\2}", _SPACE.sub("", text))
    text = _UNSIGNED.sub(r"\1", without_parameters(text))
    return re.sub(r"\b(false|true)\b", lambda m: _BOOL[m.group(1)], text)


# ---------------------------------------------------------------- the GPU generation and the program, by name


# compute capability major (minor) -> NVIDIA generation
_CC_ARCH = {3: "kepler", 5: "maxwell", 6: "pascal", 8: "ampere", 9: "hopper", 10: "blackwell", 11: "blackwell",
            12: "blackwell"}
_AMD_DEVICE = re.compile(r"\bAMD\b|Instinct|\bMI\d{3}|Radeon|gfx\d", re.I)


def arch_of_device(name: str, cc: str) -> str | None:
    """The generation of a device from its properties (name, compute capability 'M.m'); None when they
    do not say. An AMD Instinct GPU (ROCm reports its gfx version, e.g. 9.4 for gfx942) is cdna."""
    name, cc = str(name or ""), str(cc or "")
    m = re.match(r"^\s*(\d+)\.(\d+)", cc)
    if _AMD_DEVICE.search(name) or (m and m.group(1) == "9" and m.group(2) != "0"):  # NVIDIA has no 9.x but 9.0
        return None if re.search(r"Radeon", name, re.I) else "cdna"  # RDNA (Radeon): no generation named here
    if not m:
        return None
    major, minor = int(m.group(1)), int(m.group(2))
    if major == 7:
        return "turing" if minor >= 5 else "volta"
    if major == 8 and minor == 9:
        return "ada"
    return _CC_ARCH.get(major)


# kernel names that are built for (and picked by the library for) one generation: the newest one a trace
# names is a lower bound of its GPU (a kernel built for sm_75 also runs on sm_90; the reverse never)
ARCH_NAME_PATTERNS = (  # (compiled where first asked: a trace with device properties never asks)
    ("volta", r"(^|[^a-z0-9])volta_|(^|_)sm_?70_|cutlass_70_"),
    ("turing", r"(^|[^a-z0-9])turing_|(^|_)sm_?75_|cutlass_75_"),
    ("ampere", r"(^|[^a-z0-9])ampere_|(^|_)sm_?8[06]_|cutlass_8[06]_"),
    ("ada", r"(^|_)sm_?89_|cutlass_89_"),
    ("hopper", r"(^|_)sm_?90a?_|nvjet_sm90|cutlass_90_|cutlass3x_sm90"),
    ("blackwell", r"(^|_)sm_?1[02]0a?_|nvjet_sm1[02]0|cutlass3x_sm1[02]0"),
    ("cdna", r"^Cijk_|gfx9\d[\da-z]|_MFMA_|(^|_)mfma_|igemm_\w*gtcx"),
)


@functools.cache
def _arch_res() -> tuple:
    return tuple((arch, re.compile(p, re.I)) for arch, p in ARCH_NAME_PATTERNS)


def arch_from_kernel_names(names) -> tuple[str, str] | None:
    """(generation, evidence) from kernel names: the newest generation any name is built for, with an
    example name; None when no name is generation-specific."""
    best, example = None, ""
    rank = {a: i for i, a in enumerate(GPU_ARCHS)}
    for name in names:
        s = str(name)
        for arch, pattern in _arch_res():
            if pattern.search(s) and (best is None or rank[arch] > rank[best]):
                best, example = arch, s
    if best is None:
        return None
    example = short_name(example, EVIDENCE)
    return best, f"kernel names built for {best} (e.g. {example}); the GPU is that generation or newer"


# who wrote a kernel, by its name: the program facts' kernel-side evidence (compiled where first asked: a
# trace with PyTorch operators never asks)
FRAMEWORK_KERNEL_PATTERNS = (
    ("vllm", r"\bvllm::|reshape_and_cache|paged_attention_v\d", re.I),
    ("sglang", r"sgl_kernel|sglang", re.I),
    ("tensorrt-llm", r"tensorrt_llm|trtllm|\bmmha\b", re.I),
    ("jax-xla", r"^(\w+_)?fusion(_\d+)*$|^wrapped_\w+$|^(loop|input)_\w+_fusion", 0),
    ("openacc-openmp", r"^\w+_\d+_gpu(__red\w*)?$|__omp_offloading_|^nvkernel_\w+_F\d+L\d+", 0),
    # at:: / c10:: kernels are PyTorch's own; triton_poi/red/per/tem_ kernels are torch.compile's (Inductor)
    ("pytorch", r"\bat::|\bat_cuda_detail::|\bc10::|^(void )?native::|^triton_(poi|red|per|tem)_", 0),
)
_LIBRARY = (r"cublas|cudnn|cutlass|nvjet|xmma|sgemm|hgemm|gemm|gemv|cub::|nccl|flash|fmha|cask|"
            r"^(volta|turing|ampere|sm\d+)_|^Cijk_|splitKreduce|scal_kernel|fft|curand|thrust")


@functools.cache
def _framework_res() -> tuple:
    """FRAMEWORK_KERNEL_PATTERNS compiled, then the library kernels' pattern."""
    return (tuple((name, re.compile(p, flags)) for name, p, flags in FRAMEWORK_KERNEL_PATTERNS),
            re.compile(_LIBRARY, re.I))


def framework_from_kernel_names(names) -> tuple[str, str] | None:
    """(framework, evidence) from kernel names alone; None when they say nothing (library kernels only).
    A program whose own kernels match no framework's naming is plain CUDA (or HIP) code."""
    names = list(dict.fromkeys(str(n) for n in names))
    patterns, library = _framework_res()
    for framework, pattern in patterns:
        hits = [n for n in names if pattern.search(n)]
        if hits:
            note = (" (NVHPC's <function>_<line>_gpu naming of OpenACC/OpenMP compute regions)"
                    if framework == "openacc-openmp" else "")
            return framework, f"{len(hits)} kernel name(s) like {short_name(hits[0], EVIDENCE)}{note}"
    own = [n for n in names if not library.search(n) and kernel_origin(n) == "user code"]
    if own:
        return "cuda", (f"{len(own)} kernel(s) of the program's own (e.g. {short_name(own[0], EVIDENCE)}) "
                        "and no framework's")
    return None


# Whose code a kernel is, judged by its name, most specific first. Library kernels' fix is never
# in their code, only in how they are called; Triton kernels are the user's (torch.compile or
# @triton.jit), PyTorch's ATen kernels the framework's.
ORIGIN_PATTERNS = (
    ("cuDNN", r"cudnn|^sm\d+_xmma_(fprop|dgrad|wgrad)|_(fprop|dgrad|wgrad)_implicit|implicit_convolve"
              r"|winograd|^void fft2d_|^fft2d_|cask_plugin|engines_precompiled"),
    ("cuBLAS", r"cublas|^nvjet_|^sm\d+_xmma_|gemv|gemmk|^(ampere|hopper|volta|turing|maxwell)_.*gemm"),
    ("flash-attention", r"flash|fmha|sdpa"),
    ("CUTLASS", r"cutlass"),
    ("NCCL", r"^nccl|ncclDevKernel"),
    ("CUB", r"^Device(Radix|Reduce|Scan|Select|Segmented|Unique|Compact)|cub::|at_cuda_detail::Device"),
    ("Triton", r"^triton_|^triton__"),
    # Nsight Compute may print ATen's kernels without the `at::` namespace (`void native::...`)
    ("PyTorch", r"at::native::|at::cuda::|^void at::|^void c10::|^(vectorized_|unrolled_)?elementwise_kernel"
                r"|^(void )?native::|indexing_backward_kernel|index(Func|Add)(Small|Large)Index|kernelHistogram1D"),
)
NOT_LIBRARIES = {"Triton", "PyTorch"}


@functools.cache
def _origin_res() -> tuple:
    """ORIGIN_PATTERNS compiled, once, where a kernel's origin is first asked (an Nsight Compute report;
    a trace's start-up compiles none of them)."""
    return tuple((name, re.compile(p, re.IGNORECASE)) for name, p in ORIGIN_PATTERNS)


def kernel_origin(*names: str) -> str:
    """cuBLAS | cuDNN | flash-attention | CUTLASS | NCCL | CUB | Triton | PyTorch | user code."""
    for name in names:
        for origin, pattern in _origin_res():
            if name and pattern.search(name):
                return origin
    return "user code"


# The operand alignment a GEMM kernel was built for, in elements (CUTLASS / cuBLAS: `_align1`, `_align8`,
# `_aligna4_alignc4`): cuBLAS picks a narrower build when a dimension (or leading dimension) is not a
# multiple of 16 bytes, e.g. a vocabulary of 50257 in bf16. Element bytes from the name's data types.
_ALIGN = re.compile(r"_align([abc])?(\d+)(?=_|$|[^0-9a-z])", re.I)
_ELEM_BYTES = (  # input types first: a 16-bit kernel's name also carries its f32 accumulator
    (re.compile(r"e4m3|e5m2|fp8|_i8|i8i8|s8s8|int8", re.I), 1),
    (re.compile(r"bf16|f16|fp16|hgemm|half|s1688|s16816|h1688|h16816", re.I), 2),
    (re.compile(r"tf32|f32|fp32|float", re.I), 4),
    (re.compile(r"f64|double", re.I), 8),
)
ALIGNED_BYTES = 16  # a 128-bit access per operand row: what tensor-core GEMM kernels are built for


_NOT_TENSOR_OP = re.compile(r"simt|_ffma|sgemm|dgemm|gemv", re.I)


def gemm_alignment(name: str) -> tuple[int, int] | None:
    """(alignment in elements, element bytes) a tensor-core GEMM kernel name declares (the narrowest operand),
    else None. CUDA-core (SIMT / FFMA) GEMMs load scalars whatever the shapes: their `align1` says nothing."""
    if _NOT_TENSOR_OP.search(name):
        return None
    aligns = [int(m.group(2)) for m in _ALIGN.finditer(name)]
    if not aligns:
        return None
    elem = next((b for pat, b in _ELEM_BYTES if pat.search(name)), 2)
    return min(aligns), elem
