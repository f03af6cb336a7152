import sys
from pathlib import Path

# The Python package lives in python/; tests use it from the checkout.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
