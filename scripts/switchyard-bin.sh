#!/usr/bin/env bash
# Prints the path of the switchyard binary the benchmark scripts run: $SWITCHYARD_BIN when
# set, else a release build of this checkout (built first, quietly).
set -euo pipefail
if [ -n "${SWITCHYARD_BIN:-}" ]; then
  echo "$SWITCHYARD_BIN"
  exit 0
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
echo "building switchyard (release)..." >&2
(cd "$root" && cargo build --release --quiet --bin switchyard) >&2
echo "$root/target/release/switchyard"
