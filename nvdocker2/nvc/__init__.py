"""nvdocker2's own `nvidia-container-cli` (installed as `nvdocker2-container-cli`), built on
direct mode's discovery, for hosts without libnvidia-container: docs/nvidia-container-cli.md."""
