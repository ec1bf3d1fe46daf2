"""The set-up a newcomer and CI rely on."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def pins(lines):
    out = {}
    for line in lines:
        line = line.split("#")[0].strip().lstrip("- ").strip()
        if "==" in line:
            name, version = line.split("==")
            out[name.lower()] = version
    return out


def test_environment_yml_agrees_with_requirements():
    req = pins((ROOT / "requirements.txt").read_text().splitlines())
    env_text = (ROOT / "environment.yml").read_text()
    pip_section = env_text.split("- pip:")[1].splitlines()
    assert pins(pip_section) == req
    assert re.search(r"^\s*- python=3\.11\s*$", env_text, re.M)


def test_design_packages_pinned():
    req = pins((ROOT / "requirements.txt").read_text().splitlines())
    assert req["torch"] == "2.13.0"  # anything else pulls GBs of CUDA
    for name in ("numpy", "jupyter", "nbgrader", "matplotlib", "nbval", "ruff", "hypothesis"):
        assert name in req, name


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme and "make lesson" in readme
    assert re.search(r"^make test$", (ROOT / ".ci" / "run").read_text(), re.M)


def test_makefile_targets_exist():
    makefile = (ROOT / "Makefile").read_text()
    for target in ("lesson", "test", "lint", "bench", "data"):
        assert re.search(rf"^{target}:", makefile, re.M), target
