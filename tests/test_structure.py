"""The course's structure: one spec per lesson, an engine that names no lesson, no cycle.

- No import cycle among the course's modules (``src/``, ``verify.py``), counting
  every import, the ones inside functions too.
- No lesson fact outside its spec: the engine and its faces (the files of
  ``ENGINE``) hold no string naming a lesson's cell (a step cell, a check cell, a
  set-up cell), a check, one of its tensors or its notebooks, docstrings and
  comments aside. ``query``, ``key`` and ``value`` are English words as well as
  tensor names: they are left out of the search, and the spec's own names with an
  underscore (``attention_scores`` ...) stand for them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import verify
from src import lessons

ROOT = Path(__file__).resolve().parent.parent
#: The engine and its faces: what must read every lesson fact from a spec.
ENGINE = sorted([*(ROOT / "src" / "checks").glob("*.py"), ROOT / "src" / "road.py",
                 ROOT / "src" / "live.py", ROOT / "src" / "replay.py", ROOT / "src" / "spec.py",
                 ROOT / "src" / "grading.py", ROOT / "src" / "course.py",
                 ROOT / "src" / "release.py", ROOT / "src" / "layout.py",
                 ROOT / "src" / "sandbox.py", ROOT / "verify.py",
                 ROOT / "nbgrader_config.py", *(ROOT / "benchmarks").glob("*.py")])
#: Words that are English (or the course's own name, "attention", which prefixes its
#: folders and the nbgrader course id) as well as a lesson's names: left out of the search.
#: "softmax" is the function's name and the concept's: a data key named after it
#: ("softmax.") is searched for on its own.
ENGLISH = {"query", "key", "value", "x", "lesson", "attention", "softmax"}


def _module_of(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    return ".".join(rel.parts).removesuffix(".__init__")


def imports() -> dict[str, set[str]]:
    """{module: the course's modules it imports} for src/ and verify.py."""
    files = [*(ROOT / "src").rglob("*.py"), ROOT / "verify.py"]
    known = {_module_of(p) for p in files}
    graph = {}
    for path in files:
        me, found = _module_of(path), set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                subs = [f"{node.module}.{a.name}" for a in node.names]
                # (from a package import its submodule: that submodule, not the package)
                names = subs if all(n in known for n in subs) else [node.module, *subs]
            found |= {n for n in names if n in known and n != me}
        graph[me] = found
    return graph


def cycles(graph) -> list[list[str]]:
    """Every cycle of the graph, each once (from its smallest module)."""
    out = []

    def walk(start, node, path):
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                out.append(path + [start])
            elif nxt > start and nxt not in path:
                walk(start, nxt, path + [nxt])

    for start in sorted(graph):
        walk(start, start, [start])
    return out


def test_no_import_cycle():
    graph = imports()
    assert "src.road" in graph and "src.lessons.attention" in graph
    assert cycles(graph) == []


def test_the_engine_imports_no_lesson_but_through_the_registry():
    """The engine reaches a lesson through src.lessons (the registry) only."""
    graph = imports()
    for module, found in graph.items():
        if module.startswith(("src.lessons", "verify")):
            continue
        assert not {f for f in found if f.startswith("src.lessons.")}, module


def lesson_words() -> set[str]:
    words = set()
    for spec in lessons.LESSONS.values():
        words |= {spec.name, spec.notebook, f"{spec.notebook}.ipynb", spec.source,
                  *spec.setup_cells}
        for step in spec.steps:
            words |= {step.cell, step.test, *step.names, *step.inputs}
            for check in step.checks:
                words |= {check.name, *check.all}
    return words - ENGLISH


def _strings(tree):
    """String constants of a module but its docstrings."""
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and n.body and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docs:
            yield node


def test_no_lesson_fact_outside_its_spec():
    import re

    words = lesson_words()
    assert {"cell4_projections", "attention_scores", "lesson.ipynb"} <= words
    pattern = re.compile(r"(?<![A-Za-z0-9_])(%s)(?![A-Za-z0-9_])" % "|".join(
        sorted(map(re.escape, words), key=len, reverse=True)))
    found = []
    for path in ENGINE:
        for node in _strings(ast.parse(path.read_text(encoding="utf-8"))):
            hits = [m.group(0) for m in pattern.finditer(node.value)]
            hits += re.findall(r"(?<![A-Za-z0-9_])softmax\.\w*", node.value)  # a data key
            found += [f"{path.relative_to(ROOT)}:{node.lineno}: {h!r} in {node.value[:60]!r}"
                      for h in hits]
    assert found == []


def test_verify_faces_every_check_of_the_spec():
    spec = verify.LESSON
    for check in spec.checks.values():
        fn = getattr(verify, f"check_{check.name}")
        assert fn.__doc__ == check.doc and fn.__name__ == f"check_{check.name}"
    assert verify.GRADE_CELLS == spec.grade_cells


def test_every_lesson_has_its_checks_and_ids_of_its_own():
    """Check names and cell ids are unique across the course (verify.check_<name> and the
    lookup by cell id serve every lesson); each lesson's checks are faced by verify."""
    names = [c for spec in lessons.LESSONS.values() for c in spec.checks]
    cells = [c for spec in lessons.LESSONS.values()
             for c in (*spec.setup_cells, *(i for s in spec.steps for i in (s.cell, s.test)))]
    assert len(names) == len(set(names)) and len(cells) == len(set(cells))
    for spec in lessons.LESSONS.values():
        assert lessons.lesson(spec.name) is spec
        for check in spec.checks.values():
            assert getattr(verify, f"check_{check.name}").__doc__ == check.doc
            assert lessons.by_check(check.name) == (spec, check)
        for step in spec.steps:
            assert lessons.by_cell(step.test) == (spec, step)


def test_the_hub_names_the_lessons_assignment_and_notebooks():
    """hub/classroom.py is imported by JupyterHub's own process, which never imports the
    course's engine: it keeps its own copies of these names, held equal to the spec's here."""
    from hub import classroom
    from src import layout

    assert classroom.ASSIGNMENT == layout.ASSIGNMENT
    assert classroom.ASSIGNMENTS == layout.ASSIGNMENTS
    for name in layout.ASSIGNMENTS:
        assert {layout.source_of(name).name, f"{layout.notebook_of(name)}.ipynb"} <= set(
            classroom.COURSE_FILES)
