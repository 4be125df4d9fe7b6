"""containerd's command-line options: its systemd unit and its socket. Read on every start of
`nvdocker2`: standard library and `engines.front` only."""

from __future__ import annotations

from nvdocker2.engines.front import unit_and_socket_options

OPTIONS = unit_and_socket_options()
