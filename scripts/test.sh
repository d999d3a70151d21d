#!/usr/bin/env bash
# The README's test command: install what is missing (Debian packages), then run the whole suite.
# Ends with a line "N passed, M failed"; exit status non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
exec make --no-print-directory test
