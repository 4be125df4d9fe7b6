"""`doctor --smoke`: start a tiny GPU container, once through the nvidia runtime and once
through `--gpus`, and report what happened. Off by default: it runs a container."""

from __future__ import annotations

from nvdocker2.doctor.context import RUNTIME_NAME
from nvdocker2.engines.docker.doctor.facts import DockerContext as Context
from nvdocker2.doctor.model import Checks, Outcome, fail, ok, skip

CHECKS = Checks()
check = CHECKS.check

SMOKE_TIMEOUT = 60.0


def _docker_run(ctx: Context, args: list[str]) -> Outcome | tuple[str, str]:
    docker = ctx.root.which("docker", ctx.env.get("PATH", ""))
    if docker is None:
        return skip("the docker CLI is not on PATH")
    argv = [
        str(docker),
        "-H",
        ctx.docker_host().url,
        "run",
        "--rm",
        "--pull",
        "never",
        *args,
        ctx.smoke_image,
        "nvidia-smi",
        "-L",
    ]
    res = ctx.run(argv, timeout=SMOKE_TIMEOUT)
    shown = "docker run --rm " + " ".join(args) + f" {ctx.smoke_image} nvidia-smi -L"
    if res.ok:
        return ok(f"`{shown}`: " + "; ".join(res.stdout.split("\n")[:4]).strip("; "))
    msg = res.first_line()
    if "No such image" in msg or "pull access" in msg:
        return fail(
            f"`{shown}`: image {ctx.smoke_image} is not present locally",
            f"docker pull {ctx.smoke_image}, or name a local image with NVDOCKER2_SMOKE_IMAGE",
        )
    return shown, msg


@check(
    "smoke.runtime",
    f"a container with --runtime={RUNTIME_NAME}",
    needs=("dockerd.reachable", "dockerd.runtimes"),
    smoke=True,
)
def smoke_runtime(ctx: Context) -> Outcome:
    result = _docker_run(
        ctx,
        [
            f"--runtime={RUNTIME_NAME}",
            "-e",
            "NVIDIA_VISIBLE_DEVICES=all",
            "-e",
            "NVIDIA_DRIVER_CAPABILITIES=utility",
        ],
    )
    if isinstance(result, Outcome):
        return result
    shown, msg = result
    return fail(
        f"`{shown}` failed: {msg}",
        "fix the failed checks above (driver, nvidia-container-cli), then rerun "
        "nvdocker2 doctor --smoke",
    )


@check("smoke.gpus", "a container with --gpus all", needs=("dockerd.reachable",), smoke=True)
def smoke_gpus(ctx: Context) -> Outcome:
    result = _docker_run(ctx, ["--gpus", "all"])
    if isinstance(result, Outcome):
        return result
    shown, msg = result
    hint = "fix the failed checks above, then rerun nvdocker2 doctor --smoke"
    if "could not select device driver" in msg:
        hint = (
            "dockerd did not find nvidia-container-runtime-hook on its PATH when it "
            f"started: install the hook, then restart dockerd ({ctx.restart_command()})"
        )
    return fail(f"`{shown}` failed: {msg}", hint)
