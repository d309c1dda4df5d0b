#!/usr/bin/env bash
# Every function the public headers declare (client/gpusched.h, proto/wddm.h) is exported by
# libgpusched.so, and the library exports nothing but gs_ symbols: a declared function the
# linker left out fails a program (or a ctypes binding) only when it loads.
#   check_exports.sh SOURCE_DIR LIBRARY
set -euo pipefail
src=$1 lib=$2
# Comments go first (the preprocessor's -fpreprocessed keeps the rest as written).
declared=$(cat "$src/client/gpusched.h" "$src/proto/wddm.h" |
	gcc -fpreprocessed -dD -E -P -x c - | tr '\n' ' ' | grep -oE '\bgs_[a-z0-9_]+ *\(' | tr -d ' (' | sort -u)
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | sort -u)
# Function-pointer types and macros that look like calls are not functions.
missing=$(comm -23 <(echo "$declared") <(echo "$exported") | grep -vE '^gs_async_cb$' || true)
stray=$(echo "$exported" | grep -vE '^(gs_|GPUSCHED_0$)' || true)
rc=0
if [ -n "$missing" ]; then
	echo "declared but not exported by $lib:"
	echo "$missing" | sed 's/^/  /'
	rc=1
fi
if [ -n "$stray" ]; then
	echo "exported but not API:"
	echo "$stray" | sed 's/^/  /'
	rc=1
fi
[ $rc -ne 0 ] || echo "OK: $(echo "$declared" | wc -l) declared functions, all exported"
exit $rc
