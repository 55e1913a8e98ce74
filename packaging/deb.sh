#!/bin/sh
# deb.sh OUTDIR builds OUTDIR/sluice_VERSION_ARCH.deb: `make install` into a scratch tree, then
# dpkg-deb. BIN names the binary make builds (default bin/sluice).
set -eu
out=$(realpath "$1")
cd "$(dirname "$0")/.."
make=${MAKE:-make}
bin=${BIN:-bin/sluice}

version=$($make -s --no-print-directory version)
# A Debian version starts with a digit: v1.2.3-4-gHASH-dirty becomes 1.2.3+4.gHASH.dirty, an
# untagged HASH-dirty 0~gHASH.dirty.
case $version in
v[0-9]*) debver=$(echo "${version#v}" | sed -e 's/-/+/' -e 's/-/./g') ;;
*) debver=0~g$(echo "$version" | tr - .) ;;
esac
arch=$(dpkg --print-architecture)

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
chmod 0755 "$root"
$make -s install BIN="$bin" DESTDIR="$root" PREFIX=/usr ZSHCOMPDIR=/usr/share/zsh/vendor-completions >/dev/null
gzip -9n "$root"/usr/share/man/man1/*.1

install -d "$root/DEBIAN"
# Depends: what sluice runs (nft) or an operator needs beside it (ip, conntrack). nsenter, which
# --netns runs, is in util-linux: Essential on Debian, so policy forbids listing it.
# Recommends: conntrackd, which the daemon runs when the sync section replicates nft's flows.
cat >"$root/DEBIAN/control" <<CONTROL
Package: sluice
Version: $debver
Architecture: $arch
Maintainer: Sluice maintainers <maintainers@users.noreply.a-seed-8dd77d9f.example>
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Depends: nftables, iproute2, conntrack
Recommends: conntrackd
Section: net
Priority: optional
Homepage: https://github.com/sluicelb/sluice
Description: Layer-4 load balancer on kernel datapaths (nftables, eBPF)
 Sluice balances TCP and UDP services over backends with nftables or eBPF
 datapaths, health checks, a drain that keeps flows, BGP announcements, an
 API and Prometheus metrics. One static binary and a systemd unit, which the
 package installs but does not enable: edit /etc/sluice/sluice.yaml, then
 systemctl enable --now sluice.
CONTROL
printf '%s\n' /etc/default/sluice /etc/sluice/sluice.yaml >"$root/DEBIAN/conffiles"
install -m 0755 packaging/deb/postinst packaging/deb/prerm packaging/deb/postrm "$root/DEBIAN/"

mkdir -p "$out"
dpkg-deb --root-owner-group -Zgzip --build "$root" "$out/sluice_${debver}_${arch}.deb"
