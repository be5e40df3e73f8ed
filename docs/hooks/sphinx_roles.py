"""MkDocs hook: show the Sphinx roles in Kalypso's docstrings as inline code.

The docstrings cross-reference with Sphinx roles (:class:`X`, :meth:`~a.B.c`,
:mod:`title <a.b>`), which mkdocstrings' Google-style parser leaves as text: the page
would read ":class:" before the code. This drops the role, keeps the code, shortens a
``~`` target to its last part and shows an explicit title instead of its target.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:class|mod|meth|func|data|attr|exc|obj):<code>(~?)([^<]*)</code>")
_TITLED = re.compile(r"^(.*?)\s*&lt;[^&]*&gt;$")


def _code(match: re.Match[str]) -> str:
    tilde, target = match.groups()
    titled = _TITLED.match(target)
    if titled:
        target = titled.group(1)
    elif tilde:
        target = target.rsplit(".", 1)[-1]
    return f"<code>{target}</code>"


def on_page_content(html: str, **kwargs: Any) -> str:
    return _ROLE.sub(_code, html)
