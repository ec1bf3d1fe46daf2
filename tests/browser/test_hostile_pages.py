"""A hostile submission as the instructor's browser shows it: real Chromium on the real
Formgrader view of its autograded notebook, on its feedback page and on the autograded
``.ipynb`` in JupyterLab.

mallory's notebook holds script, links and images in every markdown and HTML syntax
(tests/cohort/attacks.py), a fake "9 / 9" banner over a blacked-out page, beacons, a pasted
picture, Trojan Source code, script in outputs and active files beside the notebook. On
every page: no script runs, no ``javascript:``/``vbscript:``/``data:`` URL (but inline
raster images), no event handler attribute, nothing in the student's part of the page
with a ``class``, ``style`` or ``id`` or a fixed position, and no request leaves the
page's origin.
"""

import io
import re

import nbformat
import pytest
from playwright.sync_api import expect

from src import course
from tests.browser.conftest import start_lab
from tests.browser.test_mathjax import MATHJAX_FACTS
from tests.cohort import attacks
from tests.cohort.build import submission_notebook, write_submissions
from tests.test_grading import PNG

pytestmark = pytest.mark.slow

# Runs in the page: every attribute that could act, with the element it sits on.
DOM_FACTS = """([student, ownHandlers, checkAttrs]) => {
  const bad = [];
  const urlAttrs = ['href', 'src', 'action', 'formaction', 'poster', 'background',
                    'xlink:href', 'srcset', 'data', 'ping'];
  for (const el of document.querySelectorAll('*')) {
    for (const a of el.attributes) {
      const name = a.name.toLowerCase(), value = a.value.replace(/[\\s\\x00-\\x1f]/g, '');
      if (name.startsWith('on') && !ownHandlers.includes(a.value))
        bad.push(`${el.tagName} ${name}=${a.value.slice(0, 60)}`);
      if (urlAttrs.includes(name) && /^(javascript|vbscript|data):/i.test(value) &&
          !(el.tagName === 'IMG' && name === 'src' &&
            /^data:image\\/(png|jpeg|gif);base64,/i.test(value)))
        bad.push(`${el.tagName} ${name}=${value.slice(0, 60)}`);
    }
  }
  for (const root of document.querySelectorAll(student)) {
    for (const el of root.querySelectorAll('*')) {
      // MathJax's own layout of the TeX (v3 in JupyterLab, v2 in the Formgrader and the
      // feedback): its classes, ids and styles are MathJax's (tests/browser/test_mathjax.py)
      if (el.closest('mjx-container, .MathJax, .MathJax_Display, .MathJax_Preview') ||
          (el.tagName === 'SCRIPT' && el.type.startsWith('math/tex'))) continue;
      for (const name of ['class', 'style', 'id'])
        if (checkAttrs && el.hasAttribute(name)) bad.push(`student ${el.tagName} ${name}=`);
      const pos = getComputedStyle(el).position;
      if (pos === 'fixed' || pos === 'sticky' || pos === 'absolute')
        bad.push(`student ${el.tagName} position ${pos}`);
    }
  }
  return bad;
}"""
# Where the student's content lands on each page: rendered markdown, and HTML-capable
# output (outputs keep only text and images, which the templates wrap in their own markup).
FORMGRADER_STUDENT = ".text_cell_render"
LAB_STUDENT = ".jp-MarkdownCell .jp-RenderedMarkdown"
#: The Formgrader's own handlers (its template's show/hide-name buttons), nothing else.
OWN_HANDLERS = ["toggle_name(true);", "toggle_name(false);"]
#: TeX aimed at MathJax in a student's markdown (src/safe_html.py takes the backslash off
#: the active macros; the page's MathJax has them removed too: src/mathjax.py).
HOSTILE_TEX = (r"Formula $\href{javascript:alert('pwned')}{click}$ $\class{modal-backdrop}{x}$"
               r" $\style{position:fixed;top:0}{9/9}$ $\cssId{top}{x}$ $\unicode{x41}$"
               r" $\require{[Contrib]/x.js}$ and $$\frac{QK^\top}{\sqrt{d_k}}$$ and `$x$`")
#: 200 nested fractions crashed the tab of JupyterLab's own MathJax 3 on the autograded
#: notebook: the stored form nests no TeX group past safe_html.MAX_TEX_DEPTH (the pages'
#: MathJax names such a formula instead: tests/browser/test_mathjax.py).
DEEP_TEX = "Deep: $" + r"\frac{1}{" * 200 + "x" + "}" * 200 + "$"


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """(lab URL, course dir) with mallory autograded in the sandbox and her feedback."""
    base = tmp_path_factory.mktemp("hostile")
    root = base / "course"
    mp = pytest.MonkeyPatch()
    mp.setenv("ATTENTION_COURSE_DIR", str(root))
    course.release()
    cells = [("cell3_data", "markdown", md) for md in attacks.HOSTILE_MARKDOWN]
    cells += [("cell3_data", "markdown", HOSTILE_TEX), ("cell3_data", "markdown", DEEP_TEX),
              ("cell3_data", "markdown", attacks.OVERLAY),
              ("cell3_data", "markdown", attacks.BEACON),
              ("cell4_projections_test", "code", attacks.TROJAN + attacks.XSS)]
    nb = nbformat.reads(submission_notebook(added=cells), as_version=4)
    picture = nbformat.v4.new_markdown_cell("My sketch: ![sketch.png](attachment:sketch.png)")
    picture["attachments"] = {"sketch.png": {"image/png": PNG}}
    nb.cells.insert(3, picture)
    nb.cells.insert(4, nbformat.v4.new_raw_cell("<script>alert('raw')</script>"))
    write_submissions([dict(name="mallory", nb=nbformat.writes(nb),
                            extra=attacks.ACTIVE_FILES)])
    report = course.grade(jobs=1, stream=io.StringIO())
    assert not report.failed, report.summary()
    assert report.results[0].score == 9.0  # her answers are right: none of this costs her
    course.feedback()
    for url in start_lab(base, base, env={"ATTENTION_COURSE_DIR": str(root)}):
        yield url, root, report
    mp.undo()


def watch(page):
    """Record dialogs and every request the page makes."""
    seen = {"dialogs": [], "requests": []}
    page.on("dialog", lambda d: (seen["dialogs"].append(d.message), d.dismiss()))
    page.on("request", lambda r: seen["requests"].append(r.url))
    return seen


def assert_inert(page, seen, origin, student, check_attributes=True, template_scripts=()):
    page.wait_for_timeout(1500)  # let anything that would run, run
    assert seen["dialogs"] == [], seen["dialogs"]
    assert "pwned" not in page.title()
    assert page.evaluate(DOM_FACTS, [student, OWN_HANDLERS, check_attributes]) == []
    assert page.locator(student).count() > 0  # the check looked at the student's part
    # about:blank is MathJax's blank test font (nothing is fetched)
    elsewhere = [u for u in seen["requests"] if not u.startswith(origin)
                 and not u.startswith("data:") and u != "about:blank"
                 and u.split("?")[0] not in template_scripts]
    assert elsewhere == [], elsewhere


def assert_tex_inert(page):
    """The page's MathJax typeset the student's formulas, and her TeX made nothing active."""
    page.wait_for_function("() => window.MathJax && MathJax.Hub && !MathJax.Hub.queue.pending"
                           " && document.querySelector('.MathJax_Display')", timeout=60_000)
    page.evaluate("() => new Promise(r => MathJax.Hub.Queue(r))")
    assert page.evaluate(MATHJAX_FACTS) == []
    cell = page.locator(FORMGRADER_STUDENT, has_text="Formula")
    assert cell.locator(".MathJax_Display").count() == 1  # her $$...$$ typeset
    text = cell.inner_text()
    assert "$x$" in text
    assert page.locator("#top, .modal-backdrop").count() == 0


def test_the_formgrader_view_of_a_hostile_notebook_is_inert(page, graded, shots):
    url, root, _ = graded
    seen = watch(page)
    page.goto(f"{url}/formgrader/gradebook/attention/lesson")
    link = page.locator("a.name-shown", has_text="mallory")
    link.wait_for(state="attached")
    href = link.get_attribute("href")
    page.goto(url + href)
    body = page.locator("body")
    expect(body).to_contain_text("cell7_values_test", timeout=60_000)
    assert_inert(page, seen, url, FORMGRADER_STUDENT)  # no script from elsewhere either
    assert_tex_inert(page)
    text = body.inner_text()
    assert "<script>alert('pwned')</script>" in text  # shown, not run
    assert "Score: 9 / 9" in text  # the banner is plain text in its cell
    assert "\u27e6U+202E\u27e7" in text  # Trojan Source made visible
    pictures = page.locator(f"{FORMGRADER_STUDENT} img")
    assert pictures.count() == 1 and pictures.first.evaluate("i => i.naturalWidth") == 1
    page.screenshot(path=shots / "hostile-1-formgrader.png")
    # the files beside her notebook were never copied, so the Formgrader serves none
    submission = href.rstrip("/").split("/")[-1]
    for name in attacks.ACTIVE_FILES:
        response = page.request.get(f"{url}/formgrader/submission/{submission}/{name}")
        assert response.status == 404, (name, response.status)


def test_the_feedback_of_a_hostile_notebook_is_inert(page, graded, shots):
    _, root, _ = graded
    folder = root / "feedback" / "mallory" / course.ASSIGNMENT
    assert sorted(p.name for p in folder.iterdir()) == ["lesson.html"]
    seen = watch(page)
    page.goto((folder / "lesson.html").as_uri())
    expect(page.locator("body")).to_contain_text("[PASS]")
    assert_inert(page, seen, "file://", FORMGRADER_STUDENT)
    assert_tex_inert(page)
    assert "Score: 9 / 9" in page.locator("body").inner_text()
    page.screenshot(path=shots / "hostile-2-feedback.png")


def test_the_autograded_notebook_in_jupyterlab_is_inert(page, graded, shots):
    url, root, _ = graded
    seen = watch(page)
    path = "course/autograded/mallory/attention/lesson.ipynb"
    page.goto(f"{url}/lab/workspaces/hostile/tree/{path}?reset")
    page.wait_for_selector(".jp-Notebook .jp-Cell")
    expect(page.locator(LAB_STUDENT).first).to_be_visible(timeout=60_000)
    page.wait_for_timeout(3000)  # every cell rendered (windowing is off)
    assert page.evaluate("1 + 1") == 2  # the tab is alive: the deep TeX did not crash it
    expect(page.locator(LAB_STUDENT, has_text="Deep:")).to_be_visible()
    # JupyterLab decorates rendered markdown with classes and ids of its own (heading
    # anchors, MathJax): the stored cells hold none, and nothing may be positioned.
    assert_inert(page, seen, url, LAB_STUDENT, check_attributes=False)
    stored = nbformat.read(root / path.split("/", 1)[1], as_version=4)
    for cell in stored.cells:
        if cell.cell_type == "markdown":
            assert not re.search(r"\s(class|style|id|on\w+)=", cell.source), cell.source
    page.screenshot(path=shots / "hostile-3-jupyterlab.png")


def test_the_summary_names_the_trojan_source(graded):
    *_, report = graded
    assert re.search(r"mallory \(cell #\d+ \(code\) holds invisible or bidirectional "
                     r"characters.*U\+202E RIGHT-TO-LEFT OVERRIDE", report.summary())
