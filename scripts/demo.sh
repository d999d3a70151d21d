#!/usr/bin/env bash
# The README's demo command: install what is missing, then run examples/demo.sh.
#   bash scripts/demo.sh [-v]    -v (or OMC_DEMO_VERBOSE=1): every request's own lines too
set -euo pipefail
cd "$(dirname "$0")/.."
OMC_DEPS_MINIMAL=${OMC_DEPS_MINIMAL:-1} bash scripts/install-deps.sh
exec bash examples/demo.sh "$@"
