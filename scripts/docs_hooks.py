"""MkDocs hooks (mkdocs.yml ``hooks:``): the docstrings' reST spellings read as prose.

The code's docstrings cross-reference with Sphinx roles (``:class:`Flow```) and introduce
examples with ``::``; mkdocstrings renders them as Markdown, where both would show
literally. Here a role becomes its code span (``~`` keeps the last dotted part), and a
paragraph's closing ``::`` one colon.
"""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(r":(?:class|func|meth|data|attr|mod|exc|obj):<code>(~?)([^<]*)</code>")
LITERAL = re.compile(r"::</p>")


def _code(match: re.Match[str]) -> str:
    name = match.group(2).rsplit(".", 1)[-1] if match.group(1) else match.group(2)
    return f"<code>{name}</code>"


def on_page_content(html: str, **_: Any) -> str:
    return LITERAL.sub(":</p>", ROLE.sub(_code, html))
