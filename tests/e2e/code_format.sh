#!/usr/bin/env bash
# The C++ sources follow the repository's .clang-format (issue 40): a change that is not
# formatted fails here, naming the files (fix: git clang-format, or clang-format -i FILE).
source "$(dirname "$0")/common.bash"
SRC="${MT_SOURCE_DIR:-$(dirname "$0")/../..}"
cd "$SRC" || exit 1
if ! command -v clang-format > /dev/null; then fail "clang-format is not installed"; finish; fi
unformatted=()
while IFS= read -r f; do
  clang-format --dry-run -Werror "$f" > /dev/null 2>&1 || unformatted+=("$f")
done < <(git ls-files 'src/*.cc' 'src/*.h' 'apps/*.cc' 'apps/*.h' 'tests/*.cc' 'bench/*.cc')
[ ${#unformatted[@]} -eq 0 ] && pass "every C++ source follows .clang-format" ||
  fail "${#unformatted[@]} files differ from .clang-format: ${unformatted[*]:0:10}"
# The check must be able to fail: a line the style would break is reported.
printf 'int f(int a,int b){return a+b;}\n' > "$WORK/bad.cc"
clang-format --style=file:"$SRC/.clang-format" --dry-run -Werror "$WORK/bad.cc" > /dev/null 2>&1 &&
  fail "an unformatted file passes" || pass "an unformatted file is caught"
finish
