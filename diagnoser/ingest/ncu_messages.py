"""The messages inside an Nsight Compute report: a profile result (one kernel launch: identity,
launch configuration, metric values, guided-analysis rule verdicts, NVTX state) and the session
(device attributes, tool versions). Field numbers are Nsight Compute's (layout in
shared/FORMATS.md); the wire format is decoded by ncu_wire.py, the file framing by ncu_report.py.
"""
from __future__ import annotations

from ..kernel_names import FUNCTION, short_name
from ..ncu.model import MetricValue, NcuLaunch, NcuReport, NcuRule
from .ncu_wire import CorruptReport, as_text, fields, unpack_d, unpack_f, varint

MESSAGE_TYPES = {0: "none", 1: "info", 2: "warning", 3: "error", 4: "optimization"}
SPEEDUP_TYPES = {1: "local", 2: "global"}


def metric_value(b: bytes) -> MetricValue | None:
    """Decode a value message: 1 string, 2 float, 3 double, 4 uint32, 5 uint64 (others: int64-ish)."""
    if not b:
        return None
    key = b[0]
    if key == 0x1D:  # field 2, fixed32 float
        return float(unpack_f(b, 1)[0])
    if key == 0x19:  # field 3, fixed64 double
        return unpack_d(b, 1)[0]
    if key in (0x20, 0x28, 0x30, 0x38):  # uint32 / uint64 / int32 / int64 varints
        v = varint(b, 1)[0]
        if key in (0x30, 0x38) and v >= 1 << 63:
            v -= 1 << 64
        return v
    for f, wt, v in fields(b):
        if f == 1 and wt == 2:
            return v.decode("utf-8", "replace")
        if wt == 0:
            return v
        if wt == 1:
            return unpack_d(v)[0]
        if wt == 5:
            return float(unpack_f(v)[0])
    return None


def _dim3(b: bytes) -> tuple[int, int, int]:
    d = [1, 1, 1]
    for f, wt, v in fields(b):
        if wt == 0 and 1 <= f <= 3:
            d[f - 1] = v
    return d[0], d[1], d[2]


def _metrics(res_fields: list[bytes], strings: list[str]) -> dict[str, MetricValue]:
    """MetricResult {1 NameId, 2 value, 3 repeated instance values (skipped), 4 category}."""
    out: dict[str, MetricValue] = {}
    nstr = len(strings)
    for b in res_fields:
        # fast path: "08 <nameid> 12 <len> <value>" as every writer seen so far lays it out
        if b[0] == 0x08:
            nid, i = varint(b, 1)
            if i < len(b) and b[i] == 0x12:
                ln, i = varint(b, i + 1)
                if nid < nstr:
                    v = metric_value(b[i:i + ln])
                    if v is not None:
                        out[strings[nid]] = v
                continue
        nid, val = None, None
        for f, wt, v in fields(b):
            if f == 1 and wt == 0:
                nid = v
            elif f == 2 and wt == 2:
                val = metric_value(v)
        if nid is not None and nid < nstr and val is not None:
            out[strings[nid]] = val
    return out


def _rule(b: bytes) -> list[NcuRule]:
    """One rule result: its messages (text, type, estimated speedup) as NcuRules."""
    ident, section, items = "", "", []
    for f, wt, v in fields(b):
        if f == 1 and wt == 2:
            ident = as_text(v)
        elif f == 4 and wt == 2:
            section = as_text(v)
        elif f == 3 and wt == 2:
            items.append(v)
    rules = []
    for body in items:
        for f, wt, item in fields(body):
            if f != 1 or wt != 2:
                continue
            text, mtype, sp_type, sp_val = "", 0, None, None
            for g, wt2, v in fields(item):
                if g == 1 and wt2 == 2:
                    for h, wt3, x in fields(v):
                        if h == 1 and wt3 == 2:
                            text = as_text(x)
                        elif h == 2 and wt3 == 0:
                            mtype = x
                elif g == 10 and wt2 == 2:
                    for h, wt3, x in fields(v):
                        if h == 1 and wt3 == 0:
                            sp_type = SPEEDUP_TYPES.get(x)
                        elif h == 2 and wt3 == 1:
                            sp_val = unpack_d(x)[0]
                        elif h == 2 and wt3 == 5:
                            sp_val = float(unpack_f(x)[0])
            if text:
                rules.append(NcuRule(ident, section, MESSAGE_TYPES.get(mtype, "none"), text,
                                     sp_type if sp_val is not None else None, sp_val))
    return rules


def _nvtx_strings(b: bytes, depth: int = 0) -> list[str]:
    """NVTX state has no documented layout here: collect its printable strings in order."""
    out: list[str] = []
    try:
        for f, wt, v in fields(b):
            if wt != 2 or not v:
                continue
            if depth < 6:
                try:
                    inner = _nvtx_strings(v, depth + 1)
                except CorruptReport:
                    inner = None
                if inner:
                    out.extend(inner)
                    continue
            s = v.decode("utf-8", "ignore")
            if s.isprintable() and len(s) == len(v):
                out.append(s)
    except (CorruptReport, IndexError):
        raise CorruptReport("bad nvtx")
    return out


def launch_from_result(idx: int, b: bytes, strings: list[str]) -> NcuLaunch:
    """One profile result (the launch numbered `idx`); metric name ids index the block's `strings`."""
    mangled = func = demangled = renamed = ""
    grid = block = (0, 0, 0)
    context = stream = pid = 0
    metric_fields: list[bytes] = []
    rules: list[NcuRule] = []
    nvtx: list[str] = []
    for f, wt, v in fields(b):
        if f == 13:
            metric_fields.append(v)
        elif f == 17 or f == 15:
            continue  # sections (display layout) and source: not needed
        elif f == 19 and wt == 2:
            rules.extend(_rule(v))
        elif f == 5 and wt == 2:
            mangled = as_text(v)
        elif f == 6 and wt == 2:
            func = as_text(v)
        elif f == 7 and wt == 2:
            demangled = as_text(v)
        elif f == 31 and wt == 2:
            renamed = as_text(v)
        elif f == 10 and wt == 2:
            grid = _dim3(v)
        elif f == 11 and wt == 2:
            block = _dim3(v)
        elif f == 1 and wt == 0:
            pid = v
        elif f == 22 and wt == 0:
            context = v
        elif f == 23 and wt == 0:
            stream = v
        elif f == 21 and wt == 2:
            nvtx = _nvtx_strings(v)
    metrics = _metrics(metric_fields, strings)
    name = renamed or demangled or func or mangled
    dev = metrics.get("launch__device_id", 0)
    return NcuLaunch(
        id=idx, name=name, short_name=func if func and "(" not in func else short_name(name, FUNCTION),
        mangled_name=mangled, grid=grid, block=block,
        device=int(dev) if isinstance(dev, (int, float)) else 0, stream=int(stream),
        context=int(context), process_id=int(pid), nvtx=nvtx, metrics=metrics, rules=rules)


def read_session(b: bytes, report: NcuReport) -> None:
    """A block's session message: device attributes and tool versions, added to `report`."""
    for f, wt, v in fields(b):
        if f == 6 and wt == 2:  # DeviceAttributes {1 ID, 2 Name, 3 repeated {1 Name, 2 value}}
            dev_id, dev_name, attrs = 0, "", {}
            for g, wt2, x in fields(v):
                if g == 1 and wt2 == 0:
                    dev_id = x
                elif g == 2 and wt2 == 2:
                    dev_name = as_text(x)
                elif g == 3 and wt2 == 2:
                    key, val = "", None
                    for h, wt3, y in fields(x):
                        if h == 1 and wt3 == 2:
                            key = as_text(y)
                        elif h == 2 and wt3 == 2:
                            val = metric_value(y)
                    if key and val is not None:
                        attrs[key] = val
            report.devices.setdefault(dev_id, {}).update(attrs)
            if dev_name:
                report.device_names[dev_id] = dev_name
        elif f == 8 and wt == 2:  # VersionInfo {1 Provider, 2 Version}
            prov = ver = ""
            for g, wt2, x in fields(v):
                if g == 1 and wt2 == 2:
                    prov = as_text(x)
                elif g == 2 and wt2 == 2:
                    ver = as_text(x)
            if prov:
                report.versions[prov] = ver
                if "Nsight Compute" in prov and not report.tool_version:
                    report.tool_version = ver
