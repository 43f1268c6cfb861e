#!/usr/bin/env bash
# Debian packages ideabench needs, installed only where missing (needs root to install).
#   scripts/system_deps.sh          what the tests need: bubblewrap for the sandbox's namespaces,
#                                   libseccomp2 for its seccomp filter through pyseccomp,
#                                   docker-compose to parse docker-compose.yml, chromium for the
#                                   dashboard's browser tests through Playwright, pgbouncer for
#                                   the worker loops through transaction pooling (issue 28.10);
#   scripts/system_deps.sh sandbox  only the sandbox's (make run): without them the worker
#                                   refuses to judge (it fails closed; docs/security.md).
set -euo pipefail
need=()
command -v bwrap >/dev/null || need+=(bubblewrap)
if ! { ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null; } | grep 'libseccomp\.so\.2' >/dev/null; then
  need+=(libseccomp2)
fi
if [ "${1:-}" != sandbox ]; then
  command -v docker-compose >/dev/null || need+=(docker-compose)
  command -v chromium >/dev/null || command -v chromium-browser >/dev/null || need+=(chromium)
  command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ] || need+=(pgbouncer)
fi
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" -ne 0 ]; then
  if [ "${1:-}" = sandbox ]; then
    echo "system_deps: missing ${need[*]}: the worker will refuse to judge submitted code without its" >&2
    echo "  sandbox. Install them (sudo apt-get install ${need[*]}), or on a development machine only" >&2
    echo "  run with IDEABENCH_ALLOW_WEAK_SANDBOX=1 (its reports are marked and counted nowhere)." >&2
  else
    echo "system_deps: missing ${need[*]} (run as root to install): without bubblewrap every test that judges fails (the sandbox fails closed)" >&2
  fi
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq "${need[@]}" >/dev/null
