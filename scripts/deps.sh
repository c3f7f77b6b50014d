#!/usr/bin/env bash
# Installs the Debian packages jetrpc builds with (Debian 12, as root or with sudo).
set -euo pipefail
pkgs=(cmake gcc make pkg-config protobuf-c-compiler libprotobuf-c-dev libsnappy-dev zlib1g-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
