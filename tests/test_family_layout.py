"""Where a family lives (docs/architecture.md, pyproject.toml's family contracts): its reader in ingest/
turns a file into the family's model or tables and computes nothing; the model, catalogue and analyses
are the family package's (timeline/, ncu/, memory/), which opens no file; families/NAME.py is the glue.
The import contracts forbid a family package the file-access modules and a reader the analyses' entry
points; this test closes the rest: from a family package a reader imports only the model it fills."""
from __future__ import annotations

import grimp

FAMILY_PACKAGES = {"diagnoser.timeline", "diagnoser.ncu", "diagnoser.memory"}
# what a reader may take from its family's package: the model it fills, and (the Kineto reader) which ops the
# perf model covers, so that it keeps the raw argument columns of those ops only
READERS_MAY_IMPORT = {"diagnoser.timeline.tables", "diagnoser.ncu.model", "diagnoser.memory.model",
                      "diagnoser.timeline.perf_model"}


def _family_imports_of_readers(graph) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for reader in graph.find_descendants("diagnoser.ingest") | {"diagnoser.ingest"}:
        for imported in graph.find_modules_directly_imported_by(reader):
            if ".".join(imported.split(".")[:2]) in FAMILY_PACKAGES:
                out.setdefault(imported, set()).add(reader)
    return out


def test_readers_import_only_the_model_they_fill():
    imports = _family_imports_of_readers(grimp.build_graph("diagnoser"))
    beyond = {module: sorted(readers) for module, readers in imports.items() if module not in READERS_MAY_IMPORT}
    assert not beyond, f"a reader reaches into its family's analyses (move the computation there): {beyond}"
    assert {"diagnoser.timeline.tables", "diagnoser.ncu.model", "diagnoser.memory.model"} <= set(imports)
