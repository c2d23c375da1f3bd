"""``python -m memopt``: the ``memopt`` command."""

import sys

from memopt.cli import main

sys.exit(main())
