import sys
from pathlib import Path

# creation.py is a script at the repo root, not an installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: whole-pipeline checks that take more than a few seconds")
