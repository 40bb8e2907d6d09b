#!/usr/bin/env bash
# Webhook deliveries of a real gatehouse, checked with the standardwebhooks
# PyPI package (webhooks.py beside this script): signatures, the body's
# shape, and a refused delivery retried with the same webhook-id. Starts
# its own server (with a [[webhooks]] entry and a throw-away SQLite
# database) and receiver.
#
# Usage: tests/external/webhooks.sh PATH/TO/gatehouse
# Environment:
#   WEBHOOKS_VENV  where to install standardwebhooks (default: a cache dir)
set -euo pipefail

STANDARDWEBHOOKS_VERSION="1.1.0"

if [[ $# -ne 1 ]]; then
  echo "usage: $0 PATH/TO/gatehouse" >&2
  exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${WEBHOOKS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/gatehouse/standardwebhooks-$STANDARDWEBHOOKS_VERSION}"

if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'import standardwebhooks' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    "standardwebhooks==$STANDARDWEBHOOKS_VERSION"
fi

exec "$venv/bin/python" "$here/webhooks.py" --bin "$1"
