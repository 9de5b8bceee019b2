"""The one dependency pyproject.toml cannot name: durable-rules 2.0.28 from the copy vendored in
vendor/ (patched to build on Python 3.13; vendor/README.md). A PEP 508 reference must be an absolute
URL, so it is made here, from where this clone lies; the other dependencies are listed beside it.

Also the one extension: `_diagnoser_native` (native/): the PyTorch trace reader's batch scanner, the step replay's
hot loop.
It is optional: where it cannot be built (no C compiler) the install goes on and the reader decodes every
batch with msgspec (the same tables, slower). A top-level module, so a clone's tests find it beside the clone's
own `diagnoser` package."""
import re
from pathlib import Path

from setuptools import Extension, setup

HERE = Path(__file__).resolve().parent
DURABLE_RULES_VERSION = "2.0.28"  # the pin: the vendored copy must be exactly this release
VENDORED = HERE / "vendor" / f"durable_rules-{DURABLE_RULES_VERSION}"


def vendored_durable_rules() -> str:
    found = re.search(r"version\s*=\s*'([^']+)'", (VENDORED / "setup.py").read_text())
    if not found or found.group(1) != DURABLE_RULES_VERSION:
        raise SystemExit(f"{VENDORED}: expected durable-rules {DURABLE_RULES_VERSION}, found "
                         f"{found.group(1) if found else 'no version'}")
    return f"durable-rules @ {VENDORED.as_uri()}"


DEPENDENCIES = [
    "pyyaml>=6",        # rule files
    "pandas>=2.0",      # timeline tables
    "click>=8.1",       # the command line
    "jinja2>=3.1",      # report templates
    "jsonschema>=4.18", # rule-file validation with line-precise advice
    "msgspec>=0.18",    # fast typed JSON decoding of multi-GB PyTorch traces
    "rich>=13",         # the report drawn for a terminal
    # gzip undone 2.4x as fast as zlib (ISA-L; a 126 MB trace's 94 -> 39 ms); on the platforms its wheels cover,
    # elsewhere the reader inflates with zlib (the same bytes)
    'isal>=1.6; platform_machine == "x86_64" or platform_machine == "AMD64" or platform_machine == "aarch64" '
    'or platform_machine == "arm64"',
]

NATIVE = Extension("_diagnoser_native", sources=["native/module.c", "native/kineto_scan.c", "native/replay_periods.c", "native/sorted_search.c"], depends=["native/native.h"],
                   optional=True,
                   extra_compile_args=["-O3"])

setup(install_requires=[vendored_durable_rules(), *DEPENDENCIES], ext_modules=[NATIVE])
