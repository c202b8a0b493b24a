# sparseeval: two commands on a fresh machine.
#   make run    install into .venv, then run the whole pipeline on the embedded synthetic leaderboard
#   make test   install into .venv (with test extras), then ruff, import-linter and the whole test suite
#   make test-fast   ruff + the tests not marked slow (under a minute: the inner loop)
# torch is installed first and pinned: an unpinned torch pulled in by another package would be a
# multi-GB CUDA build.

VENV    ?= .venv
PY      := $(VENV)/bin/python
TORCH   ?= torch==2.13.0
export DAGSTER_HOME := $(CURDIR)/.dagster_home
export SPARSEEVAL_DATA_DIR ?= $(CURDIR)/data
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: install run test test-fast lint predictors ui mlflow-ui serve serve-stop serve-status bench-serve clean \
	bench-accuracy bench-speed bench-ingest bench-coverage bench-second-stage bench-frontier-oracle bench-refresh bench-simulate bench-ui bench-sql-start \
	bench-hub-refresh mutants bench-days settings-table

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed

$(DAGSTER_HOME)/dagster.yaml: pipelines/dagster.yaml
	mkdir -p $(DAGSTER_HOME)
	cp pipelines/dagster.yaml $@

run: install $(DAGSTER_HOME)/dagster.yaml
	$(PY) -m pipelines.run_all

# --durations: the slowest tests' seconds in every run's output (.ci/run's included), where a test that
# grew slow shows without a timed assertion
test: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/pytest -n 2 --dist loadfile --durations=25

test-fast: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/pytest -m "not slow" -q -n 2 --ignore=tests/test_pipeline.py

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

# docs/settings.md: the settings tables, regenerated from sparseeval/core/settings.py (tests/test_settings_home.py checks them)
settings-table: install
	$(PY) -m sparseeval.core.settings_table docs/settings.md

# The Open LLM Leaderboard v1 predictors (one per benchmark, and the joint one), each a folder ready for
# `hf upload ORG/REPO predictors/openllm_v1/<benchmark> .`: predictor.json, state.safetensors, the model
# card (README.md) and the data's licence (CC BY-NC-SA 4.0, carried into every folder).
OPENLLM_V1 ?= ../shared/data/openllm_v1
OPENLLM_BENCHMARKS ?= arc gsm8k hellaswag mmlu truthfulqa
PREDICTORS_OUT ?= predictors/openllm_v1
OPENLLM_SOURCE := Open LLM Leaderboard v1 per-item results of ~4,000-5,000 real models, a subset of each \
benchmark's items, from metabench (Kipnis et al., 2024; github.com/adkipnis/metabench)
OPENLLM_LICENCE := CC-BY-NC-SA-4.0
predictors: install
	@set -e; for b in $(OPENLLM_BENCHMARKS) joint; do \
	  if [ $$b = joint ]; then args="--method sparseeval-joint --benchmark $$(echo $(OPENLLM_BENCHMARKS) | tr ' ' ,)"; \
	  else args="--benchmark $$b"; fi; \
	  $(VENV)/bin/sparseeval fit --data $(OPENLLM_V1) $$args --out $(PREDICTORS_OUT)/$$b \
	    --data-licence $(OPENLLM_LICENCE) --data-source "$(OPENLLM_SOURCE)"; \
	  $(VENV)/bin/sparseeval export --predictor $(PREDICTORS_OUT)/$$b --format model-card \
	    --repo ORG/sparseeval-openllm-v1-$$b --out $(PREDICTORS_OUT)/$$b/README.md; \
	  printf '%s\n' "The data this predictor was fitted on: $(OPENLLM_SOURCE)." \
	    "Licence: Creative Commons Attribution-NonCommercial-ShareAlike 4.0 International (CC BY-NC-SA 4.0)," \
	    "https://creativecommons.org/licenses/by-nc-sa/4.0/ ; the predictor is derived from it and shared under the same terms." \
	    > $(PREDICTORS_OUT)/$$b/LICENSE; \
	done

ui: install $(DAGSTER_HOME)/dagster.yaml
	$(VENV)/bin/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

mlflow-ui: install
	@echo "runs page: http://127.0.0.1:5000/#/experiments/1/runs?workflowType=machine_learning"
	MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false $(VENV)/bin/mlflow ui \
	  --backend-store-uri sqlite:///$(SPARSEEVAL_DATA_DIR)/mlflow.db \
	  --default-artifact-root $(SPARSEEVAL_DATA_DIR)/mlartifacts -h 127.0.0.1 -p 5000

# served mode (docs/deploy.md): Postgres, then the MLflow tracking server, Dagster code server, webserver
# and daemon under supervisord on 127.0.0.1; Ctrl-C or `make serve-stop` stops them all (runs drained);
# supervisorctl works on them: .venv/bin/supervisorctl -c data/serve/supervisord.conf status|restart NAME|tail -f NAME
serve: install
	$(PY) -m sparseeval.interfaces.serve start

serve-stop:
	$(PY) -m sparseeval.interfaces.serve stop

serve-status:
	$(PY) -m sparseeval.interfaces.serve status

bench-accuracy: install
	$(PY) bench/accuracy.py

bench-speed: install
	$(PY) bench/speed.py

bench-ingest: install
	$(PY) bench/ingest.py --scale 0.1

bench-coverage: install
	$(PY) bench/coverage.py

# the second stage (the design-based probe) against the anchors and its rivals, both protocols, v1 and v2 data
bench-second-stage: install
	$(PY) bench/second_stage.py --draws 10

bench-frontier-oracle: install
	$(PY) bench/frontier_oracle.py

bench-refresh: install
	$(PY) bench/refresh.py --quick

# a leaderboard's daily refresh replayed through run_all: day 1 (7,000 x 30,000) and day 2 (+100 models);
# BEFORE=<checkout of the previous code> runs it side by side
bench-days: install
	$(PY) bench/days.py $(if $(BEFORE),--before $(BEFORE)) --workdir $(SPARSEEVAL_DATA_DIR)/days

bench-hub-refresh: install
	$(PY) bench/hub_refresh.py

bench-simulate: install
	$(PY) bench/simulate.py --days 60 --root $(SPARSEEVAL_DATA_DIR)/simulation

# screenshots of the Dagster and MLflow UIs after `make run` (needs Debian's chromium) -> docs/screens/
bench-ui: install $(DAGSTER_HOME)/dagster.yaml
	$(PY) bench/ui_screens.py

bench-serve: install
	$(PY) bench/serve.py

bench-sql-start: install
	$(PY) bench/sql_start.py

# planted bugs, one at a time, against the tests that should catch each (bench/mutants.py)
mutants: install
	$(PY) bench/mutants.py

clean:
	rm -rf data .dagster_home
