#!/usr/bin/env python3
"""tfdescribe.py FILE: prints the JSON that `tensorfmt inspect --json --sha256 FILE` must
print, computed by NumPy alone. Same as `tfcheck.py describe FILE` (see tfcheck.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tfcheck  # noqa: E402

if __name__ == "__main__":
    sys.exit(tfcheck.main(["describe", *sys.argv[1:]]))
