"""OpenTelemetry metrics export, as the Awa SDK's ``init_telemetry`` and
``shutdown_telemetry`` (see :mod:`awa_fast.telemetry.exporter`)."""

from awa_fast.telemetry.exporter import init_telemetry, shutdown_telemetry

__all__ = ["init_telemetry", "shutdown_telemetry"]
