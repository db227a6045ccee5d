#!/usr/bin/env bash
# Makes an arm64 sysroot for the aarch64 cross build: downloads Debian's arm64 builds of lpemu's
# dependencies (and everything they depend on, libc and libstdc++ included) with a private apt
# state and unpacks them into DIR. The machine's own apt and dpkg state are not touched (no
# foreign architecture is added), so nothing installed for amd64 is replaced.
# Usage: sysroot.sh DIR
set -euo pipefail
dir=$(realpath -m "${1:?usage: sysroot.sh DIR}")  # apt needs absolute paths
if [ -f "$dir/.complete" ]; then echo "lpemu: arm64 sysroot present: $dir"; exit 0; fi
rm -rf "$dir" "$dir.apt"
state="$dir.apt"
mkdir -p "$state/lists/partial" "$state/archives/partial" "$state/sources"
touch "$state/status"
# The machine's Debian sources, read for arm64 instead of its own architecture.
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
  [ -f "$f" ] && grep -qE 'deb\.debian\.org|debian-security|/debian' "$f" && cp "$f" "$state/sources/" || true
done
apt_opts=(-o APT::Architecture=arm64 -o APT::Architectures=arm64 -o Debug::NoLocking=1
          -o Dir::State="$state" -o Dir::State::status="$state/status" -o Dir::Cache="$state"
          -o Dir::Cache::archives="$state/archives" -o Dir::Etc::SourceList=/dev/null
          -o Dir::Etc::SourceParts="$state/sources" -o APT::Sandbox::User=root)
echo "lpemu: downloading arm64 packages into $state"
apt-get "${apt_opts[@]}" -q update >/dev/null
apt-get "${apt_opts[@]}" -q -y --no-install-recommends --download-only install \
  libeigen3-dev libboost-dev libtbb-dev libhwy-dev libhdf5-dev libtomlplusplus-dev libcli11-dev \
  nlohmann-json3-dev libpcre2-dev catch2 libstdc++-12-dev >/dev/null
mkdir -p "$dir"
for deb in "$state"/archives/*.deb; do dpkg-deb -x "$deb" "$dir"; done
# Absolute symbolic links (libfoo.so -> /lib/...) would point into the build machine: make them
# relative to the sysroot.
find "$dir" -type l -lname '/*' | while read -r link; do
  target=$(readlink "$link")
  ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$dir$target")" "$link"
done
rm -rf "$state"
touch "$dir/.complete"
echo "lpemu: arm64 sysroot made: $dir"
