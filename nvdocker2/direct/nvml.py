"""MIG device indices and UUIDs as NVIDIA numbers them, asked of the driver's libnvidia-ml.

Only NVML knows which MIG device index (the `M` of `GPU:M`, nvmlDeviceGetMigDeviceHandleByIndex)
and which `MIG-` UUID belong to a GPU instance and compute instance, so a request that names a
MIG device, or a CDI spec that lists them, calls it through `nvdocker2.host.load` (the library
by its absolute path under the driver root, checked like a program root runs). Nothing here is
imported for a container that names no MIG device.
"""

from __future__ import annotations

from nvdocker2.direct.errors import DirectError

SUCCESS = 0
UUID_BUFFER = 96  # NVML_DEVICE_UUID_V2_BUFFER_SIZE
SIGNATURES = {
    "nvmlInit_v2": "",
    "nvmlShutdown": "",
    "nvmlDeviceGetCount_v2": "U",
    "nvmlDeviceGetHandleByIndex_v2": "uP",
    "nvmlDeviceGetMinorNumber": "pU",
    "nvmlDeviceGetMaxMigDeviceCount": "pU",
    "nvmlDeviceGetMigDeviceHandleByIndex": "puP",
    "nvmlDeviceGetGpuInstanceId": "pU",
    "nvmlDeviceGetComputeInstanceId": "pU",
    "nvmlDeviceGetUUID": f"ps{UUID_BUFFER}u",
}


def mig_names(library: str) -> dict[tuple[int, int, int], tuple[int, str]]:
    """{(GPU minor, GPU instance id, compute instance id): (MIG index, MIG UUID)} for every MIG
    device NVML reports; raises `DirectError` when the library cannot be loaded or fails."""
    from nvdocker2.host.load import DriverLibrary

    try:
        lib = DriverLibrary(library, SIGNATURES)
    except (ImportError, OSError, AttributeError) as err:
        raise DirectError(
            f"cannot load {library} to name MIG devices: {err}",
            "MIG devices are named by the driver's libnvidia-ml; check the driver"
            " installation under driver-root",
        ) from None

    def call(name: str, *args: int) -> tuple:
        rc, *out = lib.call(name, *args)
        if rc != SUCCESS:
            raise DirectError(
                f"{name} failed with NVML error {rc} ({library})",
                "check the NVIDIA driver with nvidia-smi; MIG devices are named through NVML",
            )
        return tuple(out)

    call("nvmlInit_v2")
    try:
        names: dict[tuple[int, int, int], tuple[int, str]] = {}
        (count,) = call("nvmlDeviceGetCount_v2")
        for i in range(count):
            (gpu,) = call("nvmlDeviceGetHandleByIndex_v2", i)
            (minor,) = call("nvmlDeviceGetMinorNumber", gpu)
            rc, most = lib.call("nvmlDeviceGetMaxMigDeviceCount", gpu)
            if rc != SUCCESS:
                continue  # not a MIG-capable GPU
            for j in range(most):
                rc, mig = lib.call("nvmlDeviceGetMigDeviceHandleByIndex", gpu, j)
                if rc != SUCCESS:
                    continue  # no MIG device at this index
                (gi,) = call("nvmlDeviceGetGpuInstanceId", mig)
                (ci,) = call("nvmlDeviceGetComputeInstanceId", mig)
                (uuid,) = call("nvmlDeviceGetUUID", mig, UUID_BUFFER)
                names[(minor, gi, ci)] = (j, uuid)
        return names
    finally:
        lib.call("nvmlShutdown")
