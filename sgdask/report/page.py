"""What every HTML page of sgdask shares: the skeleton, the base CSS, escaping and safe links.

``report.html``, ``comparison.html``, the leaderboard pages and the service's pages are plain
strings built from these pieces, so escaping and the rules for links are written once. Pages
are self-contained: CSS and scripts are inline and nothing is loaded from anywhere, which
lets the service's Content-Security-Policy allow a script by its hash (``script_hash``).
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from typing import Any

SAFE_SCHEMES = ("http", "https")
# Browsers drop ASCII whitespace and control characters inside a URL before reading its scheme.
_URL_IGNORED = re.compile(r"[\x00-\x20\x7f]")
_URL_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")

BASE_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.6em; }
h2 { border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: right; }
th { background: #f0f0f0; }
tbody tr:nth-child(even) { background: #fafafa; }
.note { color: #555; font-size: 0.9em; }
.unsafe-link { color: #777; }
"""


def page(title: str, body: str, css: str = "", head: str = "", script: str = "") -> str:
    """A whole page: ``BASE_CSS`` then the page's ``css``, ``head`` (HTML the caller wrote,
    e.g. a refresh), ``body`` (HTML the caller escaped) and an optional inline script."""
    tail = f"<script>{script}</script>\n" if script else ""
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"{head}<title>{esc(title)}</title>\n<style>{BASE_CSS}{css}</style>\n</head>\n"
            f"<body>\n{body}\n{tail}</body>\n</html>\n")


def script_hash(script: str) -> str:
    """The CSP source (``sha256-...``) that allows exactly this inline script."""
    return "sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()


def esc(value: Any) -> str:
    """Text or an attribute value (quoted with ``"`` or ``'``) as HTML: ``& < > " '``
    escaped."""
    return html.escape(str(value))


def url_scheme(url: str) -> str | None:
    """The scheme a browser reads from ``url``, lower case; None for a relative URL."""
    scheme = _URL_SCHEME.match(_URL_IGNORED.sub("", url))
    return None if scheme is None else scheme.group(1).lower()


def is_safe_url(url: str) -> bool:
    """An http(s) or relative URL: the only ones that become an ``href``."""
    scheme = url_scheme(url)
    return scheme is None or scheme in SAFE_SCHEMES


def link(url: str | None, text: str) -> str:
    """An ``<a>`` for http(s) and relative URLs; anything else is escaped text."""
    if not url:
        return esc(text)
    if not is_safe_url(url):
        return f'<span class="unsafe-link" title="{esc(url)}">{esc(text)}</span>'
    return f'<a href="{esc(url)}">{esc(text)}</a>'
