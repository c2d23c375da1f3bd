"""Dynamic tensor rematerialization (DTR): trace replay at parity with simrd."""

from memopt.dtr import cli  # noqa: F401  (sub-command registration)
