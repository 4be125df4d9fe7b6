"""Adding the prestart hook to a bundle's config.json (docs/reference.md §3).

`add_prestart_hook` is a pure edit of the spec dict; `read_spec` and `write_spec` move the
file. The write is atomic (temp file in the bundle, same mode and owner, rename), so runc sees
the old file or the new one, never a partial one. It is not fsynced: a bundle does not outlive
a reboot (containerd keeps it under /run and recreates it), runc reads it through the page
cache, and an fsync costs milliseconds on every GPU container start where /run is not tmpfs.
Every field this code does not know, and every other hook, is kept as it was, in order.
"""

from __future__ import annotations

import os

from nvdocker2.runtime import jsonio

HOOK_NAME = "nvidia-container-runtime-hook"
HOOK_ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
MAX_SPEC_BYTES = 16 * 1024 * 1024


class SpecError(Exception):
    """config.json cannot be read, parsed or written; the message names the file."""


def hook_entry(hook_path: str, config_file: str | None = None) -> dict:
    """The prestart hook entry: `--config FILE` goes before the stage when the runtime's
    config came from NVIDIA_CONTAINER_RUNTIME_CONFIG (the hook does not see that variable)."""
    args = [os.path.basename(hook_path)]
    if config_file:
        args += ["--config", config_file]
    args.append("prestart")
    return {"path": hook_path, "args": args, "env": list(HOOK_ENV)}


def add_prestart_hook(spec: dict, hook_path: str, config_file: str | None = None) -> bool:
    """Append the hook program's prestart entry unless a GPU hook is there already. True when
    changed."""
    if has_gpu_hook(spec, os.path.basename(hook_path)):
        return False
    append_prestart(spec, hook_entry(hook_path, config_file))
    return True


def has_gpu_hook(spec: dict, name: str = HOOK_NAME) -> bool:
    """Whether `hooks.prestart` holds an nvidia-container-runtime-hook (or a program named
    `name`) already: dockerd's for `--gpus`, NVIDIA's, or the one this runtime wrote (a second
    one would configure the container twice). Raises SpecError for a `hooks` of the wrong
    shape."""
    hooks = spec.get("hooks")
    if hooks is None:
        return False
    if not isinstance(hooks, dict):
        raise SpecError("config.json: 'hooks' must be an object")
    prestart = hooks.get("prestart")
    if prestart is None:
        return False
    if not isinstance(prestart, list):
        raise SpecError("config.json: 'hooks.prestart' must be a list")
    for hook in prestart:
        if not isinstance(hook, dict):
            continue
        path, args = hook.get("path"), hook.get("args")
        if isinstance(path, str) and os.path.basename(path) in (HOOK_NAME, name):
            return True
        if isinstance(args, list) and args[1:2] == ["-c"] and args[3:4] == [HOOK_NAME]:
            return True  # ours: sh -c SCRIPT nvidia-container-runtime-hook ...
    return False


def append_prestart(spec: dict, entry: dict) -> None:
    """Append `entry` to `hooks.prestart`, making both when absent (has_gpu_hook checked their
    shape)."""
    hooks = spec.get("hooks")
    if hooks is None:
        hooks = spec["hooks"] = {}
    prestart = hooks.get("prestart")
    if prestart is None:
        prestart = hooks["prestart"] = []
    prestart.append(entry)


def read_spec(path: str) -> dict:
    """Load config.json, refusing files over MAX_SPEC_BYTES and anything but a JSON object."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SPEC_BYTES + 1)
    except OSError as e:
        raise SpecError(f"cannot read {path}: {e.strerror}") from None
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError(f"{path} is larger than {MAX_SPEC_BYTES} bytes; refusing it")
    try:
        spec = jsonio.loads(data)
    except (ValueError, RecursionError) as e:
        raise SpecError(f"{path} is not valid JSON: {str(e)[:200]}") from None
    if not isinstance(spec, dict):
        raise SpecError(f"{path}: not a JSON object")
    return spec


def write_spec(path: str, spec: dict) -> None:
    """Replace `path` atomically with `spec` as JSON, keeping the old file's mode and owner."""
    data = jsonio.dumps(spec).encode("utf-8")
    directory = os.path.dirname(path) or "."
    try:
        st = os.stat(path)
    except OSError:
        st = None
    tmp = os.path.join(directory, f".config.json.nvidia.{os.getpid()}.tmp")
    from nvdocker2.host.files import create_exclusive

    try:
        try:
            fd = create_exclusive(tmp, 0o600)
        except FileExistsError:  # left by a killed run that had our pid
            os.unlink(tmp)
            fd = create_exclusive(tmp, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if st is not None:
                os.fchmod(fd, st.st_mode & 0o7777)
                if os.geteuid() == 0:
                    os.fchown(fd, st.st_uid, st.st_gid)
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise SpecError(f"cannot write {path}: {e.strerror}") from None
