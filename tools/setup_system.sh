#!/usr/bin/env bash
# Install the Debian packages the tests need (run as root, e.g. from .ci/run):
# tshark, tcpdump, rabbitmq-server, and Java 17 for Spark when no java is on
# PATH. Idempotent: does nothing when everything is already there.
set -euo pipefail

# chromium: the report test opens the HTML report headless and takes a screenshot.
pkgs=(tshark tcpdump rabbitmq-server chromium)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup_system: nothing to install"
  exit 0
fi

export DEBIAN_FRONTEND=noninteractive
echo 'wireshark-common wireshark-common/install-setuid boolean false' | debconf-set-selections
mkdir -p /usr/share/man/man1  # slim images lack it and the JRE's postinst fails

# Keep the packaged rabbitmq-server (and epmd) from starting a service on
# 0.0.0.0; tests run their own node on loopback (tools/broker.py).
created_policy=0
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod 755 /usr/sbin/policy-rc.d
  created_policy=1
fi
trap 'if [ $created_policy = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi' EXIT

apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
