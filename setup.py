from setuptools import setup

setup(cffi_modules=["ubatch/_build_ffi.py:ffibuilder"])
