"""Adversarial tests run real workers on the embedded broker: the integration fixtures, shared."""

from __future__ import annotations

from tests.integration.conftest import api, make_module_worker, worker

__all__ = ["api", "make_module_worker", "worker"]
