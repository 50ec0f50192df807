#!/usr/bin/env bash
# Runs every fuzz target — each func FuzzXxx in a *_test.go file, found afresh so that a new one
# is never forgotten — for FUZZTIME (default 60s), one at a time. A crasher is written by Go to
# the package's testdata/fuzz/FuzzXxx/ and fails the run; keep it there as a regression seed.
set -euo pipefail
FUZZTIME="${FUZZTIME:-60s}"
cd "$(dirname "$0")/../.."
n=0
while read -r file; do
  pkg="./$(dirname "$file")"
  for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$file"); do
    echo "fuzz: $target in $pkg for $FUZZTIME"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$pkg" | grep -v '^fuzz: elapsed' || exit 1
    n=$((n + 1))
  done
done < <(git ls-files -- '*_test.go' | xargs grep -l '^func Fuzz' | sort)
echo "fuzz: $n targets, $FUZZTIME each, no crasher"
