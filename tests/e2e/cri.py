"""A small CRI client for the tests: the calls the kubelet makes (runtime.v1 RuntimeService),
over grpcio with the messages hand-encoded from the CRI API's field numbers
(kubernetes/cri-api pkg/apis/runtime/v1/api.proto). crictl and CRI-O are in no archive CI
reaches, so the tests speak CRI themselves; no generated code, no protobuf library.

Only what the tests use is encoded: varints, length-delimited fields, maps as repeated
entries {1: key, 2: value}.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import grpc

SERVICE = "/runtime.v1.RuntimeService/"
NODE = 2  # NamespaceMode NODE: the host's network namespace (no CNI needed)
STATES = {0: "CREATED", 1: "RUNNING", 2: "EXITED", 3: "UNKNOWN"}


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int32/int64 are ten-byte two's complement
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(num: int, value) -> bytes:
    """One field: an int or bool as a varint, str/bytes length-delimited (a nested message is
    bytes), None nothing."""
    if value is None:
        return b""
    if isinstance(value, (bool, int)):
        return varint(num << 3) + varint(int(value))
    data = value.encode() if isinstance(value, str) else bytes(value)
    return varint(num << 3 | 2) + varint(len(data)) + data


def message(*fields: tuple) -> bytes:
    return b"".join(field(n, v) for n, v in fields)


def string_map(num: int, items: dict) -> bytes:
    return b"".join(field(num, message((1, k), (2, v))) for k, v in (items or {}).items())


def repeated(num: int, values) -> bytes:
    return b"".join(field(num, v) for v in values)


def decode(data: bytes) -> dict[int, list]:
    """field number -> its values (ints for varints, bytes for length-delimited)."""
    out: dict[int, list] = {}
    i = 0
    while i < len(data):
        key, i = _read_varint(data, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            val, i = _read_varint(data, i)
        elif wire == 2:
            size, i = _read_varint(data, i)
            val, i = data[i:i + size], i + size
        elif wire == 1:
            val, i = data[i:i + 8], i + 8
        elif wire == 5:
            val, i = data[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire} of field {num}")
        out.setdefault(num, []).append(val)
    return out


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        b = data[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, i


NODE_NAMESPACES = message((1, NODE), (2, NODE), (3, NODE))  # NamespaceOption network, pid, ipc


def _one(msg: dict, num: int, default=b""):
    return msg.get(num, [default])[-1]


def decode_map(msg: dict, num: int) -> dict[str, str]:
    out = {}
    for entry in msg.get(num, []):
        e = decode(entry)
        out[_one(e, 1).decode()] = _one(e, 2).decode()
    return out


@dataclass(frozen=True)
class ContainerStatus:
    id: str
    state: str
    exit_code: int
    reason: str
    message: str


class Cri:
    """RuntimeService on a containerd's socket."""

    def __init__(self, address: str, timeout: float = 120) -> None:
        self.channel = grpc.insecure_channel(f"unix://{address}")
        self.timeout = timeout

    def close(self) -> None:
        self.channel.close()

    def call(self, method: str, request: bytes) -> dict[int, list]:
        rpc = self.channel.unary_unary(SERVICE + method, request_serializer=None,
                                       response_deserializer=None)
        return decode(rpc(request, timeout=self.timeout))

    def status(self) -> dict:
        """StatusRequest{verbose: true}: info["config"], the CRI plugin's effective config."""
        resp = self.call("Status", message((1, True)))
        info = decode_map(resp, 2)
        return json.loads(info["config"])

    @staticmethod
    def sandbox_config(name: str, uid: str, namespace: str = "default") -> bytes:
        # LinuxPodSandboxConfig.security_context
        linux = message((2, message((1, NODE_NAMESPACES))))
        # No hostname: a pod in the node's network namespace keeps the node's (as the
        # kubelet does for hostNetwork pods).
        return message((1, message((1, name), (2, uid), (3, namespace), (4, 0)))) + field(
            8, linux)

    def run_pod_sandbox(self, config: bytes, handler: str) -> str:
        return _one(self.call("RunPodSandbox", message((1, config), (2, handler))), 1).decode()

    def create_container(self, pod: str, sandbox: bytes, name: str, image: str,
                         command: list[str], env: dict | None = None,
                         annotations: dict | None = None, cdi_devices: tuple = (),
                         mounts: tuple | list = ()) -> str:
        """ContainerConfig: metadata, image (also as user_specified_image), command, envs,
        mounts (container path, host path), annotations, the pod's namespaces in the security
        context, CDI_devices. CRI-O refuses a container without the user_specified_image and
        the namespaces that the kubelet sends."""
        cfg = (field(1, message((1, name), (2, 0))) + field(2, message((1, image), (18, image)))
               + repeated(3, command)
               + b"".join(field(6, message((1, k), (2, v))) for k, v in (env or {}).items())
               + b"".join(field(7, message((1, cp), (2, hp))) for cp, hp in mounts)
               + string_map(10, annotations or {})
               + field(15, message((2, message((3, NODE_NAMESPACES)))))  # Linux.security_context
               + b"".join(field(17, message((1, d))) for d in cdi_devices))
        resp = self.call("CreateContainer", message((1, pod), (2, cfg), (3, sandbox)))
        return _one(resp, 1).decode()

    def start_container(self, cid: str) -> None:
        self.call("StartContainer", message((1, cid)))

    def container_status(self, cid: str) -> ContainerStatus:
        st = decode(_one(self.call("ContainerStatus", message((1, cid))), 1))
        return ContainerStatus(_one(st, 1).decode(), STATES[_one(st, 3, 0)],
                               _one(st, 7, 0), _one(st, 10).decode(), _one(st, 11).decode())

    def stop_and_remove(self, pod: str) -> None:
        self.call("StopPodSandbox", message((1, pod)))
        self.call("RemovePodSandbox", message((1, pod)))
