"""``python -m memopt``: the ``memopt`` command."""

from memopt.cli import console

console()
