# The whole command surface of the course. A newcomer needs two targets:
#   make lesson   set up .venv if needed and open lesson.ipynb in JupyterLab, in student/
#   make test     set up .venv if needed and run the whole test suite
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Jupyter refuses to start as root unless told to.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)
# pytest workers; the suite is dominated by kernel start-ups, which overlap well.
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: help venv lesson test test-road test-cohort lint bench bench-grade data train test-train \
	release reference grade feedback export clean hub hub-link test-hub \
	formgrader student test-package

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): requirements.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] >= (3, 11) else \
	  "expected Python >= 3.11 (nbgrader needs it), got " + sys.version.split()[0] + \
	  "; run: make PYTHON=/path/to/python3.11 ...")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "Installing the course's packages into $(VENV) (about 2 minutes the first time)..."
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	@touch $(STAMP)

venv: $(STAMP)  ## create .venv and install requirements.txt

# Validate without a kernel (attention_validate.py, switched on by jupyter_server_config.json).
LAB_FLAGS := --config=$(CURDIR)/jupyter_server_config.json $(ROOT_FLAG)

# A student's work folder: made from the student package the first time, never overwritten
# afterwards, and never written by `make release` (the instructor's tree is the repository).
WORK ?= student

lesson: $(STAMP)  ## open lesson.ipynb in JupyterLab in your work folder student/ (made from the student package if absent, else opened as it is; WORK=dir)
	$(PY) -m src.student_package --work $(WORK)
	cd $(WORK) && PYTHONPATH=$(CURDIR) $(CURDIR)/$(VENV)/bin/jupyter lab lesson.ipynb $(LAB_FLAGS)

formgrader: $(STAMP)  ## JupyterLab in the repository, the instructor's tree: Nbgrader > Formgrader reads nbgrader_config.py here
	PYTHONPATH=$(CURDIR) $(VENV)/bin/jupyter lab $(LAB_FLAGS)

student: $(STAMP)  ## the student package, what students are given: course/student/attention-course/ (OUT=dir)
	$(PY) -m src.student_package $(if $(OUT),--out $(OUT),)

test-package: $(STAMP)  ## the student package from an empty folder: a fresh venv, pip install -r requirements.txt, both notebooks run, jupyter lab started (~2 min)
	$(PY) -m pytest -p no:xdist tests/package -m package

test: $(STAMP)  ## lint, then run every test and both notebooks (offline)
	$(PY) -m ruff check .
	$(PY) -m src.release --check
	$(PY) -m pytest -n $(JOBS) --dist loadfile

test-road: $(STAMP)  ## every attempt of the corpora: the live check in a real kernel = grading
	$(PY) -m pytest -n 2 tests/road -m road

test-cohort: $(STAMP)  ## grade a class-sized hostile cohort for real (a few minutes)
	$(PY) -m pytest -p no:xdist tests/cohort -m cohort

# JupyterHub's proxy and the OpenID Connect provider of AUTH=oidc, from
# hub/package-lock.json into hub/node_modules (never global).
CHP := hub/node_modules/.bin/configurable-http-proxy
$(CHP): hub/package.json hub/package-lock.json
	@command -v npm >/dev/null || { echo "make hub: Node.js and npm are missing (JupyterHub's proxy runs on Node): apt-get install nodejs npm"; exit 2; }
	npm ci --prefix hub --no-audit --no-fund --loglevel=error
	@touch $(CHP)

STUDENTS ?= 3
PORT ?= 8000
HUB_DIR ?= /srv/attention-hub
HUB_PREFIX ?= att-
HUB_HOME ?= /home
HUB_IP ?= 127.0.0.1
IDLE_TIMEOUT ?= 3600
# Optional: CLASS_LIST=students.csv (id,name,email), SSL_CERT=cert.pem SSL_KEY=key.pem,
# HUB_URL=https://hub.example.org:8000 (for the links), HUB_ALLOW_HTTP=1 (TLS done in front).
# AUTH=oidc: an OpenID Connect provider (OIDC_ISSUER, OIDC_CLIENT_ID, OIDC_CLIENT_SECRET_FILE,
# OIDC_USERNAME_CLAIM; without OIDC_ISSUER this machine's, hub/oidc-provider.mjs, on
# OIDC_PORT); AUTH=lti13: LTI 1.3 launches (LTI_ISSUER, LTI_CLIENT_ID, LTI_AUTHORIZE_URL,
# LTI_JWKS_URL, LTI_USERNAME_KEY); INSTRUCTOR_LOGIN: the instructor's name there.
HUB_ARGS = --base $(HUB_DIR) --port $(PORT) --students $(STUDENTS) --prefix $(HUB_PREFIX) \
	--home-base $(HUB_HOME) --ip $(HUB_IP) --idle-timeout $(IDLE_TIMEOUT) \
	$(if $(CLASS_LIST),--class-list $(CLASS_LIST),) \
	$(if $(SSL_CERT),--ssl-cert $(SSL_CERT),) $(if $(SSL_KEY),--ssl-key $(SSL_KEY),) \
	$(if $(HUB_URL),--public-url $(HUB_URL),) $(if $(HUB_ALLOW_HTTP),--allow-http,) \
	$(if $(EXCHANGE),--exchange $(EXCHANGE),) $(if $(AUTH),--auth $(AUTH),) \
	$(if $(OIDC_ISSUER),--oidc-issuer $(OIDC_ISSUER),) $(if $(OIDC_PORT),--oidc-port $(OIDC_PORT),) \
	$(if $(OIDC_CLIENT_ID),--oidc-client-id $(OIDC_CLIENT_ID),) \
	$(if $(OIDC_CLIENT_SECRET_FILE),--oidc-client-secret-file $(OIDC_CLIENT_SECRET_FILE),) \
	$(if $(OIDC_USERNAME_CLAIM),--oidc-username-claim $(OIDC_USERNAME_CLAIM),) \
	$(if $(INSTRUCTOR_LOGIN),--instructor-login $(INSTRUCTOR_LOGIN),) \
	$(if $(LTI_ISSUER),--lti-issuer $(LTI_ISSUER),) $(if $(LTI_CLIENT_ID),--lti-client-id $(LTI_CLIENT_ID),) \
	$(if $(LTI_AUTHORIZE_URL),--lti-authorize-url $(LTI_AUTHORIZE_URL),) \
	$(if $(LTI_JWKS_URL),--lti-jwks-url $(LTI_JWKS_URL),) \
	$(if $(LTI_USERNAME_KEY),--lti-username-key $(LTI_USERNAME_KEY),)
# EXCHANGE=ngshare: the ngshare service in an environment of its own (hub/ngshare/venv) and
# ngshare-exchange without its dependencies (hub/ngshare/site-packages); docs/hub/ngshare.md.
NGSHARE := hub/ngshare/venv/.installed
$(NGSHARE): hub/requirements-ngshare.txt hub/requirements-ngshare-exchange.txt | $(STAMP)
	rm -rf hub/ngshare
	$(PY) -m venv hub/ngshare/venv
	hub/ngshare/venv/bin/python -m pip install --quiet --disable-pip-version-check -r hub/requirements-ngshare.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --target hub/ngshare/site-packages \
	  -r hub/requirements-ngshare-exchange.txt
	@touch $@

hub: $(STAMP) $(CHP) $(if $(filter ngshare,$(EXCHANGE)),$(NGSHARE),)  ## a real class on JupyterHub, as root (HUB_IP=127.0.0.1 PORT=8000, SSL_CERT/SSL_KEY, CLASS_LIST=csv or STUDENTS=3, IDLE_TIMEOUT=3600, EXCHANGE=ngshare, AUTH=oidc|lti13, HUB_DIR); Ctrl-C stops it
	$(PY) -m hub.classroom up $(HUB_ARGS)

hub-link: $(STAMP)  ## a new one-time first-login link for a class-list student (ID=...; same HUB_* settings as make hub)
	@test -n "$(ID)" || { echo "make hub-link: expected ID=<student id from the class list>"; exit 2; }
	$(PY) -m hub.classroom new-link $(ID) $(HUB_ARGS)

test-hub: $(STAMP) $(CHP) $(NGSHARE)  ## the class on JupyterHub end to end in Chromium (password, OpenID Connect, LTI 1.3 logins; ngshare; culling), and isolation (root; ~8 min)
	$(PY) -m pytest -p no:xdist tests/hub -m hub

lint: $(STAMP)  ## ruff (PEP 8, pyflakes, imports)
	$(PY) -m ruff check .

bench: $(STAMP)  ## speed and memory figures, as ratios against references
	$(PY) -m benchmarks.bench_attention
	$(PY) -m benchmarks.bench_lesson

bench-grade: $(STAMP)  ## 48 submissions graded without a kernel vs sequential nbgrader autograde; a looper's cost to its class (ARGS="--submissions N --jobs J")
	$(PY) -m benchmarks.bench_grade $(ARGS)
	$(PY) -m benchmarks.bench_isolation

data: $(STAMP)  ## regenerate data/ byte-identically (and data/SHA256SUMS)
	$(PY) -m src.data

# Not part of `make data`: float training differs in the last bits between CPUs, so the
# trained weights are checked by what their heads do (make test-train), not byte for byte.
train: $(STAMP)  ## train the tiny transformer (~15 s): data/trained_heads.npz, data/TRAINED_SHA256SUMS, train_loss.png
	$(PY) -m src.train

test-train: $(STAMP)  ## retrain into a temporary folder; its heads must do what the lesson states
	$(PY) -m pytest -p no:xdist tests/test_train.py -m train

release: $(STAMP)  ## lesson.ipynb and multihead.ipynb from their references (FORCE=1 replaces an edited one, keeping a copy), then both nbgrader releases in course/
	$(PY) -m src.release $(if $(FORCE),--force,)
	$(PY) -m src.course release

grade: $(STAMP)  ## autograde course/submitted/*/attention and */multihead without a kernel, step cells replayed in a sandbox (JOBS=N, TIMEOUT=s per step cell's replay, BUDGET=s per submission's, UNSAFE=1: no sandbox)
	$(if $(UNSAFE),ATTENTION_UNSAFE_GRADING=1,) $(PY) -m src.course grade --jobs $(JOBS) $(if $(TIMEOUT),--timeout $(TIMEOUT),) $(if $(BUDGET),--budget $(BUDGET),)

feedback: $(STAMP)  ## HTML feedback per student and assignment in course/feedback (hidden tests removed)
	$(PY) -m src.course feedback

export: $(STAMP)  ## write course/grades.csv
	$(PY) -m src.course export

reference: $(STAMP)  ## run complete_lesson.ipynb and complete_multihead.ipynb, store their outputs, regenerate the student notebooks
	$(PY) -m src.release --reference

clean:  ## remove caches (keeps .venv)
	rm -rf .pytest_cache .ruff_cache .hypothesis
	find . -name __pycache__ -not -path './$(VENV)/*' -prune -exec rm -rf {} +
