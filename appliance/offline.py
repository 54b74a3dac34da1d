"""Offline by construction: the hub libraries are told never to reach the network."""

from __future__ import annotations

import os

OFFLINE_ENVIRONMENT = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}


def enforce_offline() -> None:
    """Set the variables before any hub-aware library is imported."""
    for name, value in OFFLINE_ENVIRONMENT.items():
        os.environ[name] = value
