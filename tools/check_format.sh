#!/usr/bin/env bash
# Fails when a tracked C++ source differs from its clang-format form
# (.clang-format at the root). Usage: tools/check_format.sh [--fix]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check_format: clang-format is missing (tools/setup.sh installs it)" >&2; exit 1; }
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.h')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  echo "check_format: formatted ${#files[@]} files"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ "${#bad[@]}" -gt 0 ]; then
  echo "check_format: ${#bad[@]} file(s) differ from clang-format (run tools/check_format.sh --fix):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  clang-format --dry-run "${bad[0]}" 2>&1 | head -20 >&2
  exit 1
fi
echo "check_format: ${#files[@]} files formatted"
