"""The one validator of GPU device ids, for the hook, direct mode and `nvidia-docker` (ref. §4).

A device list reaches nvidia-container-cli's argv, so only ids of a known shape pass: decimal
indices, `N:M` MIG indices, and `GPU-`/`MIG-` UUIDs of hex digits and dashes, ASCII only (a
Unicode digit such as U+0663 is refused), or the single words `all` / `none`. The wrapper
checks `NV_GPU` with the same functions, so nothing it passes is refused at container start.
Standard library only, no import: the hook runs it on every container start.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Union

    # "all" | "none" | tuple of validated ids
    Devices = Union[str, tuple[str, ...]]

MAX_DEVICE_IDS = 1024
MAX_ID_LENGTH = 128

_HEX = frozenset("0123456789abcdefABCDEF-")
# CDI's name grammar (vendor/class=name), ASCII only; each part starts with a letter or digit.
MAX_CDI_NAME = 256
_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
CDI_VENDOR_CHARS = _ALNUM | frozenset(".-")
CDI_CLASS_CHARS = _ALNUM | frozenset("_-")
CDI_DEVICE_CHARS = _ALNUM | frozenset("_.:-")


class RequestError(Exception):
    """The container asked for something the hook must refuse; `message` names what and why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def is_void(value: str) -> bool:
    """`void` among the comma separated items: not a GPU container at all (docs/reference.md §4)."""
    return "void" in (item.strip() for item in value.split(","))


def validate_id(device_id: str, source: str) -> str:
    """Return `device_id` when it is a device id nvidia-container-cli may see, else refuse it.

    Only decimal indices, `N:M`, and `GPU-`/`MIG-` followed by hex digits and dashes pass, so no
    id can smuggle an option (`-1`, `--root=…`), a path or a separator into the cli's argv.
    """
    bad = RequestError(
        f"{source}: invalid device id {device_id!r:.80} (expected all, none, a GPU index like 0,"
        " a MIG index like 0:1, or a GPU-/MIG- UUID)"
    )
    if not device_id or len(device_id) > MAX_ID_LENGTH or not device_id.isascii():
        raise bad
    if device_id.isdigit():
        return device_id
    gpu, colon, mig = device_id.partition(":")
    if colon:
        if gpu.isdigit() and mig.isdigit():
            return device_id
        raise bad
    if device_id.startswith(("GPU-", "MIG-")):
        rest = device_id[4:]
        if rest and rest[0] != "-" and all(c in _HEX for c in rest):
            return device_id
    raise bad


def parse_device_list(value: str, source: str) -> Devices:
    """A comma separated list → "all", "none" or a tuple of validated, de-duplicated ids."""
    if len(value) > MAX_DEVICE_IDS * (MAX_ID_LENGTH + 1):
        raise RequestError(f"{source}: device list too long ({len(value)} characters)")
    items = [item.strip() for item in value.split(",")]
    if len(items) > MAX_DEVICE_IDS:
        raise RequestError(
            f"{source}: too many device ids ({len(items)}, at most {MAX_DEVICE_IDS})"
        )
    for special in ("all", "none"):
        if special in items:
            if len(items) != 1:
                raise RequestError(
                    f"{source}: {special!r} cannot be combined with other device ids"
                    f" in {value!r:.80}"
                )
            return special
    ids: list[str] = []
    for item in items:
        if not item:
            raise RequestError(f"{source}: empty device id in {value!r:.80}")
        validate_id(item, source)
        if item not in ids:
            ids.append(item)
    return tuple(ids)


MAX_IMEX_CHANNEL = (1 << 20) - 1  # a channel is the minor of a dev_t (NVIDIA's bound)


def parse_imex_channels(value: str, source: str) -> Devices:
    """`NVIDIA_IMEX_CHANNELS`: "all", "none" or a tuple of decimal channel numbers (ASCII
    digits, at most 2^20 - 1, written without leading zeros), de-duplicated."""
    if len(value) > MAX_DEVICE_IDS * 8:
        raise RequestError(f"{source}: channel list too long ({len(value)} characters)")
    items = [item.strip() for item in value.split(",")]
    if items in (["all"], ["none"]):
        return items[0]
    channels: list[str] = []
    for item in items:
        if not (item.isascii() and item.isdigit() and int(item) <= MAX_IMEX_CHANNEL):
            raise RequestError(
                f"{source}: invalid IMEX channel {item!r:.40} (expected all, none, or channel"
                f" numbers 0 to {MAX_IMEX_CHANNEL} separated by commas)"
            )
        if str(int(item)) not in channels:
            channels.append(str(int(item)))
    return tuple(channels)


def is_cdi_word(text: str, allowed: frozenset) -> bool:
    """A part of a CDI name: characters of `allowed`, the first a letter or digit."""
    return bool(text) and text[0] in _ALNUM and all(c in allowed for c in text)


def is_kind(kind: str) -> bool:
    """`vendor/class` in CDI's grammar (nvidia.com/gpu)."""
    vendor, slash, cls = kind.partition("/")
    return bool(slash) and is_cdi_word(vendor, CDI_VENDOR_CHARS) and is_cdi_word(
        cls, CDI_CLASS_CHARS)


def parse_cdi_name(device: str, source: str) -> str:
    """`device` when it is a fully qualified CDI device name (`vendor/class=name`), else
    refuse it: no option, path, separator or control character passes."""
    kind, eq, name = device.partition("=")
    if not (eq and len(device) <= MAX_CDI_NAME and is_kind(kind)
            and is_cdi_word(name, CDI_DEVICE_CHARS)):
        raise RequestError(
            f"{source}: invalid CDI device name {device!r:.80} (expected vendor/class=name:"
            " vendor of letters, digits, '.' and '-', class of letters, digits, '_' and '-',"
            " name of letters, digits, '_', '.', ':' and '-')")
    return device
