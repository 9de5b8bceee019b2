"""`diagnose playbook [RULE]`: one rule's remediation section (Markdown, drawn for a terminal on a
TTY), or the whole handbook as one HTML file."""
from __future__ import annotations

import sys

import click

from .output import check_destination, write_output
from .rules import pack_of, unknown_rule


@click.command("playbook", short_help="One rule's remediation playbook, or the whole handbook as HTML.")
@click.argument("rule_id", required=False, metavar="[RULE]")
@click.option("--rules", "user_rules", multiple=True, help="Extra rule file or folder.")
@click.option("-o", "--output", help="Write here (atomically).")
def playbook_cmd(rule_id, user_rules, output):
    """The remediation handbook: one rule's playbook section (`diagnose playbook TRAIN002`, Markdown),
    or, without RULE, every rule's (shipped and custom) as one HTML file."""
    check_destination(output, user_rules)  # a rule file is never written over
    pack = pack_of(user_rules)
    if rule_id:
        from ..report.playbook import rule_playbook_markdown
        rid = rule_id.upper()
        if rid not in pack.rules:
            raise unknown_rule(rule_id, user_rules)
        from ..text_safety import visible_text
        text = visible_text(rule_playbook_markdown(pack, rid))  # a user rule's path and texts are shown, never run
        if not output and sys.stdout.isatty():
            from ..report.terminal import render_markdown_text
            text = render_markdown_text(text)
            write_output(text, output, ansi=True, inputs=user_rules)
            return
        write_output(text, output, inputs=user_rules)
        return
    from ..report.playbook import render_playbook_html
    write_output(render_playbook_html(pack), output, inputs=user_rules)
