#!/usr/bin/env bash
# deploy/container/Containerfile against the real programs (issue 30), without building it
# (test_container_build.sh builds and runs the image, as root with buildah). Checked here:
#  - the entrypoint is the installed daemon (/usr/bin, the package's prefix) and its options,
#    with the container's configuration, pass --check-config;
#  - the final stage runs as a user that is not root;
#  - the audit file's directory and the socket's are volumes; every TCP port the
#    configuration listens on is exposed, and every exposed port is one it listens on;
#  - the health check's command and options are the CLI's;
#  - the build stage installs every -dev package deploy/setup.sh does;
#  - every file it copies from the repository exists.
#
# Usage: test_container.sh GPUSCHEDD GPUSCHED SOURCE_DIR
set -euo pipefail

gpuschedd=$1 gpusched=$2 src=$3
# shellcheck source=tests/shell/lib.sh
. "$(dirname "$0")/lib.sh"
cf="$src/deploy/container/Containerfile"
[ -f "$cf" ] || fail "no $cf"
# The final stage: from the last FROM on.
last=$(grep -n '^FROM ' "$cf" | tail -1 | cut -d: -f1)
tail -n +"$last" "$cf" >"$dir/final"

# The entrypoint, as JSON.
entry=$(sed -n 's/^ENTRYPOINT //p' "$dir/final")
prog=$(jq -r '.[0]' <<<"$entry")
[ "$prog" = /usr/bin/gpuschedd ] || fail "ENTRYPOINT runs $prog, not the package's /usr/bin/gpuschedd"
[ "$(jq -r '.[1]' <<<"$entry")" = --config ] || fail "ENTRYPOINT does not give --config: $entry"
config_in_image=$(jq -r '.[2]' <<<"$entry")
# The configuration it copies to that path.
copied=$(sed -n "s|^COPY \([^ ]*\) $config_in_image\$|\1|p" "$dir/final")
[ -n "$copied" ] && [ -f "$src/$copied" ] || fail "nothing copied to $config_in_image"
"$gpuschedd" --check-config "$src/$copied" >"$dir/effective.json" 2>"$dir/err" ||
	fail "the container's configuration does not check: $(cat "$dir/err")"

# A user that is not root.
user=$(sed -n 's/^USER //p' "$dir/final" | tail -1)
[ -n "$user" ] && [ "$user" != root ] && [ "$user" != 0 ] || fail "the final stage runs as root"

# Volumes: the audit file's directory and the socket's.
volumes=$(sed -n 's/^VOLUME //p' "$dir/final")
db_dir=$(dirname "$(jq -r .db "$dir/effective.json")")
jq -e --arg d "$db_dir" 'index($d) != null' <<<"$volumes" >/dev/null ||
	fail "the audit's directory $db_dir is not a volume: $volumes"
for url in $(jq -r '.listen[] | if type == "string" then . else .url end' "$dir/effective.json"); do
	case $url in
	ipc://*)
		sock_dir=$(dirname "${url#ipc://}")
		jq -e --arg d "$sock_dir" 'index($d) != null' <<<"$volumes" >/dev/null ||
			fail "the socket's directory $sock_dir is not a volume: $volumes"
		;;
	esac
done

# Ports: exposed = listened on (requests and metrics).
listened=$(jq -r '[.listen[] | if type == "string" then . else .url end] + [.metrics] |
	.[] | select(test("^(tcp|tls\\+tcp|http)://")) | capture(":(?<p>[0-9]+)$").p' \
	"$dir/effective.json" | sort -u)
exposed=$(sed -n 's/^EXPOSE //p' "$dir/final" | tr ' ' '\n' | sed 's|/tcp||' | sort -u)
[ "$listened" = "$exposed" ] || fail "exposed ports ($exposed) are not those listened on ($listened)"

# The health check: the CLI's command and options.
health=$(sed -n 's/.*CMD \(\[.*\]\)$/\1/p' "$dir/final")
[ "$(jq -r '.[0]' <<<"$health")" = /usr/bin/gpusched ] || fail "HEALTHCHECK runs another program"
readarray -t hargs < <(jq -r '.[1:][]' <<<"$health")
"$gpusched" "${hargs[@]}" --help >/dev/null 2>&1 || fail "the CLI refuses the health check's options: ${hargs[*]}"
sock=$(jq -r '.listen[0]' "$dir/effective.json")
[ "${hargs[1]}" = "$sock" ] || fail "HEALTHCHECK asks ${hargs[1]}, the daemon listens on $sock"

# The build stage installs what setup.sh installs for building.
build_stage=$(head -n "$((last - 1))" "$cf")
for pkg in $(sed -n 's/^  \([a-z0-9.+-]*-dev\)\b.*/\1/p' "$src/deploy/setup.sh" | grep -v cmocka); do
	grep -qw -- "$pkg" <<<"$build_stage" || fail "the build stage lacks $pkg (deploy/setup.sh has it)"
done

# Every file copied from the repository exists.
while read -r from; do
	[ "$from" = . ] || [ -e "$src/$from" ] || fail "COPY of a missing file: $from"
done < <(grep '^COPY ' "$cf" | grep -v -- '--from=' | awk '{print $2}')

echo "test_container: the Containerfile's entrypoint, configuration, user, volumes, ports, health check and build packages agree with the programs (no image built: no registry here)"
