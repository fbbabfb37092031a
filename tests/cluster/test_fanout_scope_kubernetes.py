"""The fan-out scope's storage tests (tests/unit/test_fanout_scope.py) on the Kubernetes storage
backend of the real local control plane: every test of it that uses ``backend``
(tests/cluster/conftest.py)."""

import pytest

from tests.unit.test_fanout_scope import *  # noqa: F403 (the suite, collected again here)

BACKEND_SUITE = True
pytestmark = pytest.mark.cluster
