"""Nsight Compute CSV exports (`ncu --import R --csv --page raw|details`) into the same `NcuReport`.

`--page raw`: identity columns, one column per metric, row 2 holds units, one row per launch. NVIDIA
scales values for display (`1.38 ms`, `3.20 Ghz`, `992.55 Gbyte/s`); we undo that scaling so every
value is in the base unit the binary report stores (ns, bytes, Hz, per second), and the analysis
sees the same numbers whichever form the user has.
`--page details`: one row per displayed metric (by label, not metric name) plus rule rows; labels of
the metrics the kernel analysis needs are mapped back to metric names, the rest are kept by label.
"""
from __future__ import annotations

import csv
import functools
import io
import os
import re
import zlib

from ..errors import InputError
from .input_files import open_input
from ..ncu.model import NcuLaunch, NcuReport, NcuRule
from ..kernel_names import FUNCTION, short_name

IDENTITY = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
            "Block Size", "Grid Size", "Device", "CC")
RULE_TYPES = {"INF": "info", "OPT": "optimization", "WRN": "warning", "ERR": "error", "OK": "info"}
MISSING = {"", "n/a", "no data", "N/A"}

_PREFIX = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_TIME_NUM = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6,
             "s": 1e9, "second": 1e9}  # numerator time: base unit ns
_TIME_DEN = {"ns": 1e9, "nsecond": 1e9, "us": 1e6, "usecond": 1e6, "ms": 1e3, "msecond": 1e3,
             "s": 1.0, "second": 1.0}  # "per time": base unit per second
_SCALED = re.compile(r"^([KMGTP])(byte|hz|Hz)$")

# details page: (section, label) -> metric name, for the metrics the kernel analysis reads
DETAILS_METRICS = {
    ("GPU Speed Of Light Throughput", "Duration"): "gpu__time_duration.sum",
    ("GPU Speed Of Light Throughput", "Compute (SM) Throughput"): "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    ("GPU Speed Of Light Throughput", "Memory Throughput"): "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    ("GPU Speed Of Light Throughput", "DRAM Throughput"): "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    ("GPU Speed Of Light Throughput", "L1/TEX Cache Throughput"): "l1tex__throughput.avg.pct_of_peak_sustained_active",
    ("GPU Speed Of Light Throughput", "L2 Cache Throughput"): "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    ("Launch Statistics", "Block Size"): "launch__block_size",
    ("Launch Statistics", "Grid Size"): "launch__grid_size",
    ("Launch Statistics", "Registers Per Thread"): "launch__registers_per_thread",
    ("Launch Statistics", "# SMs"): "launch__sm_count",
    ("Launch Statistics", "Waves Per SM"): "launch__waves_per_multiprocessor",
    ("Launch Statistics", "Threads"): "launch__thread_count",
    ("Occupancy", "Theoretical Occupancy"): "sm__maximum_warps_per_active_cycle_pct",
    ("Occupancy", "Achieved Occupancy"): "sm__warps_active.avg.pct_of_peak_sustained_active",
    ("Occupancy", "Block Limit Registers"): "launch__occupancy_limit_registers",
    ("Occupancy", "Block Limit Shared Mem"): "launch__occupancy_limit_shared_mem",
    ("Occupancy", "Block Limit Warps"): "launch__occupancy_limit_warps",
    ("Occupancy", "Block Limit SM"): "launch__occupancy_limit_blocks",
    ("Warp State Statistics", "Avg. Active Threads Per Warp"): "smsp__thread_inst_executed_per_inst_executed.ratio",
    ("Memory Workload Analysis", "Local Memory Spilling Requests"): "derived__local_spilling_requests",
    ("Instruction Statistics", "Executed Instructions"): "smsp__inst_executed.sum",
}


@functools.lru_cache(maxsize=1024)
def unit_scale(unit: str) -> tuple[float, str]:
    """Factor that turns a displayed CSV value back into the stored base unit, and that unit.

    `ms` -> (1e6, "ns"); `Gbyte/s` -> (1e9, "byte/s"); `sector/ns` -> (1e9, "sector/s");
    `%/Kbyte` -> (1e3, "%/byte") (NVIDIA scales the prefix wherever it sits).
    """
    if not unit:
        return 1.0, ""
    factor, parts = 1.0, []
    for i, part in enumerate(unit.split("/")):
        m = _SCALED.match(part)
        if m:
            factor *= _PREFIX[m.group(1)]
            parts.append(m.group(2).lower())
        elif i == 0 and part in _TIME_NUM:
            factor *= _TIME_NUM[part]
            parts.append("ns")
        elif i > 0 and part in _TIME_DEN:
            factor *= _TIME_DEN[part]
            parts.append("s")
        else:
            parts.append(part)
    return factor, "/".join(parts)


_NUMBER_START = frozenset("+-.0123456789nNiI")  # digits, signs, and float()'s nan / inf


def parse_number(text: str) -> float | int | None:
    """`2,247,175` -> 2247175; `0.16` -> 0.16; anything else -> None."""
    s = text.replace(",", "").strip()
    if not s:
        return None
    if s.isascii() and s.isdigit() and len(s) < 4000:  # the common case, without raising (int() caps digits at 4300)
        return int(s)
    if s[0] not in _NUMBER_START:  # names, units, "n/a": no exception raised twice per cell
        return None
    try:
        return int(s)
    except ValueError:
        pass
    try:
        return float(s)
    except ValueError:
        return None


def _scaled_value(text: str, unit: str):
    if text.strip() in MISSING:
        return None, unit
    num = parse_number(text)
    if num is None:
        return text, unit
    factor, base = unit_scale(unit)
    if factor != 1.0:
        num = num * factor
        if isinstance(num, float) and num.is_integer() and abs(num) < 1 << 53 and "." not in text:
            num = int(num)
    return num, base


def _dim3(text: str) -> tuple[int, int, int]:
    nums = [int(x) for x in re.findall(r"\d+", text)]
    return tuple((nums + [1, 1, 1])[:3]) if nums else (0, 0, 0)  # type: ignore[return-value]


def _launch_from_identity(row: dict) -> NcuLaunch:
    name = row.get("Kernel Name", "")
    num = lambda k: int(parse_number(row.get(k, "")) or 0)  # noqa: E731
    return NcuLaunch(id=num("ID"), name=name, short_name=short_name(name, FUNCTION),
                     grid=_dim3(row.get("Grid Size", "")), block=_dim3(row.get("Block Size", "")),
                     device=num("Device"), stream=num("Stream"), context=num("Context"),
                     process_id=num("Process ID"))


MAX_LINE_CHARS = 16 << 20  # a raw-page row of ~1,700 metrics is ~50 KB


def _lines(path, text: io.TextIOBase):
    """The file's lines, refusing one longer than MAX_LINE_CHARS before it is read whole."""
    lineno = 0
    while True:
        line = text.readline(MAX_LINE_CHARS)
        if not line:
            return
        lineno += 1
        if len(line) >= MAX_LINE_CHARS and not line.endswith(("\n", "\r")):
            raise InputError(path, f"line {lineno} is longer than {MAX_LINE_CHARS >> 20} MiB: "
                                   "not an Nsight Compute CSV export")
        yield line


def _rows(path, text: io.TextIOBase):
    """The CSV's rows from its header ("ID" first) on, one at a time (blank lines left out): the header
    and units rows are checked before the rest is read, so a bad file costs one row, not the file."""
    try:
        rows = (row for row in csv.reader(_lines(path, text)) if row)
        for row in rows:  # ncu prints "==PROF==" lines and blank lines before the table in some versions
            if row[0] == "ID":
                yield row
                break
        else:
            raise InputError(path, "no Nsight Compute CSV header (expected a first column \"ID\")")
        yield from rows
    except (EOFError, zlib.error) as e:
        raise InputError(path, f"corrupt or truncated gzip data ({e.__class__.__name__})") from None
    except csv.Error as e:
        raise InputError(path, f"malformed CSV: {e}") from None


def read_ncu_csv(path: str | os.PathLike, progress: bool = False) -> NcuReport:
    """Read either CSV page, deciding by its header (details pages have a "Metric Name" column).

    CSV exports are small (kilobytes per launch); `progress` is accepted for a uniform reader API.
    Rows are read one at a time, never the whole file as lists of cells.
    """
    with open_input(path) as raw, io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="") as text:
        rows = _rows(path, text)
        header = next(rows)
        if "Metric Name" in header:
            return _read_details(path, header, rows)
        return _read_raw(path, header, rows)


def _read_raw(path, header: list[str], rows) -> NcuReport:
    missing = [c for c in ("ID", "Kernel Name") if c not in header]
    if missing:
        raise InputError(path, f"not an Nsight Compute raw CSV: missing column(s) {', '.join(missing)}")
    units = next(rows, None)
    if units is None:
        raise InputError(path, "Nsight Compute raw CSV without its units row")
    if units and units[0].strip() not in ("",):
        raise InputError(path, "second row should hold units (export with `ncu --import R --csv --page raw`)")
    report = NcuReport(path=str(path), kind="ncu-csv-raw")
    metric_cols = [(i, h) for i, h in enumerate(header) if h not in IDENTITY]
    for lineno, row in enumerate(rows, start=3):
        if not row or all(not c for c in row):
            continue
        if len(row) != len(header):
            raise InputError(path, f"line {lineno}: {len(row)} columns, header has {len(header)} "
                                   "(truncated file?)")
        ident = dict(zip(header, row))
        launch = _launch_from_identity(ident)
        for i, name in metric_cols:
            value, unit = _scaled_value(row[i], units[i] if i < len(units) else "")
            if value is None:
                continue
            launch.metrics[name] = value
            if unit:
                launch.units[name] = unit
        report.launches.append(launch)
        _device_from(report, launch)
    if not report.launches:
        report.notes.append("the CSV holds no kernel launches")
    return report


def _read_details(path, header: list[str], rows) -> NcuReport:
    need = ("ID", "Kernel Name", "Section Name", "Metric Name", "Metric Unit", "Metric Value")
    missing = [c for c in need if c not in header]
    if missing:
        raise InputError(path, f"not an Nsight Compute details CSV: missing column(s) {', '.join(missing)}")
    report = NcuReport(path=str(path), kind="ncu-csv-details")
    min_cols = header.index("Metric Value") + 1
    by_id: dict[int, NcuLaunch] = {}
    for lineno, row in enumerate(rows, start=2):
        if not row or all(not c for c in row):
            continue
        if len(row) < min_cols or len(row) > len(header):  # metric rows omit empty rule columns
            raise InputError(path, f"line {lineno}: {len(row)} columns, header has {len(header)} "
                                   "(truncated file?)")
        r = dict(zip(header, row + [""] * (len(header) - len(row))))
        lid = int(parse_number(r["ID"]) or 0)
        launch = by_id.get(lid)
        if launch is None:
            launch = by_id[lid] = _launch_from_identity(r)
        section, label = r["Section Name"], r["Metric Name"]
        if label:
            value, unit = _scaled_value(r["Metric Value"], r["Metric Unit"])
            if value is None:
                continue
            name = DETAILS_METRICS.get((section, label), f"{section}: {label}")
            launch.metrics[name] = value
            if unit:
                launch.units[name] = unit
        elif r.get("Rule Name"):
            sp = parse_number(r.get("Estimated Speedup", "") or "")
            sp_type = (r.get("Estimated Speedup Type") or "").strip() or None
            launch.rules.append(NcuRule(
                identifier=r["Rule Name"], section=section,
                type=RULE_TYPES.get((r.get("Rule Type") or "").strip(), "none"),
                text=r.get("Rule Description", ""),
                speedup_type=sp_type if sp is not None else None,
                speedup_pct=float(sp) if sp is not None else None))
    report.launches = [by_id[k] for k in sorted(by_id)]
    for launch in report.launches:
        _device_from(report, launch)
    report.notes.append("details CSV carries only the metrics shown in report sections; "
                        "export `--page raw` (or use the .ncu-rep) for the full set")
    return report


def _device_from(report: NcuReport, launch: NcuLaunch) -> None:
    """Device attributes repeated on every raw row (device__attribute_*): keep them once."""
    if launch.device in report.devices:
        return
    attrs = {k: v for k, v in launch.metrics.items() if k.startswith("device__attribute_")}
    if attrs:
        report.devices[launch.device] = attrs
        name = attrs.get("device__attribute_display_name")
        if isinstance(name, str):
            report.device_names[launch.device] = name
