#!/bin/sh
# systemctl and journalctl of the agent's image: the node's own, run in the node's root
# (mounted at /host), so `systemctl restart containerd` talks to the node's systemd and
# `journalctl -u containerd` reads the node's journal. Installed as /usr/local/sbin/systemctl
# and /usr/local/sbin/journalctl; the name it is called by says which.
# chroot by absolute path: nothing from PATH runs as root here.
exec /usr/sbin/chroot "${NVDOCKER2_AGENT_HOST_ROOT:-/host}" "/usr/bin/${0##*/}" "$@"
