"""`diagnose facts FILE...`: the measured facts, one block per input or run; `--catalogue`: every fact
the readers can produce, and the analysis settings."""
from __future__ import annotations

import json

import click

from ..errors import DiagnoserError
from ..text_safety import json_text, visible_line


@click.command("facts", short_help="The measured facts of FILE(s), or the facts and settings catalogue.")
@click.argument("files", nargs=-1, metavar="FILE...")
@click.option("--catalogue", "show_catalogue", is_flag=True,
              help="List every fact the readers can produce, and the analysis settings.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def facts_cmd(files, show_catalogue, fmt):
    """Print the facts measured from FILE(s), one block per input (or per run of several ranks), or the
    facts catalogue and the analysis settings (`--set NAME=VALUE`)."""
    if show_catalogue:
        from ..catalogue import catalogue
        from ..catalogue import all_settings
        specs = list(catalogue().values())
        known = list(all_settings().values())
        if fmt == "json":
            click.echo(json.dumps({"facts": [s.to_json() for s in specs],
                                   "settings": [s.to_json() for s in known]}, indent=2))
            return
        for s in specs:
            click.echo(f"{s.name:<40} {s.type:<7} {s.unit:<8} {s.subject:<7} {s.meaning}")
        click.echo("\nAnalysis settings (override with --set NAME=VALUE, or `settings:` in a rule pack):")
        for s in known:
            click.echo(f"{s.name:<40} {s.default!s:<10} {s.unit:<6} {s.meaning}")
        return
    if not files:
        raise DiagnoserError("give FILE(s), or --catalogue")
    from ..ingest.sniff import display_kind
    from ..pipeline import fact_blocks
    blocks = fact_blocks(files)
    if fmt == "json":
        out = {"inputs": [i for inputs, _ in blocks for i in inputs], "facts": [
            {"name": f.name, "value": f.value, "unit": f.unit, "source": f.source,
             "subject": f.subject.to_json() if f.subject else None,
             "inputs": [i["path"] for i in inputs]} for inputs, facts in blocks for f in facts]}
        click.echo(json_text(json.dumps(out, indent=2, ensure_ascii=False)))
        return
    for n, (inputs, facts) in enumerate(blocks):
        kinds = sorted({display_kind(i["kind"]) for i in inputs})
        what = f"{len(inputs)} ranks, " if len(inputs) > 1 else ""
        click.echo(("\n" if n else "") + f"== {', '.join(visible_line(i['path']) for i in inputs)} ({what}{', '.join(kinds)}): "
                   f"{len(facts)} facts")
        for f in facts:
            subj = f"{f.subject.kind} {f.subject.id}" if f.subject else "run"
            click.echo(visible_line(f"{subj:<14} {f.name:<40} {f.value!s:<22} {f.unit}"))
