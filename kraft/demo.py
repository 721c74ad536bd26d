"""`python -m kraft.demo`: the command DESIGN 1.1 named before the demo moved to
kraft/local/demo.py (issue 24); kept so that scripts which run it still work."""

from __future__ import annotations

import sys

from kraft.local.demo import main

if __name__ == "__main__":
    sys.exit(main())
