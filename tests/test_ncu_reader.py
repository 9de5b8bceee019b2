"""Nsight Compute readers: the binary report matches NVIDIA's own CSV export value for value."""
from __future__ import annotations

import csv
import gzip
import math
import shutil
import struct

import pytest

from diagnoser.errors import InputError
from diagnoser.ingest.ncu_csv import read_ncu_csv, unit_scale
from diagnoser.kernel_names import FUNCTION, short_name
from diagnoser.ingest.ncu_report import read_ncu_report


def _decimals(text: str) -> int:
    s = text.replace(",", "")
    return len(s.split(".", 1)[1]) if "." in s else 0


def _mismatches(report, raw_csv_path) -> tuple[int, list[str]]:
    """Compare every (launch, metric) cell of NVIDIA's raw CSV with the binary-read value.

    A cell matches when the binary value, rounded the way the CSV displays it (its decimals, in its
    scaled unit), equals the CSV text. NVIDIA shows negative counter artefacts as 0.
    """
    with open(raw_csv_path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    header, units = rows[0], rows[1]
    launches = {launch.id: launch for launch in report.launches}
    compared, bad = 0, []
    for row in rows[2:]:
        launch = launches[int(row[0])]
        assert launch.stream == int(row[header.index("Stream")])
        assert launch.device == int(row[header.index("Device")])
        grid = tuple(int(x) for x in row[header.index("Grid Size")].strip("()").split(","))
        assert launch.grid == grid
        for i in range(11, len(header)):
            name, text, unit = header[i], row[i], units[i]
            got = launch.metrics.get(name)
            if text.strip() in ("", "n/a", "no data"):
                if got not in (None, ""):
                    bad.append(f"{launch.id} {name}: CSV empty, binary {got!r}")
                continue
            compared += 1
            try:
                want = float(text.replace(",", ""))
            except ValueError:
                if str(got) != text:
                    bad.append(f"{launch.id} {name}: {text!r} != {got!r}")
                continue
            if not isinstance(got, (int, float)):
                bad.append(f"{launch.id} {name}: CSV {text!r}, binary {got!r}")
                continue
            factor, _ = unit_scale(unit)
            shown = got / factor
            if math.isnan(want) and math.isnan(shown):
                continue
            tol = 0.5 * 10 ** -_decimals(text) * (1 + 1e-9) + abs(want) * 1e-9
            if abs(shown - want) <= tol or (want == 0 and shown < 0):
                continue
            bad.append(f"{launch.id} {name}: CSV {text} {unit}, binary {got!r}")
    return compared, bad


def test_small_kernels_binary_matches_nvidia_raw_csv_for_every_metric(fixtures_dir):
    report = read_ncu_report(fixtures_dir / "ncu" / "small_kernels.ncu-rep.gz")
    assert [launch.id for launch in report.launches] == list(range(6))
    compared, bad = _mismatches(report, fixtures_dir / "ncu" / "small_kernels.raw.csv")
    assert compared > 6 * 1500
    assert bad == []


def test_corpus_kernels_binary_matches_nvidia_raw_csv_for_every_metric(corpus_dir):
    report = read_ncu_report(corpus_dir / "ncu" / "kernels.ncu-rep.gz")
    assert len(report.launches) == 18
    compared, bad = _mismatches(report, corpus_dir / "ncu" / "kernels.raw.csv")
    assert compared > 18 * 1500
    assert bad == []


def test_corpus_train_step_basic_set_matches_raw_csv(corpus_dir):
    report = read_ncu_report(corpus_dir / "ncu" / "train_step.ncu-rep.gz")
    assert len(report.launches) == 400
    compared, bad = _mismatches(report, corpus_dir / "ncu" / "train_step.raw.csv")
    assert compared > 400 * 300
    assert bad == []


def test_binary_report_carries_identity_device_version_and_ncu_rules(fixtures_dir):
    report = read_ncu_report(fixtures_dir / "ncu" / "small_kernels.ncu-rep.gz")
    assert report.tool_version.startswith("2025.3.1")
    assert report.device_names[0] == "NVIDIA H200"
    assert report.devices[0]["device__attribute_multiprocessor_count"] == 132
    gemm = report.launches[0]
    assert gemm.short_name.startswith("nvjet_sm90")
    assert gemm.grid == (2, 66, 1) and gemm.block == (384, 1, 1) and gemm.stream == 7
    assert gemm.metrics["gpu__time_duration.sum"] > 1e6  # ns
    rule_ids = {r.identifier for r in gemm.rules}
    assert "SOLBottleneck" in rule_ids
    assert any(r.speedup_type == "global" and r.speedup_pct for r in gemm.rules)


def test_raw_csv_reads_into_same_values_as_binary(fixtures_dir):
    binary = read_ncu_report(fixtures_dir / "ncu" / "small_kernels.ncu-rep.gz")
    raw = read_ncu_csv(fixtures_dir / "ncu" / "small_kernels.raw.csv")
    assert raw.kind == "ncu-csv-raw"
    assert [x.id for x in raw.launches] == [x.id for x in binary.launches]
    for a, b in zip(binary.launches, raw.launches):
        assert a.short_name == b.short_name
        assert a.grid == b.grid and a.block == b.block
        for name in ("gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
                     "launch__registers_per_thread", "dram__bytes.sum.peak_sustained"):
            assert b.metrics[name] == pytest.approx(a.metrics[name], rel=1e-5, abs=1e-6), name


def test_details_csv_reads_section_metrics_and_rule_verdicts(fixtures_dir):
    details = read_ncu_csv(fixtures_dir / "ncu" / "small_kernels.details.csv")
    binary = read_ncu_report(fixtures_dir / "ncu" / "small_kernels.ncu-rep.gz")
    assert details.kind == "ncu-csv-details" and len(details.launches) == 6
    for a, b in zip(binary.launches, details.launches):
        assert b.metrics["sm__throughput.avg.pct_of_peak_sustained_elapsed"] == pytest.approx(
            a.metrics["sm__throughput.avg.pct_of_peak_sustained_elapsed"], abs=0.006)
        assert b.metrics["gpu__time_duration.sum"] == pytest.approx(
            a.metrics["gpu__time_duration.sum"], rel=0.01)
        key = lambda r: (r.identifier, r.type, r.speedup_type)  # noqa: E731
        assert sorted(map(key, b.rules)) == sorted(map(key, a.rules))
        got = sorted((r.identifier, r.speedup_pct or 0) for r in b.rules)
        want = sorted((r.identifier, r.speedup_pct or 0) for r in a.rules)
        assert [g[1] for g in got] == pytest.approx([w[1] for w in want], abs=0.06)


def test_function_name_strips_namespaces_templates_and_parameters():
    assert short_name("void at::<unnamed>::cunn_SoftMaxForwardReg<float, float, at::<unnamed>::E, "
                      "long, 8>(T3 *, const T1 *, long)", FUNCTION) == "cunn_SoftMaxForwardReg"
    assert short_name("nvjet_sm90_tst_320x128", FUNCTION) == "nvjet_sm90_tst_320x128"
    assert short_name("void f<(bool)0>(int)", FUNCTION) == "f"


def test_unit_scale_undoes_nvidia_display_scaling():
    assert unit_scale("ms") == (1e6, "ns")
    assert unit_scale("Gbyte/s") == (1e9, "byte/s")
    assert unit_scale("sector/ns") == (1e9, "sector/s")
    assert unit_scale("Ghz") == (1e9, "hz")
    assert unit_scale("%") == (1.0, "%")


# ------------------------------------------------------------------ bad input -> InputError

@pytest.fixture
def plain_small_report(fixtures_dir, tmp_path):
    out = tmp_path / "small.ncu-rep"
    with gzip.open(fixtures_dir / "ncu" / "small_kernels.ncu-rep.gz") as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


@pytest.mark.parametrize("keep", [3, 6, 20, 5000, 30_000, 2_000_000, 12_000_000])
def test_truncated_report_is_an_input_error(plain_small_report, tmp_path, keep):
    data = plain_small_report.read_bytes()
    cut = tmp_path / "cut.ncu-rep"
    cut.write_bytes(data[:keep])
    with pytest.raises(InputError) as e:
        read_ncu_report(cut)
    assert "\n" not in str(e.value)


def test_truncated_gzip_report_is_an_input_error(fixtures_dir, tmp_path):
    data = (fixtures_dir / "ncu" / "small_kernels.ncu-rep.gz").read_bytes()
    cut = tmp_path / "cut.ncu-rep.gz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError):
        read_ncu_report(cut)


def test_garbage_and_corrupt_reports_are_input_errors(plain_small_report, tmp_path):
    garbage = tmp_path / "garbage.ncu-rep"
    garbage.write_bytes(b"this is not a report at all" * 100)
    with pytest.raises(InputError, match="NVR"):
        read_ncu_report(garbage)
    data = bytearray(plain_small_report.read_bytes())
    bad_len = tmp_path / "badlen.ncu-rep"  # first block header claims 2 GB
    hdr_len = struct.unpack("<I", data[4:8])[0]
    pos = 8 + hdr_len
    data[pos:pos + 4] = struct.pack("<I", 0x7FFFFFF0)
    bad_len.write_bytes(bytes(data))
    with pytest.raises(InputError):
        read_ncu_report(bad_len)
    noise = bytearray(plain_small_report.read_bytes())
    for i in range(64, len(noise), 997):  # flip bytes everywhere: must fail cleanly or parse
        noise[i] ^= 0xFF
    flipped = tmp_path / "flipped.ncu-rep"
    flipped.write_bytes(bytes(noise))
    try:
        read_ncu_report(flipped)
    except InputError:
        pass


def test_truncated_and_foreign_csv_are_input_errors(fixtures_dir, tmp_path):
    text = (fixtures_dir / "ncu" / "small_kernels.raw.csv").read_text()
    cut = tmp_path / "cut.raw.csv"
    cut.write_text(text[: len(text) * 9 // 10])
    with pytest.raises(InputError, match="columns"):
        read_ncu_csv(cut)
    foreign = tmp_path / "other.csv"
    foreign.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(InputError):
        read_ncu_csv(foreign)
