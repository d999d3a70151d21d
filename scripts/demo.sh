#!/usr/bin/env bash
# The README's demo command: install what is missing, then run examples/demo.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
OMC_DEPS_MINIMAL=${OMC_DEPS_MINIMAL:-1} bash scripts/install-deps.sh
exec bash examples/demo.sh
