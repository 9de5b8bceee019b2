"""The kernel family (package diagnoser.ncu): Nsight Compute reports (.ncu-rep, or the raw / details
CSV export), read in the calling process, one input per group; per-launch Speed-of-Light facts
(diagnoser.ncu.analysis)."""
from __future__ import annotations

from ..input_family import Family, Reader, RunRole
from ..ncu.catalogue import CATALOGUE
from . import reading


def _ncu_report(path, progress: bool = False):
    from ..ingest.ncu_report import read_ncu_report
    return read_ncu_report(path, progress=progress)


def _ncu_csv(path, progress: bool = False):
    from ..ingest.ncu_csv import read_ncu_csv
    return read_ncu_csv(path, progress=progress)


READERS = (Reader("ncu-rep", _ncu_report), Reader("ncu-csv-raw", _ncu_csv), Reader("ncu-csv-details", _ncu_csv))
_BY_KIND = {r.kind: r for r in READERS}


def measure(source: str, local: str, kind: str, progress: bool = False):
    """The report's launches (ncu.model.NcuReport): its summary is what the reader returns."""
    return reading.read_with(_BY_KIND[kind], local, progress)


def analyse(reports: list):
    from ..ncu.analysis import kernel_analysis
    return kernel_analysis(reports)


def settings() -> tuple:
    from ..ncu import analysis, units
    return analysis, units


FAMILY = Family("kernel", READERS, measure, analyse, tuple(CATALOGUE), settings, RunRole.KERNEL_PROFILE)
