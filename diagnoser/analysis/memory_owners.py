"""Who made an allocation: the training phase, owner class and source site read from its stack.

Pure functions over the frames of one allocation stack (no replay, no lifetimes): memory.py combines
the phase with when the tensor was freed to decide between a durable owner and "temporaries".
"""
from __future__ import annotations

from functools import lru_cache

OWNERS = ("parameters", "gradients", "optimizer_state", "activations", "temporaries", "unknown")

_LIBRARY_MARKERS = ("/site-packages/", "/dist-packages/", "/lib/python3", "<frozen ")
_PARAM_FUNCS = {"_apply", "convert", "to", "cuda", "reset_parameters", "to_empty", "_load_from_state_dict"}
_OPT_STATE_FUNCS = {"_init_group", "_init_state", "load_state_dict", "__setstate__"}
_ENGINE = "torch::autograd::Engine::"


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


@lru_cache(maxsize=4096)
def describe_stack(stack):
    """(phase, creates optimizer state, site) of one stack; cached, as stacks repeat across events."""
    return phase_of_stack(stack), creates_optimizer_state(stack), site_of_stack(stack)


# the owner of a phase's allocations that outlive the phase
DURABLE_OWNER = {"parameters": "parameters", "backward": "gradients", "optimizer": "optimizer_state",
                 "forward": "activations", "unknown": "unknown"}
