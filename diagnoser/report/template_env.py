"""The jinja2 environment every template report uses (Markdown, HTML, the handbook, the compare
page): the template folder, the filters the templates format with, and a bytecode cache."""
from __future__ import annotations

import os

from .._version import __version__
from ..ingest.sniff import display_kind
from ..resources import templates_dir
from ..text_safety import md_code
from .finding_parts import playbook_ref
from .formatting import fmt_value, md_cell, share_pct


def _bytecode_cache():
    """Compiled templates kept beside the rule cache (jinja2 keys them by template source), so a
    report does not lex and compile its templates on every start; None where caching is off."""
    import jinja2

    from ..disk_cache import cache_dir
    directory = cache_dir()
    if directory is None:
        return None

    class QuietCache(jinja2.FileSystemBytecodeCache):
        """A cache that cannot be read or written is skipped, never an error."""

        def load_bytecode(self, bucket):
            try:
                super().load_bytecode(bucket)
            except (OSError, ValueError, EOFError):
                bucket.reset()

        def dump_bytecode(self, bucket):
            try:
                os.makedirs(self.directory, mode=0o700, exist_ok=True)  # private, like __pycache__ of a user install
                super().dump_bytecode(bucket)
            except OSError:
                pass

    return QuietCache(str(directory / f"templates-{__version__}"))


def breakable(text) -> "markupsafe.Markup":
    """HTML: the text escaped, with a line-break opportunity (<wbr>) after each underscore, so a
    metric_name_like_this in a table header wraps at its words, never mid-word."""
    import markupsafe
    return markupsafe.Markup(str(markupsafe.escape(text)).replace("_", "_<wbr>"))


def template_env(autoescape: bool):
    """The jinja2 environment (jinja2 imported here: a JSON report needs no templates)."""
    import jinja2
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())), bytecode_cache=_bytecode_cache(),
        autoescape=autoescape, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["value"] = fmt_value
    env.filters["kind"] = display_kind
    env.filters["pct"] = share_pct
    env.filters["cell"] = md_cell
    env.filters["breakable"] = breakable
    env.filters["code"] = md_code  # a code span any name fits in (text_safety)
    env.globals["playbook_ref"] = playbook_ref
    return env
