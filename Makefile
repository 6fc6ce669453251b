PY ?= python3

.PHONY: install build test bench clean

install:
	$(PY) -m pip install '.[test]'

# in-place build for development (a lock keeps parallel builds from clobbering the .so)
build:
	flock /tmp/ubatch-build.lock $(PY) setup.py -q build_ext --inplace

test:
	$(PY) -m pytest -q

bench:
	$(PY) -m ubatch bench --quick --out bench/results
	$(PY) bench/bench_split.py

clean:
	rm -rf build dist *.egg-info ubatch/_native*.so ubatch/_native.c .pytest_cache .hypothesis
	find . -name __pycache__ -type d -exec rm -rf {} +
