"""Energy and device telemetry: meters (NVML's energy counter, RAPL, power sampling), the NVML binding, and the
clocks, temperatures and throttle reasons sampled through a measurement window.
"""
