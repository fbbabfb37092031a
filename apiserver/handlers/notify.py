"""POST .../pods/{pod}/notify: run a notifier the pod declared, record it as a PodNotifier."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
