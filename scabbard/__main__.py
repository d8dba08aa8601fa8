"""``python -m scabbard`` = the ``scabbard`` command (how the Controller spawns engines)."""

import sys

from scabbard.cli import main

sys.exit(main())
