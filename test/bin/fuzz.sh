#!/usr/bin/env bash
# Runs every fuzz target — each func FuzzXxx in a *_test.go file, found afresh so that a new one
# is never forgotten — for FUZZTIME (default 60s), one at a time. A crasher is written by Go to
# the package's testdata/fuzz/FuzzXxx/ and fails the run; keep it there as a regression seed.
#
# Go 1.26's fuzz coordinator can fail a target at the end of a duration-based -fuzztime with a
# bare "context deadline exceeded" and no crasher, when a worker has not stopped in time on a
# loaded machine (golang/go#75804, fixed in Go 1.27). That failure, and only it — the output's
# one message, no new file in the target's corpus — runs the target once more; a second one
# fails the run like any other.
set -euo pipefail
FUZZTIME="${FUZZTIME:-60s}"
cd "$(dirname "$0")/../.."

# corpus lists the files of a target's testdata/fuzz directory.
corpus() { ls "$1/testdata/fuzz/$2" 2>/dev/null || true; }

# fuzz runs one target; it prints go test's output without the progress lines and returns its
# status.
fuzz() { go test -run '^$' -fuzz "^${2}\$" -fuzztime "$FUZZTIME" "$1" 2>&1 | grep -v '^fuzz: elapsed'; return "${PIPESTATUS[0]}"; }

n=0
while read -r file; do
  pkg="./$(dirname "$file")"
  for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$file"); do
    echo "fuzz: $target in $pkg for $FUZZTIME"
    before=$(corpus "$pkg" "$target")
    if ! out=$(fuzz "$pkg" "$target"); then
      echo "$out"
      msgs=$(echo "$out" | grep -vE '^(--- FAIL: |FAIL|exit status |warning: |ok )' | sed 's/^ *//' | sort -u)
      if [ "$msgs" = "context deadline exceeded" ] && [ "$(corpus "$pkg" "$target")" = "$before" ]; then
        echo "fuzz: $target: Go's fuzz coordinator stopped late, no crasher (golang/go#75804); running it once more"
        fuzz "$pkg" "$target" || exit 1
      else
        exit 1
      fi
    else
      echo "$out"
    fi
    n=$((n + 1))
  done
done < <(git ls-files -- '*_test.go' | xargs grep -l '^func Fuzz' | sort)
echo "fuzz: $n targets, $FUZZTIME each, no crasher"
