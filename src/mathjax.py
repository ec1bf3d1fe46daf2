"""MathJax for the feedback pages and the Formgrader's view of a submission: offline, inlined
and locked down.

The MathJax is the one the PyPI package ``jupyter-server-mathjax`` ships (MathJax 2.7.9:
TeX input, HTML-CSS output with the STIX-Web fonts; see requirements.txt). nbconvert's pages
load MathJax from a CDN; here ``src/templates/base/mathjax.html.j2`` puts :func:`page_scripts`
into the page instead: MathJax.js and every file it may ask for, as text inside the page,
and the fonts as ``data:`` URLs. A feedback file is opened from disk, often on a student's
own machine, with no server and no copy of MathJax beside it, so nothing may be left to load.

What MathJax may do is cut to typesetting (see :data:`LOCKDOWN`):

- its loader answers only from the files inlined here: a file it was not given fails at once,
  so no ``<script src>`` or stylesheet is ever requested, from anywhere (``\\require``,
  ``[Contrib]``, the menu's renderer and locale choices, accessibility extensions);
- the TeX macros that make links, set classes, ids or styles, pick fonts or load code
  (``\\href``, ``\\class``, ``\\cssId``, ``\\style``, ``\\bbox``, ``\\unicode``,
  ``\\require``, ``\\mmlToken``, ``\\toggle``, ``\\mathtip``, ``\\texttip``, ...) are
  removed: MathJax shows them as undefined, in red, as text;
- MathJax's Safe extension is on as well, with nothing allowed (no URL, class, id, style,
  font size or ``\\require``);
- ``$`` inside ``<pre>`` and ``<code>`` stays text; only TeX in ``$...$``, ``$$...$$``,
  ``\\(...\\)`` and ``\\[...\\]`` is typeset, and MathML in the page is not (no mml2jax).

Student markdown reaches the page already made inert by ``src/safe_html.py`` (its
``_TEX_ACTIVE`` also takes the backslash off those macros): this is the second lock.

Shape legend: not applicable (no tensors here).
"""

from __future__ import annotations

import base64
import json
from functools import lru_cache
from pathlib import Path

#: The package that ships MathJax (pinned in requirements.txt).
PACKAGE = "jupyter_server_mathjax"
#: MathJax's combined configuration the package ships (TeX, AMS, HTML-CSS, menus).
CONFIG = "config/TeX-AMS-MML_HTMLorMML-full.js"
#: TeX extensions MathJax may autoload (by macro or environment); nothing that makes
#: links, classes, ids, styles or loads code (HTML, bbox, unicode, action, autoload-all).
TEX_EXTENSIONS = ("AMSmath", "AMSsymbols", "AMScd", "noErrors", "noUndefined", "newcommand",
                  "begingroup", "boldsymbol", "cancel", "color", "enclose", "extpfeil",
                  "mathchoice", "verb")
#: Macros taken out of MathJax's TeX (Definitions.macros): links, classes, ids, styles,
#: fonts, token elements with attributes, code loading, actions with tooltips.
REMOVED_MACROS = ("href", "class", "cssId", "style", "bbox", "unicode", "require", "mmlToken",
                  "toggle", "mathtip", "texttip", "FontAwesome", "fragment", "data", "attr",
                  "html", "tagged", "url")

#: What one formula may be before MathJax lays it out (larger ones are shown as a note
#: instead): MathJax 2.7.9 in Chromium hangs on 3,000 nested braces and its tab crashes on
#: 200 nested fractions (tests/browser/test_mathjax.py). The lesson's deepest formula is
#: far below these; ``tree`` is the depth of MathJax's own tree after macros are expanded.
LIMITS = {"chars": 4000, "nesting": 40, "tree": 60}

# Runs in the page before MathJax.js: MathJax's configuration (window.MathJax, read as the
# author's configuration, applied after the combined configuration's own) and AuthorInit,
# which MathJax.js calls before it starts: the loader is pointed at the inlined files.
LOCKDOWN = r"""
window.MathJax = {
  root: "mathjax-inline",
  config: ["TeX-AMS-MML_HTMLorMML-full.js"],
  jax: ["input/TeX", "output/HTML-CSS"],
  extensions: ["tex2jax.js", "MathEvents.js", "MathZoom.js", "MathMenu.js",
               "TeX/noErrors.js", "TeX/noUndefined.js", "TeX/AMSmath.js",
               "TeX/AMSsymbols.js", "Safe.js"],
  tex2jax: {
    inlineMath: [["$", "$"], ["\\(", "\\)"]],
    displayMath: [["$$", "$$"], ["\\[", "\\]"]],
    processEscapes: true, processEnvironments: true, processRefs: false,
    skipTags: ["script", "noscript", "style", "textarea", "pre", "code", "kbd", "a"]
  },
  TeX: {equationNumbers: {autoNumber: "none"}, MAXMACROS: 1000, MAXBUFFER: 5120},
  Safe: {allow: {URLs: "none", classes: "none", cssIDs: "none", styles: "none",
                 fontsize: "none", require: "none"},
         safeProtocols: {http: false, https: false, file: false, javascript: false,
                         data: false}},
  "HTML-CSS": {availableFonts: [], preferredFont: null, webFont: "STIX-Web",
               imageFont: null, linebreaks: {automatic: true}},
  MMLorHTML: {prefer: "HTML"},
  menuSettings: {renderer: "HTML-CSS", zoom: "None", assistiveMML: false},
  MathMenu: {showRenderer: false, showFontMenu: false, showLocale: false,
             showLocaleURL: false, showMathPlayer: false, showContext: false,
             showDiscoverable: false},
  showMathMenu: true, messageStyle: "none", displayAlign: "center",
  AuthorInit: function () {
    var AJAX = MathJax.Ajax, FILES = window.ATTENTION_MATHJAX_FILES || {};
    var FONTS = window.ATTENTION_MATHJAX_FONTS || {};
    var ROOT = "mathjax-inline/";
    AJAX.config.path.Contrib = ROOT + "no-contrib";  // never the CDN MathJax names
    AJAX.params.noContrib = true;
    AJAX.loader.JS = function (file, callback) {
      var source = file.indexOf(ROOT) === 0 ? FILES[file.substr(ROOT.length)] : undefined;
      this.loading[file] = {callback: callback, timeout: null, status: this.STATUS.OK,
                            message: MathJax.Message.File(this.fileName(file))};
      if (typeof source !== "string") {  // not shipped in the page: fails, loads nothing
        setTimeout(function () { AJAX.loadTimeout(file); }, 0);
        return;
      }
      var script = document.createElement("script");
      script.text = source;  // runs now; the file ends by calling AJAX.loadComplete itself
      this.head.appendChild(script);
    };
    AJAX.loader.CSS = function (file, callback) {  // no stylesheet from anywhere
      this.loading[file] = {callback: callback, status: this.STATUS.OK,
                            message: MathJax.Message.File(this.fileName(file))};
      setTimeout(function () { AJAX.loadTimeout(file); }, 0);
    };
    MathJax.Hub.Register.StartupHook("TeX Jax Ready", function () {
      var TEX = MathJax.InputJax.TeX, macros = TEX.Definitions.macros;
      var removed = window.ATTENTION_MATHJAX_REMOVED || [];
      for (var i = 0; i < removed.length; i++) delete macros[removed[i]];
      var LIMITS = window.ATTENTION_MATHJAX_LIMITS;
      // Before parsing: the source's length and nesting ({...}, \left, \begin).
      TEX.prefilterHooks.Add(function (data) {
        var tex = data.math, depth = 0, deepest = 0, m;
        var re = new RegExp("\\\\[{}]|\\\\(left|right|begin|end)(?![a-zA-Z])|[{}]", "g");
        if (tex.length > LIMITS.chars) {
          data.math = "\\text{[formula not typeset: " + tex.length + " characters, over " +
                      LIMITS.chars + "]}";
          return;
        }
        while ((m = re.exec(tex))) {
          var t = m[0];
          if (t === "{" || t === "\\left" || t === "\\begin") deepest = Math.max(deepest, ++depth);
          else if (t === "}" || t === "\\right" || t === "\\end") depth--;
        }
        if (deepest > LIMITS.nesting)
          data.math = "\\text{[formula not typeset: nested " + deepest + " deep, over " +
                      LIMITS.nesting + "]}";
      });
      // After parsing (macros expanded): the depth of the tree MathJax would lay out.
      TEX.postfilterHooks.Add(function (data) {
        var MML = MathJax.ElementJax.mml;
        function depthOf(node, d) {
          if (d > LIMITS.tree) return d;
          var most = d, kids = (node && node.data) || [];
          for (var k = 0; k < kids.length; k++)
            if (kids[k] && typeof kids[k] === "object")
              most = Math.max(most, depthOf(kids[k], d + 1));
          return most;
        }
        var root = data.math.root || data.math;  // the element jax's <math>
        if (depthOf(root, 0) > LIMITS.tree) {
          root.data = [];
          root.Append(MML.mtext(
            "[formula not typeset: its layout is nested over " + LIMITS.tree + " deep]"));
        }
      });
    });
    MathJax.Hub.Register.StartupHook("mml2jax Ready", function () {
      MathJax.Extension.mml2jax.PreProcess = function () {};  // no MathML from the page
    });
    MathJax.Hub.Register.StartupHook("HTML-CSS Jax Startup", function () {
      var HTMLCSS = MathJax.OutputJax["HTML-CSS"], fontFace = HTMLCSS.Font.fontFace;
      HTMLCSS.allowWebFonts = "woff";  // the fonts are data: URLs, from disk too
      HTMLCSS.Font.fontFace = function (name) {
        var face = fontFace.apply(this, arguments);
        var file = /([A-Za-z0-9_-]+)\.woff/.exec(face.src);
        face.src = file && FONTS[file[1]] ?
          "url(data:font/woff;base64," + FONTS[file[1]] + ") format('woff')" :
          "local('STIXGeneral')";
        return face;
      };
    });
  }
};
"""


def static_dir() -> Path:
    """MathJax's files as the package installs them."""
    import importlib.util

    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        raise RuntimeError(f"{PACKAGE} is not installed: run `make venv` (requirements.txt)")
    return Path(spec.origin).parent / "static"


def inlined_files(root: Path | None = None) -> dict[str, str]:
    """{path under MathJax's root: text} of every JavaScript file the page carries."""
    root = root or static_dir()
    paths = [root / CONFIG, root / "extensions" / "Safe.js"]
    paths += [root / "extensions" / "TeX" / f"{name}.js" for name in TEX_EXTENSIONS]
    for folder in ("jax/output/HTML-CSS/fonts/STIX-Web", "jax/output/HTML-CSS/autoload",
                   "jax/element/mml/optable"):
        paths += sorted((root / folder).rglob("*.js"))
    return {p.relative_to(root).as_posix(): p.read_text(encoding="utf-8") for p in paths}


def inlined_fonts(root: Path | None = None) -> dict[str, str]:
    """{font file name without .woff: base64} of the STIX-Web web fonts."""
    root = root or static_dir()
    folder = root / "fonts" / "HTML-CSS" / "STIX-Web" / "woff"
    return {p.stem: base64.b64encode(p.read_bytes()).decode("ascii")
            for p in sorted(folder.glob("*.woff"))}


def _script(js: str) -> str:
    # Inside <script>, "</" could end the element early: as \u003c/ it cannot.
    return "<script>" + js.replace("</", "<\\/") + "</script>"


def _as_js(value) -> str:
    return json.dumps(value, ensure_ascii=True).replace("<", "\\u003c")


@lru_cache(maxsize=1)
def page_scripts() -> str:
    """The HTML that typesets the page's TeX with the inlined, locked-down MathJax."""
    root = static_dir()
    mathjax = (root / "MathJax.js").read_text(encoding="utf-8")
    return "\n".join([
        "<!-- MathJax 2.7.9 from the jupyter-server-mathjax package, inlined by "
        "src/mathjax.py: nothing is loaded from elsewhere -->",
        _script("window.ATTENTION_MATHJAX_FILES = " + _as_js(inlined_files(root)) + ";\n"
                "window.ATTENTION_MATHJAX_FONTS = " + _as_js(inlined_fonts(root)) + ";\n"
                "window.ATTENTION_MATHJAX_REMOVED = " + _as_js(list(REMOVED_MACROS)) + ";\n"
                "window.ATTENTION_MATHJAX_LIMITS = " + _as_js(LIMITS) + ";\n"
                + LOCKDOWN),
        _script(mathjax),
    ])


def mathjax_filter(_url="") -> str:
    """nbconvert filter behind the ``mathjax`` macro (nbgrader_config.py registers it)."""
    from markupsafe import Markup

    return Markup(page_scripts())
