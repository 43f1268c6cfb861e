#!/usr/bin/env bash
# Debian packages the tests need (bubblewrap for the sandbox's namespaces,
# libseccomp2 for its seccomp filter through pyseccomp, docker-compose to
# parse docker-compose.yml, chromium for the dashboard's browser tests through
# Playwright). Installs only what is missing; needs root to install.
set -euo pipefail
need=()
command -v bwrap >/dev/null || need+=(bubblewrap)
if ! { ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null; } | grep 'libseccomp\.so\.2' >/dev/null; then
  need+=(libseccomp2)
fi
command -v docker-compose >/dev/null || need+=(docker-compose)
command -v chromium >/dev/null || command -v chromium-browser >/dev/null || need+=(chromium)
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" -ne 0 ]; then
  echo "system_deps: missing ${need[*]} (run as root to install); tests needing them will skip" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq "${need[@]}" >/dev/null
