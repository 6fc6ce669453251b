PY ?= python3

.PHONY: install build test bench clean asan fuzz

install:
	$(PY) -m pip install '.[test]'

# in-place build for development (a lock keeps parallel builds from clobbering the .so); with ccache on
# the PATH only the C files that changed (or whose headers changed) are compiled again
CCACHE := $(shell command -v ccache 2>/dev/null)
build:
	flock /tmp/ubatch-build.lock env $(if $(CCACHE),CC="ccache gcc") $(PY) setup.py -q build_ext --inplace --force -j 2

test: build
	$(PY) -m pytest -q tests

# the whole test suite against an ASan+UBSan build made in a scratch copy (build/asan), reduced hypothesis profile
asan:
	PY=$(PY) .ci/asan

# the fuzz tests with the long hypothesis profile (and the full 100,000-cycle leak test)
fuzz: build
	HYPOTHESIS_PROFILE=fuzz $(PY) -m pytest -q -p no:cacheprovider tests/*/test_fuzz_*.py tests/batch/test_threads.py tests/batch/test_lifetime.py tests/batch/test_limits.py

bench:
	$(PY) -m ubatch bench --quick --out bench/results
	$(PY) bench/bench_split.py

clean:
	rm -rf build dist *.egg-info ubatch/_native*.so ubatch/_native.c .pytest_cache .hypothesis
	find . -name __pycache__ -type d -exec rm -rf {} +
