#!/usr/bin/env bash
# The systemd units in deploy/ (issue 30): `systemd-analyze verify` finds nothing to say about
# them (it exits 0 even for an unknown key, so any output fails), gpuschedd's is Type=notify
# with a watchdog and its hardening, and the flags of its ExecStart are the daemon's (checked
# with --check-config on the example configuration).
#
# Usage: test_units.sh GPUSCHEDD GPUSCHED_RELAY DEPLOY_DIR
set -euo pipefail

gpuschedd=$1 relay=$2 deploy=$3
# shellcheck source=tests/shell/lib.sh
. "$(dirname "$0")/lib.sh"

command -v systemd-analyze >/dev/null || fail "systemd-analyze is not installed (Debian: systemd)"

for unit in "$deploy"/*.service; do
	name=$(basename "$unit")
	# The programs where the build has them (the unit names their installed place).
	sed -e "s|/usr/local/bin/gpuschedd|$gpuschedd|" \
		-e "s|/usr/local/bin/gpusched-relay|$relay|" "$unit" >"$dir/$name"
	out=$(systemd-analyze verify "$dir/$name" 2>&1) || fail "$name: $out"
	[ -z "$out" ] || fail "systemd-analyze verify $name: $out"
done

u="$deploy/gpuschedd.service"
for want in '^Type=notify$' '^NotifyAccess=main$' '^WatchdogSec=[1-9]' '^NoNewPrivileges=yes$' \
	'^ProtectSystem=strict$' '^DevicePolicy=closed$' '^DeviceAllow=/dev/dri rw$'; do
	grep -Eq "$want" "$u" || fail "gpuschedd.service has no line matching $want"
done
if grep -q '^MemoryDenyWriteExecute=yes' "$u"; then
	fail "MemoryDenyWriteExecute would stop lavapipe compiling kernels"
fi

# ExecStart's options, with the example configuration in place of /etc's.
exec_start=$(sed -n 's/^ExecStart=//p' "$u")
read -r -a words <<<"$exec_start"
args=()
for ((i = 1; i < ${#words[@]}; i++)); do
	if [ "${words[$i]}" = --config ]; then
		args+=(--check-config "$deploy/gpuschedd.example.json")
		i=$((i + 1))
	else
		args+=("${words[$i]}")
	fi
done
"$gpuschedd" "${args[@]}" >"$dir/effective.json" 2>"$dir/err" ||
	fail "ExecStart's options do not check: $(cat "$dir/err")"

echo "test_units: $(ls "$deploy"/*.service | wc -l) units verify without a word; gpuschedd's is Type=notify with a watchdog and its options check"
