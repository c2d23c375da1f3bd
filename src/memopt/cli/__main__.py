"""``python -m memopt.cli``."""

import sys

from memopt.cli import main

sys.exit(main())
