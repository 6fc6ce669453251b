"""Where the test suite's files are, for tests in any room (tests/<room>/test_x.py): the tests folder, its shared
recordings (tests/data) and the repository root (for bench/ scripts and the README; never put it on sys.path:
its ubatch/ has no built extension when the suite runs against an install)."""
import os

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(TESTS, "data")
ROOT = os.path.dirname(TESTS)
