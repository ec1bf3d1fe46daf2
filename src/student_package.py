"""The student's package: the folder a student is given, which installs and starts on its own.

``python -m src.student_package`` (``make student``) writes
``course/student/attention-course/`` (``--out DIR``: elsewhere):

    lesson.ipynb, multihead.ipynb   the student notebooks, generated from the references
                                    exactly as `make release` generates them (no solutions)
    README.md                       install, `jupyter lab`, what the check cells do and
                                    what ships and why
    requirements.txt                only what a student needs, pinned as the course's own
                                    requirements.txt pins it (torch==2.13.0 always)
    verify.py, src/...              the checking code the notebooks run, and nothing else
    data/...                        the data files the notebooks load

What ships beside the notebooks is found by running them, not listed by hand: a fresh
Python runs every code cell of both student notebooks in an IPython shell (step cells
raise NotImplementedError, as they do for a student who has not started; the check cells
run on those stubs), then ``python verify.py NOTEBOOK --json`` on each, and records which
of the course's modules were imported and which files under data/ were opened. No
reference notebook, no complete_* file and no instructor tool (release, grading, the hub)
ships.

``python -m src.student_package --work DIR`` (``make lesson``) makes a student's work
folder from the package the first time only: when DIR exists it is left as it is, so a
student's notebooks are never overwritten. ``make release`` never writes there (it writes
the repository's own lesson.ipynb and course/).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from src.layout import ASSIGNMENTS, ROOT, course_dir, notebook_of, source_of

NAME = "attention-course"
#: Where `make lesson` opens JupyterLab: a student's own work folder (git-ignored), never the
#: repository's root nor course/.
WORK_DIR = ROOT / "student"
#: The first line of the package's README: how a folder is known to be a package this module
#: wrote (it replaces only such a folder).
TITLE = "# Attention, hands on: the student's package"

#: What a student needs that running the notebooks does not import: JupyterLab and its
#: kernel to open them, and threadpoolctl, which src/attention.py imports only for inputs
#: larger than the lessons' (its threaded path).
NEEDED_TO_RUN = ("jupyterlab", "ipykernel", "threadpoolctl")

_RECORDER = r'''
import json, os, sys
root, out = sys.argv[1], sys.argv[2]
notebooks = sys.argv[3:]
opened = set()

def hook(event, args):
    if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.path.realpath(os.fsdecode(args[0]))
        if path.startswith(root + os.sep):
            opened.add(os.path.relpath(path, root))

sys.addaudithook(hook)
import matplotlib
matplotlib.use("Agg")
from IPython.core.interactiveshell import InteractiveShell

shell = InteractiveShell.instance()
for name in notebooks:
    with open(name, encoding="utf-8") as f:
        nb = json.load(f)
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            shell.run_cell("".join(cell["source"]), store_history=True)
import verify

for name in notebooks:
    try:
        verify.main([name, "--json"])
    except SystemExit:
        pass
# (the course's own files: a .venv inside the checkout is the installed packages')
venv = {os.path.realpath(p) + os.sep for p in (sys.prefix, sys.base_prefix)}
files = sorted({os.path.relpath(os.path.realpath(m.__file__), root)
                for m in list(sys.modules.values())
                if getattr(m, "__file__", None)
                and os.path.realpath(m.__file__).startswith(root + os.sep)
                and not os.path.realpath(m.__file__).startswith(tuple(venv))
                and "site-packages" not in m.__file__})
import importlib.metadata as md

dists = md.packages_distributions()
used = sorted({d for m in list(sys.modules) if "." not in m for d in dists.get(m, [])})
with open(out, "w", encoding="utf-8") as f:
    json.dump({"files": files, "data": sorted(p for p in opened if p.startswith("data/")),
               "distributions": used}, f)
'''


class PackageError(Exception):
    """A refusal, with a message for the person who ran the command."""


def student_notebooks() -> dict[str, str]:
    """{file name: text} of each lesson's student notebook, generated from its reference as
    `make release` generates it (never the repository's copy, which someone may have
    edited)."""
    from src import release

    return {f"{notebook_of(a)}.ipynb": release.dumps(release.generate(
        release.read(source_of(a)), source_of(a).name)) for a in ASSIGNMENTS}


def record(notebooks: dict[str, str], python: str = sys.executable) -> dict:
    """Run ``notebooks`` ({name: text}) in a fresh Python, from a temporary folder, with
    the repository on its path; return {"files": course files imported (.py, relative),
    "data": data files opened, "distributions": installed distributions imported}."""
    with tempfile.TemporaryDirectory(prefix="student-package-") as tmp:
        for name, text in notebooks.items():
            (Path(tmp) / name).write_text(text, encoding="utf-8")
        out = Path(tmp) / "record.json"
        env = dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg",
                   PYTHONDONTWRITEBYTECODE="1")
        proc = subprocess.run([python, "-c", _RECORDER, str(ROOT), str(out), *notebooks],
                              cwd=tmp, env=env, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0 or not out.exists():
            raise PackageError("running the student notebooks to find what they import "
                               f"failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
        return json.loads(out.read_text(encoding="utf-8"))


def pins(text: str) -> dict[str, str]:
    """{distribution name, lowercase with '-': version} of a requirements file's pins."""
    found = {}
    for line in text.splitlines():
        m = re.match(r"^\s*([A-Za-z0-9_.-]+)\s*==\s*([^\s#;]+)", line)
        if m:
            found[m.group(1).lower().replace("_", "-")] = m.group(2)
    return found


def requirements(distributions) -> str:
    """The package's requirements.txt: each course requirement the notebooks imported, and
    NEEDED_TO_RUN, pinned as the course's requirements.txt pins them."""
    course = pins((ROOT / "requirements.txt").read_text(encoding="utf-8"))
    used = {d.lower().replace("_", "-") for d in distributions}
    names = [n for n in course if n in used or n in NEEDED_TO_RUN]
    missing = [n for n in NEEDED_TO_RUN if n not in course]
    if missing or "torch" not in names:
        raise PackageError(f"requirements.txt does not pin {missing or ['torch']}")
    lines = ["# What the lessons need, pinned as the course's own requirements.txt.",
             "# torch is pinned. On Linux, PyPI's torch brings CUDA libraries (GBs); for the",
             "# CPU build, install with: pip install -r requirements.txt "
             "--extra-index-url https://download.pytorch.org/whl/cpu"]
    return "\n".join(lines + [f"{n}=={course[n]}" for n in names]) + "\n"


def readme(files, data) -> str:
    """The package's README.md, saying exactly what ships (``files``, ``data``)."""
    modules = ", ".join(f"`{f}`" for f in files if f.startswith("src/"))
    data_list = ", ".join(f"`{f}`" for f in data)
    return f"""{TITLE}

Two Jupyter notebooks on transformer attention: `lesson.ipynb` (scaled dot-product
attention, step by step) and `multihead.ipynb` (multi-head and causal attention).

## Install and start

You need Python 3.11. In this folder:

```bash
python3.11 -m venv .venv
.venv/bin/pip install -r requirements.txt   # Windows: .venv\\Scripts\\pip
.venv/bin/jupyter lab                       # then open lesson.ipynb
```

On Linux, PyPI's torch comes with CUDA libraries (several GB); for the CPU build,
add `--extra-index-url https://download.pytorch.org/whl/cpu` to the pip line. Once
installed, everything runs offline and gives the same numbers on every machine.

## How you work

Each lesson has four step cells (Cells 4 to 7). Each starts with the line
`raise NotImplementedError("Your turn: ...")`: replace it with your code and run the
cell. Below it a hint opens on click (a nudge first, then a walk through the shapes),
and a locked **check cell** gives your points. When something is off, the check names
the mistake, what it saw, the likely cause and what to try next, and from Cell 5 on it
draws your attention pattern. Until you write a step, its check says the cell still
holds its stub, with 0 points.

The check judges the code you last ran *in the step cell itself*: code typed into
another cell does not count. It runs that code again on its own, on the lesson's right
inputs, so a slip in an earlier cell never costs you twice. To check a whole saved
notebook from a shell: `.venv/bin/python verify.py lesson.ipynb`.

## What ships, and why

- `lesson.ipynb`, `multihead.ipynb`: the notebooks you fill in. No solution is in
  their step cells or anywhere else in this folder (only lesson 2's last hint, which you
  open on purpose, writes out the lines).
- `verify.py` and {modules}: the checking code the check cells import and run in your
  own kernel, and the data loading and figures of the set-up cells. They are here so
  that the live check works on your machine without the course's repository. They hold
  each lesson's formulas and its catalogue of common mistakes: the formulas are public
  (they are in the lesson's text). Your graded run does not use your copy: grading runs
  each step cell again in the course's own copy, and a step cell that calls the
  course's code instead of computing the step itself earns nothing for it.
- {data_list}: the sentence's embeddings and vocabulary, the projection and output
  layers, and the trained heads the last cells show.
- `requirements.txt`: only what the notebooks need, pinned to the versions the course
  is tested with.
"""


def _is_package(path: Path) -> bool:
    readme_file = path / "README.md"
    return readme_file.is_file() and readme_file.read_text(
        encoding="utf-8", errors="replace").startswith(TITLE)


def build(out: Path, python: str = sys.executable, recorded: dict | None = None) -> dict:
    """Write the package into ``out`` (empty, absent, or a package this module wrote, which
    is replaced); return what was recorded (``recorded`` skips the recording)."""
    out = Path(out).resolve()
    if out.exists() and any(out.iterdir()) and not _is_package(out):
        raise PackageError(f"{out} exists and is not a student package this command wrote: "
                           "it was left untouched; give another OUT=")
    if out in (ROOT, course_dir()) or ROOT.is_relative_to(out):
        raise PackageError(f"refusing to write the package into {out}")
    notebooks = student_notebooks()
    recorded = recorded or record(notebooks, python)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for name, text in notebooks.items():
        (out / name).write_text(text, encoding="utf-8")
    for rel in recorded["files"] + recorded["data"]:
        if rel.startswith(("src/", "data/")) or rel == "verify.py":
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / rel, out / rel)
    (out / "requirements.txt").write_text(requirements(recorded["distributions"]),
                                          encoding="utf-8")
    (out / "README.md").write_text(readme(recorded["files"], recorded["data"]),
                                   encoding="utf-8")
    return recorded


def work_folder(path: Path = WORK_DIR, recorded: dict | None = None) -> str:
    """Make the student's work folder ``path`` from the package the first time; when it
    exists, leave it as it is. Return what happened, in words (``recorded``: as for
    :func:`build`)."""
    path = Path(path).resolve()
    if path in (ROOT, course_dir()) or path.is_relative_to(course_dir()):
        raise PackageError(f"{path} is the course's own tree, not a student's work folder")
    if path.exists():
        return f"{path}: your work folder, opened as it is"
    build(path, recorded=recorded)
    return f"{path}: your work folder, made from the student package"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help=f"where to write the package (default: course/student/{NAME})")
    parser.add_argument("--work", type=Path, default=None,
                        help="make a student's work folder from the package, only if absent")
    args = parser.parse_args(argv)
    try:
        if args.work is not None:
            print(work_folder(args.work))
        else:
            out = args.out or course_dir() / "student" / NAME
            recorded = build(out)
            print(f"student package written to {out}: {len(recorded['files'])} course files, "
                  f"{len(recorded['data'])} data files")
    except PackageError as exc:
        print(f"student package: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
