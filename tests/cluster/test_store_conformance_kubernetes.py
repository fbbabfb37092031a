"""The store conformance suite (tests/unit/test_store_conformance.py) on the Kubernetes storage
backend of the real local control plane: every test of it that uses ``backend``
(tests/cluster/conftest.py)."""

import pytest

from tests.unit.test_store_conformance import *  # noqa: F403 (the suite, collected again here)

BACKEND_SUITE = True
pytestmark = pytest.mark.cluster
