"""Student markdown stored in a form that every renderer shows inert, and safe raster images.

What ``autograded/`` holds is rendered again later: the Formgrader runs nbconvert's
markdown2html over each markdown cell with no sanitiser, the feedback goes through
nbconvert's template, JupyterLab renders the ``.ipynb`` with its own markdown parser. So a
student's markdown is rendered once here, cleaned, and stored as **one line of HTML inside
one ``<div>``** in which

- only allow-listed tags appear, with only ``href``/``title`` on links (http, https, mailto
  or ``#fragment``) and ``src``/``alt``/``title`` on images (``data:`` PNG, JPEG or GIF that
  decodes to those formats; no remote image, so opening the page requests nothing), never
  ``class``, ``style`` or ``id``;
- every ASCII character other than letters, digits and space, in text and in attribute
  values, is a numeric character reference (``&#91;``), newlines included.

A markdown renderer takes such a line for an HTML block and passes it through unchanged;
read as inline text it finds no markdown syntax (no ``[``, ``*``, ``<`` or ``:`` is left).
So a second render cannot revive a link, an image or a tag. A tag outside the allow-list is
shown as its own text (``<script>`` is seen, not run); nesting deeper than
:data:`MAX_DEPTH` is flattened (sanitisers slow down sharply with depth).

Shape legend: not applicable (no tensors here).
"""

from __future__ import annotations

import base64
import binascii
import re
from html.parser import HTMLParser

#: Tags kept (the lesson's hints use details/summary; markdown makes the rest).
TAGS = frozenset((
    "a", "abbr", "b", "blockquote", "br", "code", "dd", "del", "details", "div", "dl", "dt",
    "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "kbd", "li", "ol", "p", "pre",
    "s", "span", "strong", "sub", "summary", "sup", "table", "tbody", "td", "th", "thead", "tr",
    "ul"))
ATTRIBUTES = {"a": ("href", "title"), "img": ("src", "alt", "title")}
VOID = frozenset(("br", "hr", "img"))
#: Deeper elements are flattened into their text.
MAX_DEPTH = 32
#: Raster formats an image may carry, by their first bytes.
RASTER = {"image/png": b"\x89PNG\r\n\x1a\n", "image/jpeg": b"\xff\xd8\xff",
          "image/gif": b"GIF8"}
_LINK = re.compile(r"^(https?:|mailto:|#)", re.I)
_DATA_IMAGE = re.compile(r"^data:(image/(?:png|jpeg|gif));base64,([A-Za-z0-9+/=\s]*)$", re.I)
# Characters left as they are: letters, digits, space, and everything outside ASCII.
_PLAIN = re.compile(r"[^A-Za-z0-9 \u0080-\U0010ffff]")
# TeX commands with which MathJax (the pages load it for $...$) makes links or sets classes
# and styles: their backslash becomes U+2216, so MathJax shows them as text.
_TEX_ACTIVE = re.compile(r"\\(?=\s*(?:href|url|class|style|cssId|unicode|require|bbox|"
                         r"html|data|attr|mmlToken|tagged|texttip|toggle|mathtip|fragment)"
                         r"(?![A-Za-z]))", re.I)


def escape(text: str) -> str:
    """Every ASCII character but letters, digits and space as a numeric reference."""
    return _PLAIN.sub(lambda m: f"&#{ord(m.group())};", text)


#: TeX groups ({...}) nested deeper than this are shown as text: JupyterLab's own MathJax
#: (which typesets the stored notebook there) crashed its tab on 200 nested fractions.
MAX_TEX_DEPTH = 24


def _flatten_tex(text: str) -> str:
    """``text`` with the braces of groups nested past MAX_TEX_DEPTH made full-width
    (｛ ｝: characters TeX does not group by), so no formula nests deeper."""
    if text.count("{") <= MAX_TEX_DEPTH:
        return text
    out, stack, escaped = [], [], False
    for ch in text:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == "{":
            stack.append(len(stack) >= MAX_TEX_DEPTH)
            ch = "\uff5b" if stack[-1] else ch
        elif ch == "}" and stack:
            ch = "\uff5d" if stack.pop() else ch
        out.append(ch)
    return "".join(out)


def escape_text(text: str) -> str:
    """Text of the page: escaped, with MathJax's active commands made plain and its groups
    nested no deeper than MAX_TEX_DEPTH."""
    return escape(_flatten_tex(_TEX_ACTIVE.sub("\u2216", text)))


def raster_ok(mime: str, data) -> bool:
    """True when ``data`` (base64 text) decodes to an image of type ``mime``."""
    magic = RASTER.get(str(mime).lower())
    if magic is None or not isinstance(data, str):
        return False
    try:
        raw = base64.b64decode("".join(data.split()), validate=True)
    except (binascii.Error, ValueError):
        return False
    return raw.startswith(magic)


def safe_url(tag: str, name: str, value: str) -> str | None:
    """The attribute value kept, or None: links to http(s)/mailto/#, images inline raster."""
    compact = re.sub(r"[\x00-\x20\x7f]", "", value)  # browsers ignore these in a scheme
    if tag == "a" and name == "href":
        return value.strip() if _LINK.match(compact) else None
    if tag == "img" and name == "src":
        m = _DATA_IMAGE.match(value.strip())
        return value.strip() if m and raster_ok(m.group(1), m.group(2)) else None
    return value


class _Cleaner(HTMLParser):
    """Rebuilds HTML from its tokens: allowed tags and attributes, everything else text."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out, self.open = [], []

    def handle_starttag(self, tag, attrs):
        self._start(tag, attrs, self.get_starttag_text() or f"<{tag}>", closed=False)

    def handle_startendtag(self, tag, attrs):
        self._start(tag, attrs, self.get_starttag_text() or f"<{tag}/>", closed=True)

    def _start(self, tag, attrs, raw, closed):
        if tag not in TAGS or len(self.open) >= MAX_DEPTH:
            if tag not in TAGS:
                self.out.append(escape(raw))  # shown, not run
            return
        kept = []
        for name, value in attrs:
            if name in ATTRIBUTES.get(tag, ()) and value is not None:
                value = safe_url(tag, name, value)
                if value is not None:
                    kept.append(f' {name}="{escape(value)}"')
        if tag == "img" and not any(k.startswith(" src=") for k in kept):
            alt = dict(attrs).get("alt") or "image"
            self.out.append(escape(f"[{alt}: not shown, only inline PNG, JPEG or GIF are]"))
            return
        self.out.append(f"<{tag}{''.join(kept)}>")
        if tag not in VOID and not closed:
            self.open.append(tag)

    def handle_endtag(self, tag):
        if tag not in TAGS:
            self.out.append(escape(f"</{tag}>"))
        elif tag in self.open:  # close up to the matching element; a stray end is dropped
            while self.open:
                top = self.open.pop()
                self.out.append(f"</{top}>")
                if top == tag:
                    break

    def handle_data(self, data):
        self.out.append(escape_text(data))

    def close(self):
        super().close()
        while self.open:
            self.out.append(f"</{self.open.pop()}>")
        return "".join(self.out)


def clean_html(html: str) -> str:
    """``html`` with only allow-listed tags and attributes, text fully escaped, one line."""
    cleaner = _Cleaner()
    cleaner.feed(html)
    return cleaner.close()


class _Attachments(dict):
    """Attachments as nbconvert looks them up: a name that is missing, or is not a real
    PNG, JPEG or GIF, gives a type the cleaner drops (nbconvert would raise on a missing
    one, failing the whole notebook)."""

    def __contains__(self, name):
        return True

    def __missing__(self, name):
        return {"x-not-shown/x": ""}


def safe_attachments(attachments) -> dict:
    """{name: {mime: data}} of the attachments that are real PNG, JPEG or GIF images."""
    out = _Attachments()
    for name, bundle in (attachments or {}).items():
        good = [(m, d) for m, d in (bundle or {}).items() if raster_ok(m, d)]
        if good:
            out[name] = dict(good[:1])
    return out


def is_stored_form(source: str) -> bool:
    """True for text this module produced (cleaning it again changes nothing)."""
    return (source.startswith("<div>") and source.endswith("</div>") and "\n" not in source
            and clean_html(source) == source)


def stored_markdown(source: str, attachments=None) -> str:
    """The stored, inert form of a markdown cell (attachments inlined when safe)."""
    if is_stored_form(source):
        return source
    try:
        from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

        renderer = IPythonRenderer(escape=False, attachments=safe_attachments(attachments),
                                   exclude_anchor_links=True)
        html = MarkdownWithMath(renderer=renderer).render(source)
    except Exception:  # noqa: BLE001  (markdown a renderer cannot parse: kept as text)
        return inert_text(source)
    return f"<div>{clean_html(html)}</div>"


def inert_text(text: str) -> str:
    """``text`` shown as it is, preformatted, in the stored form."""
    return f"<div><pre>{escape_text(text)}</pre></div>"


# ------------------------------------------------------------ invisible characters
#: Characters that change how code displays without showing (Trojan Source, CVE-2021-42574):
#: bidirectional controls and other format characters (Unicode category Cf), and the
#: Hangul fillers that render as blanks.
_FILLERS = "\u115f\u1160\u3164\uffa0"


def invisible_chars(text: str) -> list[str]:
    """The distinct invisible or bidi characters in ``text``, in order of appearance."""
    import unicodedata

    seen = []
    for ch in text:
        if (ch in _FILLERS or unicodedata.category(ch) == "Cf") and ch not in seen:
            seen.append(ch)
    return seen


def char_name(ch: str) -> str:
    """``U+202E RIGHT-TO-LEFT OVERRIDE``."""
    import unicodedata

    return f"U+{ord(ch):04X} {unicodedata.name(ch, 'unnamed')}"


def reveal_invisibles(text: str) -> tuple[str, list[str]]:
    """``text`` with each invisible or bidi character replaced by a visible ``⟦U+202E⟧``,
    and the names of those found."""
    found = invisible_chars(text)
    for ch in found:
        text = text.replace(ch, f"\u27e6U+{ord(ch):04X}\u27e7")
    return text, [char_name(ch) for ch in found]
