#!/usr/bin/env bash
# deploy/image/build.sh [DEB]: the agent's image, from the project's own .deb on a Debian 12
# rootfs made with debootstrap; no registry is asked for anything.
#
#   1. the .deb: DEB, else dist/nvdocker2_VERSION_all.deb, built with `make deb` when missing;
#   2. the Debian 12 tree the platform tests cache (tests/platforms/trees.py: debootstrap
#      --variant=minbase plus nvdocker2's dependencies, under /var/cache/nvdocker2-tests);
#   3. in a copy of it (chroot): the .deb installed, the tree's Docker, containerd and runc
#      purged, apt's lists, docs and man pages dropped, the host-side systemctl and journalctl
#      (systemctl.sh) put first on PATH, empty /etc/docker, /etc/containerd and /etc/crio for
#      the node's to be bound on;
#   4. dist/nvdocker2-agent_VERSION.tar, a rootfs; with IMPORT=1 also `docker import`-ed as
#      nvdocker2-agent:VERSION into the Docker that `docker` talks to ($DOCKER_HOST).
# Needs root (chroot). Prints the tarball's path last.
set -euo pipefail
cd "$(dirname "$0")/../.."

version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' nvdocker2/__init__.py)
deb=${1:-dist/nvdocker2_${version}_all.deb}
out=${OUT:-dist/nvdocker2-agent_${version}.tar}
if [ "$(id -u)" -ne 0 ]; then
    echo "error: building the agent image needs root (chroot into the Debian tree)" >&2
    echo "hint: run it as root: sudo make agent-image" >&2
    exit 2
fi
if [ ! -f "$deb" ]; then
    make deb >/dev/null
fi
tree=$(/usr/bin/python3 -c 'import sys; sys.path.insert(0, "tests/platforms"); import trees
print(trees.ensure_tarball("bookworm"))')

work=$(mktemp -d /tmp/nvdocker2-agent-image.XXXXXX)
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir "$root"
tar -C "$root" -xf "$tree"
cp "$deb" "$root/tmp/nvdocker2.deb"
# No service is started or stopped inside the image while packages come and go.
printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"
chmod 0755 "$root/usr/sbin/policy-rc.d"
chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
    NVDOCKER2_SKIP_DOCKER_CONFIG=1 /bin/sh -euc '
    dpkg -i /tmp/nvdocker2.deb >/dev/null
    gone=$(dpkg-query -W -f "\${db:Status-Abbrev}\${Package}\n" docker.io docker-cli containerd \
        runc busybox-static 2>/dev/null | sed -n "s/^ii *//p" || true)
    apt-get -y -q -o Dpkg::Use-Pty=0 purge --autoremove $gone >/dev/null 2>&1
    rm -f /tmp/nvdocker2.deb /usr/sbin/policy-rc.d
    rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old /var/log/* \
        /usr/share/doc/* /usr/share/man/* /usr/share/info/* /var/lib/nvdocker2 /etc/docker
    find / -xdev -name __pycache__ -type d -prune -exec rm -rf {} +
'
install -m 0755 deploy/image/systemctl.sh "$root/usr/local/sbin/systemctl"
install -m 0755 deploy/image/systemctl.sh "$root/usr/local/sbin/journalctl"
# Where the agent binds the node's config directory for install (nvdocker2/agent/apply.py).
mkdir -p -m 0755 "$root/etc/docker" "$root/etc/containerd" "$root/etc/crio"
mkdir -p "$(dirname "$out")"
tar --numeric-owner -C "$root" -cf "$out.tmp" .
mv "$out.tmp" "$out"
if [ "${IMPORT:-0}" = 1 ]; then
    docker import -c 'ENTRYPOINT ["/usr/bin/nvdocker2", "agent"]' -c 'ENV LANG=C.UTF-8' \
        "$out" "nvdocker2-agent:$version" >/dev/null
    echo "imported nvdocker2-agent:$version"
fi
echo "$out"
