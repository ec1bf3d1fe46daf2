"""The MathJax the feedback and the Formgrader carry (src/mathjax.py), on its own, in real
Chromium: hostile TeX written straight into a page opened from disk, without the
``src/safe_html.py`` cleaning that student markdown gets first, so this is the second
lock by itself. Formulas are typeset; nothing makes a link, a class, an id or a style of
the author's, loads a file or sends a request; huge and deeply nested input ends.
"""

import html
import time

import pytest

from src import mathjax
from src.pages import wrap_css

pytestmark = pytest.mark.slow

def _name(i):
    return "\\m" + chr(97 + i // 26) + chr(97 + i % 26)  # \\maa, \\mab, ...


def _nest(i):
    """``\\def\\mab{\\frac{1}{\\maa}}``: each macro one fraction deeper than the last."""
    return "\\def" + _name(i) + "{\\frac{1}{" + (_name(i - 1) if i else "x") + "}}"


#: (case, TeX). Each lands in its own paragraph of the page as text (HTML-escaped).
HOSTILE_TEX = [
    ("href", r"$\href{javascript:alert('pwned')}{click me}$"),
    ("href-display", r"$$\href{javascript:document.title='pwned'}{x}$$"),
    ("href-paren", r"\(\href{https://tracker.example/x}{x}\) \[\href{data:text/html,x}{y}\]"),
    ("class", r"$\class{modal-backdrop navbar-fixed-top}{x}$"),
    ("cssId", r"$\cssId{notebook-container}{x}$"),
    ("style", r"$\style{position:fixed;top:0;left:0;width:100%;height:100%;"
              r"background:url(https://tracker.example/s.png)}{9/9}$"),
    ("bbox", r"$\bbox[background:url(https://tracker.example/b.png)]{x}$"),
    ("unicode", r"$\unicode[Comic Sans]{x41}\unicode{x1F600}$"),
    ("require", r"$\require{action}\toggle{a}{b}\endtoggle$"),
    ("require-remote", r"$\require{[Contrib]/pwned/pwned.js}\require{https://t.example/x.js}$"),
    ("mmlToken", r"$\mmlToken{mi}[href='javascript:alert(1)' class='x' id='top']{x}$"),
    ("tips", r"$\mathtip{x}{tip}\texttip{y}{tip}$"),
    ("html", r"$\html{<img src=x onerror=alert(1)>}\verb|<script>alert(1)</script>|$"),
    ("environment", r"\begin{equation}\href{javascript:alert(1)}{y}\end{equation}"),
    ("macro-bomb", r"$\def\a{\a\a}\a$ $\newcommand{\b}{\b x}\b$"),
    ("deep-braces", "$" + "{" * 1500 + "x" + "}" * 1500 + "$"),
    # nesting made by macros, out of sight of the source's braces
    ("macro-depth", "$" + "".join(_nest(i) for i in range(100)) + _name(99) + "$"),
    ("deep-frac", "$" + r"\frac{1}{" * 200 + "x" + "}" * 200 + "$"),
    ("huge", "$" + "x+" * 20_000 + "x$"),
    ("long", "$$" + " + ".join(rf"\frac{{a_{{{i}}}}}{{b}}" for i in range(150)) + "$$"),
    ("overlay", r"$\raise 80em{\kern-40em\Huge 9 / 9}\rule{200em}{200em}$"),
    ("formula", r"$$\mathrm{Attention}(Q,K,V)=\mathrm{softmax}\left("
                r"\frac{QK^\top}{\sqrt{d_k}}\right)V$$"),
]
MANY = " ".join(f"$x_{{{i}}}$" for i in range(1500))


def hostile_page(path):
    cases = "\n".join(f'<p data-case="{name}">{html.escape(tex)}</p>'
                      for name, tex in HOSTILE_TEX)
    path.write_text(
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>math</title>"
        f"{mathjax.page_scripts()}{wrap_css()}</head><body>"
        f"<h1 id='score'>Score: 0 / 9</h1><div class='text_cell_render'>{cases}"
        f"<p data-case='many'>{MANY}</p>"
        f"<p><code>$x$ in code</code></p><pre>$y$ in pre</pre></div></body></html>")
    return path.as_uri()


#: Where MathJax 2 (HTML-CSS output) writes its own classes and ids, nothing else.
MATHJAX_FACTS = r"""() => {
  const bad = [];
  const classOk = new RegExp('^(MathJax\\w*|MJX[\\w-]*|math|mrow|mi|mo|mn|ms|mtext|mspace|' +
    'msub|msup|msubsup|munder|mover|munderover|mfrac|msqrt|mroot|mstyle|merror|mpadded|' +
    'mphantom|mfenced|menclose|mtable|mtr|mtd|mlabeledtr|maction|semantics|annotation|' +
    'texatom|noError|mglyph|mmultiscripts|none|mprescripts)$');
  const idOk = /^MathJax-(Element|Span)-\d+(-Frame|-Preview)?$/;
  for (const el of document.querySelectorAll('.text_cell_render *')) {
    for (const c of el.classList) if (!classOk.test(c)) bad.push(`class ${c}`);
    if (el.id && !idOk.test(el.id)) bad.push(`id ${el.id}`);
    const style = el.getAttribute('style') || '';
    if (/url\(|fixed|sticky|javascript|expression/i.test(style)) bad.push(`style ${style}`);
    if (el.closest('.MathJax, .MathJax_Display') &&
        (el.tagName === 'A' || el.hasAttribute('href') || el.hasAttribute('src')))
      bad.push(`link ${el.tagName} ${el.getAttribute('href') || el.getAttribute('src')}`);
    for (const a of el.attributes) if (a.name.startsWith('on')) bad.push(`handler ${a.name}`);
  }
  for (const file of Object.keys(MathJax.Ajax.loaded))
    if (!file.startsWith('mathjax-inline/')) bad.push(`loaded ${file}`);
  return bad;
}"""


def typeset(page):
    """Wait until MathJax has processed the page; the seconds it took."""
    t0 = time.monotonic()
    page.wait_for_function("() => window.MathJax && MathJax.Hub && MathJax.Hub.queue &&"
                           " !MathJax.Hub.queue.pending && !MathJax.Hub.queue.running &&"
                           " document.querySelectorAll('.MathJax, .MathJax_Display').length"
                           " > 0", timeout=60_000)
    page.evaluate("() => new Promise(r => MathJax.Hub.Queue(r))")
    return time.monotonic() - t0


def test_hostile_tex_is_typeset_inert_and_loads_nothing(page, tmp_path, shots):
    seen = {"dialogs": [], "requests": []}
    page.on("dialog", lambda d: (seen["dialogs"].append(d.message), d.dismiss()))
    page.on("request", lambda r: seen["requests"].append(r.url))
    url = hostile_page(tmp_path / "math.html")
    page.goto(url)
    seconds = typeset(page)
    assert seconds < 30, seconds  # huge, deep and many formulas end, and soon
    page.wait_for_timeout(500)
    assert seen["dialogs"] == [] and page.title() == "math"
    # only the page itself; about:blank is MathJax's blank font (no request leaves)
    assert [u for u in seen["requests"] if u != url and u != "about:blank"] == []
    assert page.evaluate(MATHJAX_FACTS) == []
    # every case was typeset (or shown as MathJax's error text), none left as raw TeX
    for name, _ in HOSTILE_TEX + [("many", "")]:
        case = page.locator(f"p[data-case='{name}']")
        assert case.locator(".MathJax, .MathJax_Display, .MathJax_Preview").count() > 0, name
    assert page.locator("p[data-case='many'] .MathJax").count() == 1500
    # the removed macros are shown as undefined, in MathJax's own markup
    assert "\\href" in page.locator("p[data-case='href']").inner_text()
    # input past the limits is named, not laid out (MathJax hangs or the tab crashes)
    for name in ("deep-braces", "macro-depth", "deep-frac", "huge"):
        assert "formula not typeset" in page.locator(f"p[data-case='{name}']").inner_text()
    for name in ("formula", "long", "overlay"):
        assert "not typeset" not in page.locator(f"p[data-case='{name}']").inner_text()
    # TeX in code stays text
    assert page.locator("code").inner_text() == "$x$ in code"
    assert page.locator("pre").inner_text() == "$y$ in pre"
    # nothing drawn by a formula covers the score above the cell
    box = page.locator("#score").bounding_box()
    top = page.evaluate("([x, y]) => document.elementFromPoint(x, y).id",
                        [box["x"] + 5, box["y"] + box["height"] / 2])
    assert top == "score"
    page.locator("p[data-case='formula']").scroll_into_view_if_needed()
    page.screenshot(path=shots / "mathjax-1-hostile-tex.png")
