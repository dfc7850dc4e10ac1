"""Make the naive references (losses_naive.py) importable under any pytest import mode (incl. importlib)."""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
