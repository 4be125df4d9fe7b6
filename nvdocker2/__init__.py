"""nvdocker2: the nvidia-docker2 layer of the NVIDIA container stack.

This module is imported on every container start (by the runtime shim and the hook), so it
holds the version and nothing else.
"""

__version__ = "0.3.0"
