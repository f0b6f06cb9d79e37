# The two commands the README promises. Everything is installed into .venv and node_modules.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PORT ?= 8000

.PHONY: serve build test install install-test chromium bench lighthouse clean

serve: install
	$(PY) build.py --serve --port $(PORT)

build: install
	$(PY) build.py

test: install-test chromium
	$(PY) -m pytest -q

install: $(VENV)/.installed node_modules/.installed

install-test: install $(VENV)/.installed-test

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet .
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed
	$(PY) -m pip install --quiet ".[test]"
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

# Browser tests need Chromium; Playwright cannot download one here, so use Debian's.
chromium:
	@bash scripts/ensure-chromium.sh

bench: install-test chromium
	$(PY) bench/browser.py

# Lighthouse (desktop and mobile presets) against the built site, served as --serve does.
lighthouse: install-test chromium bench/node_modules/.installed
	$(PY) bench/lighthouse.py

bench/node_modules/.installed: bench/package.json bench/package-lock.json
	npm ci --prefix bench --no-audit --no-fund
	touch $@

clean:
	rm -rf dist .pytest_cache
