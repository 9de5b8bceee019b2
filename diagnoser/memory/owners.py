"""Who made an allocation: the training phase, owner class and source site read from its stack.

Pure functions over the frames of one allocation stack (no replay, no lifetimes): memory.py combines
the phase with when the tensor was freed to decide between a durable owner and "temporaries".
"""
from __future__ import annotations

from functools import lru_cache

from ..memory_owners import OWNERS

_LIBRARY_MARKERS = ("/site-packages/", "/dist-packages/", "/lib/python3", "<frozen ")
_PARAM_FUNCS = {"_apply", "convert", "to", "cuda", "reset_parameters", "to_empty", "_load_from_state_dict"}
_OPT_STATE_FUNCS = {"_init_group", "_init_state", "load_state_dict", "__setstate__"}
_ENGINE = "torch::autograd::Engine::"
_MODULE_CALL = ("_call_impl", "_wrapped_call_impl")
_ATEN_PREFIX = "at::_ops::"


def _py(stack):
    return [f for f in stack if f.filename.endswith(".py")]


def phase_of_stack(stack) -> str:
    """Training phase visible in an allocation stack: parameters | backward | optimizer | forward | unknown."""
    if any(f.name.startswith(_ENGINE) for f in stack):
        return "backward"  # autograd's engine thread carries no Python frames
    pys = [(f.filename.replace("\\", "/"), f.name) for f in _py(stack)]
    if any(("/torch/autograd/" in fn and name in ("backward", "_engine_run_backward", "grad"))
           or (fn.endswith("torch/_tensor.py") and name == "backward") for fn, name in pys):
        return "backward"
    if any("/torch/optim/" in fn for fn, _ in pys):
        return "optimizer"
    if any("/torch/nn/" in fn and (name in _PARAM_FUNCS or fn.endswith(("nn/init.py", "nn/parameter.py"))
                                   or ("/nn/modules/" in fn and name == "__init__")) for fn, name in pys):
        return "parameters"
    if any(name == "forward" or (fn.endswith("nn/modules/module.py") and "call_impl" in name) for fn, name in pys):
        return "forward"
    return "unknown"


def creates_optimizer_state(stack) -> bool:
    """The optimizer creating its state (e.g. Adam's exp_avg): kept, though made during a step."""
    return any("/torch/optim/" in f.filename.replace("\\", "/") and f.name in _OPT_STATE_FUNCS for f in _py(stack))


def site_of_stack(stack) -> str:
    """`file:line in func` of the innermost user (non-library) Python frame, else the innermost one."""
    pys = _py(stack)
    if not pys:
        return "<autograd engine>" if any(f.name.startswith(_ENGINE) for f in stack) else "<no Python frames>"
    user = [f for f in pys if not any(m in f.filename.replace("\\", "/") for m in _LIBRARY_MARKERS)]
    f = (user or pys)[0]
    return f"{f.filename.replace(chr(92), '/').rsplit('/', 1)[-1]}:{f.line} in {f.name}"


def _is_user(f) -> bool:
    return not any(m in f.filename.replace("\\", "/") for m in _LIBRARY_MARKERS)


def _site(f) -> str:
    return f"{f.filename.replace(chr(92), '/').rsplit('/', 1)[-1]}:{f.line} in {f.name}"


def _is_module_call(f) -> bool:
    return f.name in _MODULE_CALL and f.filename.replace("\\", "/").endswith("nn/modules/module.py")


def call_of_stack(stack):
    """(caller site, top-level forward frame) of an allocation made inside an nn.Module call, else None.

    The caller is the first user frame outside the outermost module call (the line of the loop that
    calls the model: where its outputs are produced and, when they are kept, kept); the top-level
    frame is the outermost module's own forward line, which tells one model call's sections apart.
    """
    pys = _py(stack)
    outer = max((i for i, f in enumerate(pys) if _is_module_call(f)), default=-1)
    if outer < 0:
        return None
    inner = outer
    while inner > 0 and _is_module_call(pys[inner - 1]):
        inner -= 1
    top = pys[inner - 1] if inner > 0 else None
    caller = next((f for f in pys[outer + 1:] if _is_user(f)), None)
    return (_site(caller) if caller else "<no caller frame>", _site(top) if top else "")


def op_of_stack(stack) -> str:
    """The ATen operator called from Python (`aten::pow`), from the C++ frames; "" when none recorded."""
    op = ""
    for f in stack:  # innermost first: the last match is the outermost op, the one Python called
        if f.name.startswith(_ATEN_PREFIX):
            op = _aten_name(f.name[len(_ATEN_PREFIX):len(_ATEN_PREFIX) + 200]) or op
        elif f.filename.endswith(".py"):
            break
    return f"aten::{op}" if op else ""


def _aten_name(rest: str) -> str:
    """`pow_Tensor_Scalar::call(...)` -> `pow`: the operator without its overload (which starts with a
    capital, as ATen names them); "" unless it is a call or redispatch frame."""
    token, sep, tail = rest.partition("::")
    if not sep or not tail.startswith(("call", "redispatch")) or not token.replace("_", "").isalnum():
        return ""
    for i in range(1, len(token) - 1):
        if token[i] == "_" and token[i + 1].isupper():
            return token[:i]
    return token


@lru_cache(maxsize=4096)
def describe_call(stack):
    """(keeping site, top-level call frame, op) of one stack; cached like describe_stack."""
    call = call_of_stack(stack)
    keep = call[0] if call else site_of_stack(stack)
    return keep, (call if call else None), op_of_stack(stack)


@lru_cache(maxsize=4096)
def describe_stack(stack):
    """(phase, creates optimizer state, site) of one stack; cached, as stacks repeat across events."""
    return phase_of_stack(stack), creates_optimizer_state(stack), site_of_stack(stack)


# the owner of a phase's allocations that outlive the phase
DURABLE_OWNER = {"parameters": "parameters", "backward": "gradients", "optimizer": "optimizer_state",
                 "forward": "activations", "unknown": "unknown"}
