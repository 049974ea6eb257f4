"""What this machine is and what it can run: capability rules per device and library version, the CUDA conformance
replay and phase audit, peak tables and measured CPU ceilings, the environment stamped on every run, the CPU FP8
rate probe, vendor import messages, and the process group of a distributed run.
"""
