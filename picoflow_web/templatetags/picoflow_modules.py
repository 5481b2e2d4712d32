"""``{% module_preloads "picoflow_web/js/run_ui.js" %}``: a page's ES module graph, preloaded.

A page's entry module imports its modules, which import theirs: without a hint the browser
finds the graph one level per round trip (six levels on the run page). A
``<link rel="modulepreload">`` for every module the entry reaches, read from the static
files' own ``import`` lines, lets it fetch them all at once. The links name the modules as
the imports resolve them (``./fold.js`` next to the importer, unhashed): a preload of any
other URL would be a second copy of the module, not a hint.
"""

from __future__ import annotations

import posixpath
import re
from functools import lru_cache

from django import template
from django.conf import settings
from django.contrib.staticfiles import finders
from django.utils.html import format_html_join
from django.utils.safestring import SafeString

register = template.Library()

# Static imports and re-exports of relative modules: `import ... from "./x.js"`,
# `export { a } from "./x.js"`, `import "./x.js"`. Dynamic import() is not preloaded.
_IMPORT = re.compile(
    r"""^\s*(?:import|export)\b[^"';]*?(?:\bfrom\s*)?["'](\.{1,2}/[^"']+\.js)["']""",
    re.MULTILINE)


def module_graph(entry: str) -> list[str]:
    """The static paths of every module ``entry`` (a static path) reaches, not itself, in
    the order first met (breadth first). A module missing from the static files ends its
    branch of the walk (the browser will report it)."""
    seen = {entry}
    order: list[str] = []
    queue = [entry]
    while queue:
        current = queue.pop(0)
        for found in _imports(current):
            if found not in seen:
                seen.add(found)
                order.append(found)
                queue.append(found)
    return order


def _imports(path: str) -> list[str]:
    source = _read(path)
    base = posixpath.dirname(path)
    return [posixpath.normpath(posixpath.join(base, target))
            for target in _IMPORT.findall(source)]


def _read(path: str) -> str:
    located = finders.find(path)
    if not isinstance(located, str):
        return ""
    with open(located, encoding="utf-8") as handle:
        return handle.read()


_cached_graph = lru_cache(maxsize=16)(module_graph)


@register.simple_tag
def module_preloads(*entries: str) -> SafeString:
    """The ``<link rel="modulepreload">`` tags for the module graphs of the page's entry
    modules, each module once and no entry itself (read once per process unless DEBUG is
    on, when the files may change under a running server)."""
    graph = module_graph if settings.DEBUG else _cached_graph
    modules = dict.fromkeys(path for entry in entries for path in graph(entry))
    for entry in entries:
        modules.pop(entry, None)
    return format_html_join(
        "\n", '<link rel="modulepreload" href="{}">',
        ((settings.STATIC_URL + path,) for path in modules))
