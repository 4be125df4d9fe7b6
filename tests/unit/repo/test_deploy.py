"""deploy/: the Helm chart rendered without helm, the plain manifest (the chart's rendering with
its defaults and a Namespace), both validated offline against the Kubernetes API schemas of two
Kubernetes releases with kubernetes-validate, and the properties the agent relies on.

The chart's templates use only `{{ .Values.x }}`, `{{ .Release.Namespace }}`,
`{{ .Chart.AppVersion }}` and non-nested `{{- if .Values.x }} … {{- end }}`, so the tiny
renderer below renders them as helm does (Go templates' `{{-` trims the whitespace before it).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "deploy" / "helm" / "nvdocker2-agent"
MANIFEST = REPO / "deploy" / "kubernetes" / "nvdocker2-agent.yaml"
VALIDATE = REPO / ".venv-kubernetes" / "bin" / "kubernetes-validate"
KUBERNETES = ["1.29.0", "1.37.0"]  # two releases two years apart (kubernetes-validate's schemas)
NAMESPACE = "nvdocker2"

_ACTION = re.compile(r"(\{\{-?)\s*(.*?)\s*(-?\}\})", re.S)


def _lookup(ctx: dict, dotted: str):
    v = ctx
    for part in dotted.lstrip(".").split("."):
        v = v[part]
    return v


def render_template(text: str, ctx: dict) -> str:
    """Render one template: values substituted, `if` blocks kept or dropped."""
    out: list[str] = []
    keep = [True]
    pos = 0
    for m in _ACTION.finditer(text):
        chunk = text[pos:m.start()]
        if m.group(1) == "{{-":
            chunk = chunk.rstrip()
        if keep[-1]:
            out.append(chunk)
        pos = m.end()
        if m.group(3) == "-}}":
            while pos < len(text) and text[pos].isspace():
                pos += 1
        action = m.group(2)
        if action.startswith("if "):
            assert len(keep) == 1, "nested if: extend the renderer"
            keep.append(bool(_lookup(ctx, action[3:].strip())))
        elif action == "end":
            keep.pop()
        elif keep[-1]:
            assert re.fullmatch(r"\.[A-Za-z.]+", action), f"unsupported action {action!r}"
            out.append(str(_lookup(ctx, action)))
    out.append(text[pos:])
    return "".join(out)


def render(values: dict | None = None, namespace: str = NAMESPACE) -> str:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    vals = yaml.safe_load((CHART / "values.yaml").read_text())
    vals.update(values or {})
    ctx = {"Values": vals, "Release": {"Namespace": namespace},
           "Chart": {"AppVersion": chart["appVersion"], "Version": chart["version"]}}
    docs = []
    for name in ("namespace.yaml", "serviceaccount.yaml", "daemonset.yaml", "runtimeclass.yaml"):
        body = render_template((CHART / "templates" / name).read_text(), ctx).strip()
        if body:
            docs.append(f"# Source: nvdocker2-agent/templates/{name}\n{body}\n")
    return "---\n" + "---\n".join(docs)


def _docs(text: str) -> dict:
    return {d["kind"]: d for d in yaml.safe_load_all(text) if d}


def _runtime_classes(text: str) -> dict:
    """name -> handler of each RuntimeClass."""
    return {d["metadata"]["name"]: d["handler"] for d in yaml.safe_load_all(text)
            if d and d["kind"] == "RuntimeClass"}


def _validate(path: Path, version: str) -> subprocess.CompletedProcess:
    if not VALIDATE.exists():
        msg = f"{VALIDATE} missing (bash scripts/setup.sh tests makes it)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    return subprocess.run([str(VALIDATE), "--strict", "-k", version, str(path)],
                          capture_output=True, text=True, timeout=300)


def _passed(p: subprocess.CompletedProcess, version: str, count: int = 4) -> None:
    assert p.returncode == 0, p.stdout + p.stderr
    short = version.rsplit(".", 1)[0]
    assert p.stdout.count("passed for resource") == count, p.stdout
    assert p.stdout.count(f"against version {short}") == count, p.stdout


def test_the_plain_manifest_is_the_charts_rendering_with_a_namespace():
    assert MANIFEST.read_text() == (
        "# nvdocker2 agent: a DaemonSet on GPU nodes (docs/kubernetes.md). Generated from\n"
        "# deploy/helm/nvdocker2-agent with its default values and createNamespace=true;\n"
        "# edit the chart, then tests/unit/repo/test_deploy.py says what this file must be.\n"
        + render({"createNamespace": True}))


@pytest.mark.parametrize("version", KUBERNETES)
@pytest.mark.parametrize("engine", ["containerd", "docker", "crio"])
def test_chart_renders_to_valid_objects_for_each_engine(tmp_path, engine, version):
    out = tmp_path / f"{engine}.yaml"
    out.write_text(render({"engine": engine, "createNamespace": True, "setDefault": True,
                           "keepOnExit": True, "config": "/etc/x/y.conf",
                           "runtimePath": "/usr/local/bin/nvidia-container-runtime"}))
    p = _validate(out, version)
    _passed(p, version)
    args = _docs(out.read_text())["DaemonSet"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--engine") + 1] == engine
    assert {"--set-default", "--keep-on-exit"} <= set(args)
    assert args[args.index("--config") + 1] == "/etc/x/y.conf"


@pytest.mark.parametrize("version", KUBERNETES)
def test_install_toolkit_renders_valid_with_the_flag_and_no_runtime_path(tmp_path, version):
    out = tmp_path / "toolkit.yaml"
    out.write_text(render({"createNamespace": True,
                           "installToolkit": "/usr/local/nvidia/toolkit"}))
    _passed(_validate(out, version), version)
    spec = _docs(out.read_text())["DaemonSet"]["spec"]["template"]["spec"]
    args = spec["containers"][0]["args"]
    assert args[args.index("--install-toolkit") + 1] == "/usr/local/nvidia/toolkit"
    assert "--runtime-path" not in args
    # DIR is reached through the node's / at --host-root /host
    assert {"name": "host-root", "hostPath": {"path": "/", "type": "Directory"}} in \
        spec["volumes"]
    assert "--install-toolkit" not in render({"createNamespace": True})


@pytest.mark.parametrize("version", KUBERNETES)
def test_plain_manifest_validates(version):
    p = _validate(MANIFEST, version)
    _passed(p, version)
    assert _runtime_classes(MANIFEST.read_text()) == {"nvidia": "nvidia"}


@pytest.mark.parametrize("version", KUBERNETES)
def test_the_operators_runtime_classes_render_valid_and_bound_to_their_handlers(tmp_path,
                                                                                version):
    out = tmp_path / "operator.yaml"
    out.write_text(render({"createNamespace": True, "operatorRuntimeClasses": True}))
    _passed(_validate(out, version), version, 6)
    assert _runtime_classes(out.read_text()) == {
        "nvidia": "nvidia", "nvidia-cdi": "nvidia-cdi", "nvidia-legacy": "nvidia-legacy"}
    without = render({"runtimeClass": False})
    assert _runtime_classes(without) == {} and "RuntimeClass" not in without


def test_a_wrong_runtime_class_field_is_caught_by_the_validation(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(MANIFEST.read_text().replace("handler: nvidia", "handlers: nvidia"))
    p = _validate(bad, KUBERNETES[-1])
    assert p.returncode != 0 and "handler" in p.stdout + p.stderr


def test_a_wrong_field_is_caught_by_the_validation(tmp_path):
    """The validation can fail: a misspelt field of the DaemonSet is refused."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(MANIFEST.read_text().replace("hostPID: true", "hostPid: true"))
    p = _validate(bad, KUBERNETES[-1])
    assert p.returncode != 0 and "hostPid" in p.stdout + p.stderr


def test_the_daemonset_has_what_the_agent_needs_and_no_more():
    docs = _docs(render({"createNamespace": True}))
    assert docs["Namespace"]["metadata"]["name"] == NAMESPACE
    sa = docs["ServiceAccount"]
    assert sa["automountServiceAccountToken"] is False
    assert not {"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"} & set(docs)
    spec = docs["DaemonSet"]["spec"]["template"]["spec"]
    assert spec["hostPID"] is True and spec["serviceAccountName"] == sa["metadata"]["name"]
    assert spec["automountServiceAccountToken"] is False
    assert "hostNetwork" not in spec  # /healthz stays on the pod's own 127.0.0.1
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    (c,) = spec["containers"]
    assert c["securityContext"] == {"privileged": True}
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert mounts == {"/host": "host-root", "/run": "run"}
    assert {v["name"]: v["hostPath"]["path"] for v in spec["volumes"]} == {
        "host-root": "/", "run": "/run"}
    args = c["args"]
    assert args[args.index("--host-root") + 1] == "/host"
    ready = args[args.index("--ready-file") + 1]
    assert c["readinessProbe"]["exec"]["command"] == ["test", "-e", ready]
    assert not ready.startswith(("/run/", "/host/"))  # the pod's own file, not the node's
    assert "--keep-on-exit" not in args and "--set-default" not in args
    # The grace period covers an install in progress and then a verified uninstall.
    timeout = float(args[args.index("--timeout") + 1])
    assert spec["terminationGracePeriodSeconds"] >= 3 * timeout


def test_the_renderer_trims_as_go_templates_do():
    ctx = {"Values": {"a": "x", "on": True, "off": False}}
    text = "l:\n  - 1\n{{- if .Values.on }}\n  - {{ .Values.a }}\n{{- end }}\n" \
           "{{- if .Values.off }}\n  - no\n{{- end }}\n  - 2\n"
    assert render_template(text, ctx) == "l:\n  - 1\n  - x\n  - 2\n"
