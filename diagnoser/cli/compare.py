"""`diagnose compare BEFORE... --to AFTER...`: the command; the comparison itself is diagnoser/comparison/."""
from __future__ import annotations

import sys

import click

from ..errors import DiagnoserError
from ..text_safety import visible_line
from .output import output_format, write_output

FORMATS = ("md", "json", "html", "terminal")
EXIT_GATE = 3


class CompareCommand(click.Command):
    """`--to A B` gives AFTER both files (the usage reads BEFORE... --to AFTER...): every bare word after
    --to, up to the end, is an input of AFTER; only the values of the other options are not."""

    def parse_args(self, ctx, args):
        valued = {o for p in self.params if isinstance(p, click.Option) and not p.is_flag for o in p.opts}
        out, after, value_next = [], False, False
        for a in args:
            if value_next:
                out.append(a)
                value_next = False
            elif a == "--to":
                after, value_next = True, True
                out.append(a)
            elif a.startswith("-") and a != "-":
                out.append(a)
                value_next = a in valued  # `--format md`; `--format=md` carries its value
            elif after:
                out += ["--to", a]
            else:
                out.append(a)
        return super().parse_args(ctx, out)


@click.command("compare", cls=CompareCommand,
               short_help="Compare two runs: each finding fixed or not, headline changes, CI gate.")
@click.argument("before", nargs=-1, required=True, metavar="BEFORE...")
@click.option("--to", "after", multiple=True, required=True, metavar="AFTER",
              help="The inputs of the AFTER run: every file after --to (or --to before each), several files or ranks like BEFORE.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), help="Report format (default: from the -o extension; `terminal` on a terminal, else `md`).")
@click.option("-o", "--output", metavar="FILE", help="Write the comparison to FILE (atomically; `-` is stdout).")
@click.option("--rules", "user_rules", multiple=True, metavar="PATH", help="Extra rule file or folder (repeatable).")
@click.option("--param", "params", multiple=True, metavar="RULE.NAME=V", help="Override a rule threshold (both runs).")
@click.option("--set", "set_items", multiple=True, metavar="NAME=V", help="Override an analysis setting (both runs).")
@click.option("--kernels", "kernels", metavar="IDS", help="Compare only these kernel launches of BEFORE (Nsight Compute ids, "
              "comma-separated); with --to-kernels they are paired in order (twins with different names).")
@click.option("--to-kernels", "to_kernels", metavar="IDS", help="Compare only these kernel launches of AFTER.")
@click.option("--force", is_flag=True, help="Compare even inputs that are not two runs of one program (another kind "
              "of input, another program, no kernel in common); refused otherwise.")
@click.option("--fail-on-regression", "fail_pct", type=click.FloatRange(min=0), metavar="PCT",
              help="Exit 3 when step time or a headline number got worse by more than max(PCT, step noise), "
                   "or a finding is new or regressed at warning or above (step numbers count only when both sides' "
                   "steps measure the same thing).")
def compare_cmd(before, after, fmt, output, user_rules, params, set_items, kernels, to_kernels, force, fail_pct):
    """Diagnose BEFORE and AFTER with the same rules and compare them: headline numbers before -> after
    with the speed-up, each finding of BEFORE fixed (no longer fires and its Verify check holds),
    improved, unchanged or regressed, findings new in AFTER, every fact both runs measured, kernels
    matched by name and launch configuration, steps by phase. Inputs that are not two runs of one program
    are refused (--force); step numbers are compared only when both sides' steps measure the same thing.

    \b
    diagnose compare before.pt.trace.json.gz --to after.pt.trace.json.gz
    diagnose compare base.ncu-rep --to fixed.ncu-rep -o compare.html
    diagnose compare r0.json.gz r1.json.gz --to n0.json.gz --to n1.json.gz --fail-on-regression 5
    diagnose compare k.ncu-rep --kernels 0,7 --to k.ncu-rep --to-kernels 1,8   # twins in one report
    """
    from .. import settings
    from ..catalogue import all_settings
    from ..pipeline import load_pack
    from ..comparison.core import compare_runs
    from ..comparison.gate import gate
    from ..comparison.render import render_json, render_markdown

    inputs = before + after + user_rules  # what -o may never name
    fmt = output_format(fmt, output, sys.stdout.isatty(), FORMATS, inputs)  # an unknown -o extension or a missing folder: an error
    set_values = settings.parse_assignments(set_items, all_settings()) if set_items else {}
    pack = load_pack(user_rules, params)
    ids = [lambda v: [x.strip() for x in v.split(",") if x.strip()] if v else None][0]
    c = compare_runs(list(before), list(after), pack, set_values=set_values, kernels=ids(kernels), to_kernels=ids(to_kernels), force=force)
    if not c["before"]["inputs"] or not c["after"]["inputs"]:
        raise DiagnoserError("compare: a side has no readable input")
    reasons = gate(c, fail_pct) if fail_pct is not None else None
    if fmt == "json":
        text = render_json(c, fail_pct, reasons)
    elif fmt == "html":
        from ..comparison.html import render_html
        text = render_html(c, fail_pct, reasons)
    elif fmt == "terminal":
        from ..comparison.terminal import render_terminal
        text = render_terminal(c, fail_pct, reasons)
    else:
        text = render_markdown(c, fail_pct, reasons)
    write_output(text, output, ansi=fmt == "terminal", inputs=inputs)
    if reasons:
        for r in reasons:
            click.echo(f"diagnose compare: regression: {visible_line(r)}", err=True)
        sys.exit(EXIT_GATE)
