"""The exceptions aotkernels raises beyond TypeError / ValueError / NotImplementedError."""

from __future__ import annotations

__all__ = ["AotKernelsError", "DriverTooOldError", "NoKernelImageError"]


class AotKernelsError(RuntimeError):
    """Base of aotkernels' runtime errors (driver, loading, image choice)."""


class NoKernelImageError(AotKernelsError):
    """The build holds no image this device can run; the message says what would cover it."""


class DriverTooOldError(AotKernelsError):
    """Images exist for this device, but the driver is older than they need."""
