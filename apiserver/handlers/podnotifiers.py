"""podnotifiers: get, list, watch, delete and deletecollection of PodNotifier records."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
