#!/usr/bin/env bash
# fuzz.sh FUZZTIME — run every Go fuzz target of the workspace for FUZZTIME each
# (a duration such as 10s, or a count such as 500x). Targets are found in the
# modules listed in go.work; each runs alone in its package directory:
#   go test -run '^$' -fuzz '^Name$' -fuzztime FUZZTIME
# Stops with a non-zero status at the first failure (a crasher is saved under
# the package's testdata/fuzz/Name/ by go test).
set -euo pipefail

FUZZTIME="${1:-${FUZZTIME:-10s}}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# Modules of the workspace: the `use` entries of go.work (both forms), else the known four.
modules=()
if [[ -f go.work ]]; then
	while IFS= read -r m; do
		[[ -n "$m" ]] && modules+=("$m")
	done < <(awk '
		/^use[ \t]*\(/ { inuse = 1; next }
		inuse && /^\)/ { inuse = 0; next }
		inuse { sub(/\/\/.*/, ""); gsub(/[ \t"]/, ""); if ($0 != "") print; next }
		/^use[ \t]+[^( \t]/ { sub(/\/\/.*/, ""); gsub(/"/, ""); print $2 }
	' go.work)
fi
if [[ ${#modules[@]} -eq 0 ]]; then
	modules=(./libs ./services/runner ./tools/mcpbus ./tests)
fi

count=0
for mod in "${modules[@]}"; do
	[[ -d "$mod" ]] || continue
	# Package directories with a candidate fuzz function in a test file.
	while IFS= read -r dir; do
		# Ask go test for the real list (build tags, test packages) in that directory.
		if ! list="$(cd "$dir" && go test -list '^Fuzz' . 2>&1)"; then
			echo "fuzz.sh: listing fuzz targets in $dir failed:" >&2
			echo "$list" >&2
			exit 1
		fi
		while IFS= read -r name; do
			[[ -z "$name" ]] && continue
			count=$((count + 1))
			echo "=== fuzz $dir $name ($FUZZTIME)"
			if ! (cd "$dir" && go test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" .); then
				echo "fuzz.sh: FAIL $name in $dir (see $dir/testdata/fuzz/$name/ for the crasher)" >&2
				exit 1
			fi
		done < <(grep -E '^Fuzz[A-Za-z0-9_]*$' <<<"$list" || true)
	done < <(grep -rlE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*\(' "$mod" 2>/dev/null |
		grep -v -e '/vendor/' -e '/testdata/' | xargs -r -n1 dirname | sort -u)
done

echo "fuzz.sh: $count fuzz targets passed (fuzztime $FUZZTIME each)"
