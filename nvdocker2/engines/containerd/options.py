"""containerd's command-line options: its systemd unit and its socket, and `--cdi`. Read on
every start of `nvdocker2`: standard library and `engines.front` only."""

from __future__ import annotations

from nvdocker2.engines.front import CliOption, unit_and_socket_options

OPTIONS = unit_and_socket_options() + [
    CliOption("cdi", ("--cdi",), ("install",),
              "Let CDI devices through the CRI: enable_cdi and cdi_spec_dirs (unless set) "
              "in the CRI plugin on containerd 1.7 (2.x has CDI on: checked, not changed; 1.6 has "
              "none: refused), and container_annotations = [\"cdi.k8s.io/*\"] on the runtime "
              "entry.", rank=175, kind=bool, default=False, show_default=True),
]
