#!/usr/bin/env bash
# deploy/container/Containerfile built and run for real (issue 30), with no container
# registry: the debian:12 base is made here with debootstrap from Debian's package mirror (the
# one apt uses) and imported under the name the Containerfile starts from, in a buildah store
# of the test's own (vfs, chroot isolation: no daemon, no user namespaces needed). Then:
#  - the image builds (both stages: the package from the sources, then the package installed);
#  - the daemon starts in it as the image's user, serves 100 packets to the host's CLI through
#    the socket directory mounted from the host, owned by that user;
#  - the image's health check command answers "serving";
#  - SIGTERM stops it, exit 0, with "stopped" in its log.
#
# Usage: test_container_build.sh GPUSCHED SOURCE_DIR
# Needs root, buildah and debootstrap (deploy/setup.sh installs them); skipped (77) otherwise.
set -euo pipefail

gpusched=$1 src=$2
gpuschedd=/bin/false # lib.sh's daemon helpers are not used here
# shellcheck source=tests/shell/lib.sh
. "$(dirname "$0")/lib.sh"

if [ "$(id -u)" -ne 0 ] || ! command -v buildah >/dev/null || ! command -v debootstrap >/dev/null; then
	echo "test_container_build: skipped: needs root, buildah and debootstrap"
	exit 77
fi
store=(--root "$dir/storage" --runroot "$dir/runroot" --storage-driver vfs)
ctr=
run_pid=
cat_pid=
pid=
container_cleanup() {
	# A failure after the daemon started must not leave it (or the reader of its pipe)
	# running: they hold the test's output open, and ctest waits for them to its timeout.
	[ -z "$pid" ] || kill -TERM "$pid" 2>/dev/null || true
	[ -z "$run_pid" ] || { timeout 20 tail --pid="$run_pid" -f /dev/null || kill -KILL "$run_pid"; } 2>/dev/null || true
	[ -z "$cat_pid" ] || kill "$cat_pid" 2>/dev/null || true
	[ -z "$ctr" ] || buildah "${store[@]}" rm "$ctr" >/dev/null 2>&1 || true
	buildah "${store[@]}" rm --all >/dev/null 2>&1 || true
	buildah "${store[@]}" rmi --all --force >/dev/null 2>&1 || true
	cleanup
}
trap container_cleanup EXIT

# The mirror apt uses (deb822 or one-line sources), else Debian's.
mirror=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null |
	grep -v security | head -1 || true)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $2 !~ /security/ {print $2; exit}' \
	/etc/apt/sources.list 2>/dev/null || true)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian

echo "debootstrap bookworm from $mirror"
timeout 600 debootstrap --variant=minbase bookworm "$dir/rootfs" "$mirror" >"$dir/debootstrap.log" 2>&1 ||
	fail "debootstrap: $(tail -5 "$dir/debootstrap.log")"
base=$(buildah "${store[@]}" from scratch)
mnt=$(buildah "${store[@]}" mount "$base")
cp -a "$dir/rootfs/." "$mnt/"
buildah "${store[@]}" umount "$base" >/dev/null
buildah "${store[@]}" commit -q "$base" docker.io/library/debian:12 >/dev/null
buildah "${store[@]}" rm "$base" >/dev/null
rm -rf "$dir/rootfs"

echo "buildah bud (deploy/container/Containerfile)"
timeout 1200 buildah "${store[@]}" bud --isolation chroot --pull=never -q \
	-f "$src/deploy/container/Containerfile" -t gpusched-test "$src" >"$dir/build.log" 2>&1 ||
	fail "the image does not build: $(tail -20 "$dir/build.log")"

# The socket directory from the host, owned by the image's user (its uid inside is the
# host's: chroot isolation maps nothing).
user=$(buildah "${store[@]}" inspect --format '{{.OCIv1.Config.User}}' gpusched-test)
ctr=$(buildah "${store[@]}" from gpusched-test)
uid=$(buildah "${store[@]}" run --isolation chroot "$ctr" -- id -u "$user")
mkdir -p "$dir/run"
chown "$uid" "$dir/run"
# Its "ready" line is read from a pipe (60 s at most: the first start in a fresh image
# creates the audit file), its log goes to daemon.log.
mkfifo "$dir/daemon.out"
buildah "${store[@]}" run --isolation chroot -v "$dir/run:/run/gpusched" "$ctr" -- \
	/usr/bin/gpuschedd --config /etc/gpusched/gpuschedd.json >"$dir/daemon.out" \
	2>"$dir/daemon.log" &
run_pid=$!
exec 3<"$dir/daemon.out"
ready=false
while IFS= read -r -t 60 -u 3 line; do
	case $line in *ready*) ready=true && break ;; esac
done
$ready || fail "the daemon in the image is not ready after 60 s"
cat <&3 >/dev/null &
cat_pid=$!
pid=$(pgrep -u "$uid" -x gpuschedd | head -1)
[ -n "$pid" ] || fail "no gpuschedd process of uid $uid"

url="ipc://$dir/run/gpusched.sock"
out=$("$gpusched" --url "$url" --json submit --node 1 --count 100 --inflight 8) ||
	fail "the host's CLI through the mounted socket: $out"
[ "$(jq -r .acknowledged <<<"$out")" = 100 ] || fail "not 100 packets acknowledged: $out"

# The image's own health check (its HEALTHCHECK CMD), run in the image.
health=$(sed -n 's/^ *CMD \(\[.*\]\)$/\1/p' "$src/deploy/container/Containerfile" | tail -1)
mapfile -t hc < <(jq -r '.[]' <<<"$health")
# buildah's chroot runtime re-executes itself from a sealed memfd copy; sealing it can fail
# with EBUSY while the other `buildah run` (the daemon's) is up ("Close_Fd sealing memfd copy:
# Device or resource busy", seen once in CI): that is buildah's failure, not the check's, and
# is tried again (3 times at most). The check's own failure is not.
for try in 1 2 3; do
	rc=0
	status=$(buildah "${store[@]}" run --isolation chroot -v "$dir/run:/run/gpusched" "$ctr" -- \
		"${hc[@]}" 2>&1) || rc=$?
	[ "$rc" -ne 0 ] && grep -q "sealing memfd copy" <<<"$status" || break
	echo "buildah run: $status (try $try)"
done
[ "$rc" -eq 0 ] || fail "the health check failed: $status"
grep -q "serving" <<<"$status" || fail "the health check does not say serving: $status"

kill -TERM "$pid"
rc=0
wait "$run_pid" || rc=$?
run_pid= pid=
[ "$rc" -eq 0 ] || fail "the daemon in the image exited $rc on SIGTERM"
grep -q "stopped" "$dir/daemon.log" || fail "no 'stopped' in the daemon's log"
echo "OK: image built without a registry; 100 packets served through the mounted socket; health check serving; SIGTERM exit 0"
