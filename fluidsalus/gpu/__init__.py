"""Devices and what runs on them: device specs, the trial host, and the Ray actor around it."""

from fluidsalus.gpu.device import DeviceSpec, plan_devices
from fluidsalus.gpu.host import DeviceHost, HostSettings, TrialSpec

__all__ = ["DeviceHost", "DeviceSpec", "HostSettings", "TrialSpec", "plan_devices"]
