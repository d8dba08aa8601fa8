"""``python -m scabbard.cli`` = the ``scabbard`` command."""

import sys

from scabbard.cli import main

sys.exit(main())
