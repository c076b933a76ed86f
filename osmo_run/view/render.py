"""The templates: one Jinja2 environment for the server's pages and the export.

Autoescaping is on for every template, and nothing passed to a template from a run is
marked safe, so a message holding ``<script>`` renders as those characters. Undefined
names are errors (a template mistake fails its test instead of rendering blank).
"""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from osmo_run.view.charts import fmt_number, fmt_seconds
from osmo_run.view.index import PHASES, STATUSES
from osmo_run.view.pages import row_link
from osmo_run.view.query import PER_PAGE
from osmo_run.view.transcript import pretty_json, transcript


@cache
def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("osmo_run.view", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals.update(
        fmt_number=fmt_number,
        fmt_seconds=fmt_seconds,
        pretty_json=pretty_json,
        transcript=transcript,
        row_link=row_link,
        statuses=STATUSES,
        phases=PHASES,
        per_page_choices=PER_PAGE,
    )
    return env


_SURROGATE = re.compile("[\ud800-\udfff]")
"""A lone surrogate: JSON data can hold one (a ``\\ud83d`` escape), UTF-8 cannot."""


def render(template: str, **context: Any) -> str:
    """``template`` rendered with ``context``; a lone surrogate from a run's data is shown
    as its escape (``\\ud83d``), so the page can be sent as UTF-8."""
    page = environment().get_template(template).render(**context)
    return _SURROGATE.sub(lambda m: ascii(m.group())[1:-1], page)


def static_text(name: str) -> str:
    """A file of ``osmo_run/view/static`` (the export inlines the stylesheet and script)."""
    return files("osmo_run.view").joinpath("static", name).read_text(encoding="utf-8")
