"""The per-pod bounds across two replicas (tests/unit/test_pod_bounds.py) on the Kubernetes storage
backend of the real local control plane: every test of it that uses ``backend``
(tests/cluster/conftest.py)."""

import pytest

from tests.unit.test_pod_bounds import *  # noqa: F403 (the suite, collected again here)

BACKEND_SUITE = True
pytestmark = pytest.mark.cluster
