#!/usr/bin/env bash
# gpuschedd --check-config (issue 30): the effective configuration of a good file, which read
# back as a file gives itself again; each error named by its key; tokens never printed.
#
# Usage: test_check_config.sh GPUSCHEDD EXAMPLE_JSON
set -euo pipefail

gpuschedd=$1 example=$2
# shellcheck source=tests/shell/lib.sh
. "$(dirname "$0")/lib.sh"

# check FILE: runs the check; its output in $dir/out, its errors in $dir/err, its status in rc.
check() {
	rc=0
	"$gpuschedd" --check-config "$1" >"$dir/out" 2>"$dir/err" || rc=$?
}

# The example: exit 0, every key of the file in the output with the file's value, defaults for
# the rest, tokens only as salted hashes.
check "$example"
[ "$rc" = 0 ] || fail "the example config: exit $rc: $(cat "$dir/err")"
jq -e . "$dir/out" >/dev/null || fail "the output is not JSON"
jq -e --slurpfile f "$example" '
	.listen == $f[0].listen and .db == $f[0].db and
	(.adapters | length) == ($f[0].adapters | length) and
	([.tenants[].name] == [$f[0].tenants[].name]) and
	all(.tenants[]; .token_hash | test("^b2\\$")) and
	.quantum_us > 0 and .max_message > 0' "$dir/out" >/dev/null ||
	fail "the effective config does not carry the file's values: $(head -c 600 "$dir/out")"
if grep -q '"token"' "$dir/out" || grep -q 'change-me' "$dir/out"; then
	fail "a token is printed in the clear"
fi

# Read back as a file, the output gives itself (the salted hashes are kept as they are).
cp "$dir/out" "$dir/effective.json"
check "$dir/effective.json"
[ "$rc" = 0 ] || fail "the effective config does not check: $(cat "$dir/err")"
cmp -s "$dir/out" "$dir/effective.json" || fail "the effective config changed when read back"

# No file content: the defaults, complete.
echo '{}' >"$dir/empty.json"
check "$dir/empty.json"
[ "$rc" = 0 ] || fail "{}: exit $rc"
jq -e '(.adapters | length) == 1 and (.adapters[0].nodes | length) == 3 and
	(.listen | length) == 1' "$dir/out" >/dev/null || fail "defaults: $(cat "$dir/out")"

# Errors: exit 1, the key named, nothing on stdout.
expect_error() {
	local what=$1 text=$2 want=$3
	printf '%s\n' "$text" >"$dir/bad.json"
	check "$dir/bad.json"
	[ "$rc" = 1 ] || fail "$what: exit $rc"
	[ ! -s "$dir/out" ] || fail "$what: printed a configuration"
	grep -qF -- "$want" "$dir/err" || fail "$what: the error does not name $want: $(cat "$dir/err")"
}
expect_error "a misspelt key" '{"quantum_uss": 1000}' 'quantum_uss'
expect_error "a misspelt nested key" '{"adapters": [{"nodes": [{"name": "n", "paging": true, "knd": "3d"}]}]}' 'adapters[0].nodes[0].knd'
expect_error "a wrong type" '{"quantum_us": "fast"}' '"quantum_us"'
expect_error "an unknown value" '{"adapters": [{"policy": "fairish"}]}' '"policy"'
expect_error "a cross-field rule" '{"adapters": [{"nodes": [{"name": "n"}]}]}' 'paging node'
expect_error "broken JSON" '{"quantum_us": 1000,' 'bad.json'
expect_error "two tenants, one token" '{"tenants": [{"name": "a", "token": "t"}, {"name": "b", "token": "t"}]}' 'unique'

# Two tenants given by token_hash alone are two tenants (they were taken for one: both had
# the empty token).
h1=$(echo one | "$gpuschedd" --hash-token)
h2=$(echo two | "$gpuschedd" --hash-token)
printf '{"tenants": [{"name": "a", "token_hash": "%s"}, {"name": "b", "token_hash": "%s"}]}\n' \
	"$h1" "$h2" >"$dir/hashed.json"
check "$dir/hashed.json"
[ "$rc" = 0 ] || fail "two hashed tenants: $(cat "$dir/err")"

echo "test_check_config: the example's effective configuration reads back as itself; 7 kinds of error named by key"
