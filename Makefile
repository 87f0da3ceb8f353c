# Two commands do all the set-up: `make lab` and `make test` (see README.md); `make check`
# is a contributor's quick loop.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
HOST   ?= 127.0.0.1
PORT   ?= 8888
# JupyterLab refuses to run as root (containers, CI) without saying so explicitly.
LAB_FLAGS := --ServerApp.ip=$(HOST) --ServerApp.port=$(PORT) $(if $(filter 0,$(shell id -u)),--allow-root,)
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.ipynb)) notebooks/talk.ipynb
# Notebooks two at a time (each in its own kernel, its cells in order): many cells wait.
NBVAL  := $(BIN)/python -m pytest --nbval --nbval-current-env \
          --nbval-sanitize-with notebooks/sanitize.cfg --timeout=600 -p no:cacheprovider \
          -n 2 --dist loadfile
# Unit tests three at a time: most of them wait for a timeout, a deadline or a process.
UNIT_WORKERS ?= 3

.PHONY: setup lab test check lint unit soak notebooks notebooks-fork notebooks-forkserver \
        notebooks-spawn browser chromium binder-check binder-build-check outputs imgs present \
        talk dry-run slides bench bench-notebooks clean

# jupyterlab/overrides.json: JupyterLab's defaults for this lab (no news pop-up over a slide).
# Installs only when the pins change: a second `make test` goes straight to the tests.
# requirements-audit.txt holds libraries only notebook 10 audits: --no-deps keeps torchvision
# (and a second torch) out; check_requirements.py is `pip check` naming their known gaps.
$(STAMP): requirements.txt requirements-audit.txt pyproject.toml jupyterlab/overrides.json
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24"
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	$(BIN)/python -m pip install --quiet --no-deps -r requirements-audit.txt
	$(BIN)/python scripts/check_requirements.py
	mkdir -p $(VENV)/share/jupyter/lab/settings
	cp jupyterlab/overrides.json $(VENV)/share/jupyter/lab/settings/overrides.json
	touch $@

setup: $(STAMP)

lab: $(STAMP)
	$(BIN)/jupyter lab $(LAB_FLAGS) notebooks/00_index.ipynb

# Every stage, three at a time, longest first, binder-build-check beside the set-up
# (tests/stages.py), then each stage's time and CPU time.
test:
	$(PYTHON) tests/stages.py

lint: $(STAMP)
	$(BIN)/ruff check .

# Lint and the unit tests that start no process group, interpreter or notebook, sweep no
# seeds and repeat nothing (marks: tests/conftest.py): minutes, for the loop of editing
# and checking. `make test` runs every check.
QUICK := not distributed and not subprocesses and not slow and not soak
check: lint
	$(BIN)/python -m pytest tests --ignore=tests/browser -m "$(QUICK)" -n 2 -q

unit: $(STAMP)
	$(BIN)/python -m pytest tests --ignore=tests/browser -m "not soak" -n $(UNIT_WORKERS) \
	    --dist loadfile

# Tests that repeat a run many times, some beside busy loops: each is bounded by its count
# of runs, and each run by its own deadline, so the whole may take longer than one test's
# usual 300 s on a busy machine.
soak: $(STAMP)
	$(BIN)/python -m pytest tests --ignore=tests/browser -m soak --timeout 1800

# The same stored outputs must come out under every start method a learner may have:
# fork (Linux), forkserver (Linux default from Python 3.14), spawn (macOS, Windows).
notebooks: notebooks-fork notebooks-forkserver notebooks-spawn

notebooks-fork: $(STAMP)
	TALK_START_METHOD=fork $(NBVAL) $(NOTEBOOKS)

notebooks-forkserver: $(STAMP)
	TALK_START_METHOD=forkserver $(NBVAL) $(NOTEBOOKS)

notebooks-spawn: $(STAMP)
	TALK_START_METHOD=spawn $(NBVAL) $(NOTEBOOKS)

chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium >/dev/null; \
	  elif command -v sudo >/dev/null 2>&1; then sudo apt-get update -qq && sudo apt-get install -y -qq chromium >/dev/null; \
	  else echo "!!! chromium is missing and cannot be installed without root: browser tests will be SKIPPED !!!"; fi; }

browser: $(STAMP) chromium
	$(BIN)/python -m pytest tests/browser

# Every notebook top to bottom as a Binder visitor's pod runs it (not root, 2 GiB, a 64 MiB
# /dev/shm, one CPU, its own /tmp; built with a cgroup and a mount namespace as root):
# each one's time and peak memory -> benchmarks/results/binder_check.md. Not part of `test`.
binder-check: $(STAMP)
	$(BIN)/python -m benchmarks.binder_check $(NB)

# repo2docker's build of binder/ replayed in a temporary venv (its server's pins, then
# binder/environment.yml's pip section, then binder/postBuild); the lab must start with RISE
# and widgets, the environment stay within 1.7 GB (its size and largest packages are printed).
# Needs Python 3.11 and PyPI, not .venv; leaves nothing but pip's cache.
binder-build-check:
	$(PYTHON) scripts/binder_build_check.py

# Re-executes notebooks top to bottom and stores the outputs (NB=notebooks/02_….ipynb for one).
outputs: $(STAMP)
	TALK_START_METHOD=fork $(BIN)/python scripts/execute_notebooks.py $(or $(NB),notebooks/*.ipynb)

imgs: $(STAMP)
	$(BIN)/python -m talk_helpers.diagrams imgs/

# Presenting with RISE saves the notebook it shows: present from a copy (trusted, so that
# its stored outputs render), fitted to 1280x720 with the decks' slide breaks; the talk's
# copy has no outputs (each answer appears when its cell runs). RISE's slide show is an app
# of its own, built on JupyterLab 4.0: the lab's extensions (built for 4.6) fail to load
# into it, so it gets only the talk's steps, plain JavaScript (RISE_FLAGS, fit_talk.py).
# `make talk`: every kernel (a restart too) starts with the talk's start method and
# definition cells (IPYTHONDIR: talk_helpers.notebook.talk.prepare_kernel).
RISE_FLAGS := --ServerApp.root_dir=build/talk --RiseApp.labextensions_path=$(CURDIR)/build/talk/extensions \
	--LabApp.extra_labextensions_path=$(CURDIR)/build/talk/extensions
RISE_COPY := rm -rf build/talk && mkdir -p build/talk && cp -r notebooks imgs build/talk/ \
	&& cp -r scripts/slides_template/rise-extension build/talk/extensions \
	&& cp -r scripts/slides_template/ipython build/talk/ipython
present: $(STAMP)
	$(RISE_COPY)
	$(BIN)/python scripts/fit_talk.py build/talk/notebooks
	$(BIN)/jupyter trust build/talk/notebooks/*.ipynb
	$(BIN)/jupyter lab $(LAB_FLAGS) $(RISE_FLAGS) build/talk/notebooks/00_index.ipynb

# The talk in RISE, straight into the slide show on a fresh kernel: its first slide's cell,
# start_talk(), starts the workers and two ranks. Shift+Enter is the one key: each press
# shows the next cell and runs it (docs/talk.md).
talk: $(STAMP)
	$(RISE_COPY)
	$(BIN)/python scripts/fit_talk.py build/talk/notebooks/talk.ipynb
	$(BIN)/jupyter trust build/talk/notebooks/talk.ipynb
	@echo "Shift+Enter steps through the talk; the second press runs start_talk() (docs/talk.md)."
	IPYTHONDIR=$(CURDIR)/build/talk/ipython $(BIN)/jupyter lab $(LAB_FLAGS) $(RISE_FLAGS) --ServerApp.default_url=/rise/notebooks/talk.ipynb

# Every cell of the talk on four paths (fork, forkserver, spawn as on Windows, the talk's
# own path on a Mac), side by side, with what the room sees where a demo is slow.
dry-run: $(STAMP)
	$(BIN)/python scripts/dry_run_talk.py

# build/slides/talk.slides.html (the talk) and NN_name.slides.html (every notebook), offline,
# fitted to 1280x720 in Chromium (without it: a clear stop naming `make chromium`).
slides: $(STAMP)
	$(BIN)/python scripts/build_slides.py build/slides

bench: $(STAMP)
	$(BIN)/python -m benchmarks.loader_throughput

# Per-cell times under fork, forkserver and spawn -> benchmarks/results/notebook_times.md
# (REPEAT=3: the median of three runs of each notebook, with the spread)
bench-notebooks: $(STAMP)
	$(BIN)/python -m benchmarks.notebook_times --repeat $(or $(REPEAT),1)

clean:
	rm -rf build $(VENV)
