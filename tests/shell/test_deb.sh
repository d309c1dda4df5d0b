#!/usr/bin/env bash
# The Debian package, round trip (issue 30): build it (cpack) from SOURCE_DIR in a build of its
# own with the prefix /usr, install it with dpkg -i, check what it put where (programs, the
# shared library with its header and pkg-config file, man pages, units, a conffile, the system
# user), check its configuration, start gpuschedd as its unit does (its user, its ExecStart),
# talk to it with the CLI and with a C program built against the installed library, stop it,
# and purge: nothing of the package is left but the audit data, which is kept by design.
#
# Usage: test_deb.sh SOURCE_DIR
# Needs root (dpkg -i). Skipped (exit 77) when not root, or when a package gpusched is
# installed already (it would be replaced).
set -euo pipefail

src=$1
gpuschedd=/usr/bin/gpuschedd
# shellcheck source=tests/shell/lib.sh
. "$(dirname "$0")/lib.sh"

if [ "$(id -u)" -ne 0 ]; then
	echo "test_deb: skipped: dpkg -i needs root"
	exit 77
fi
if dpkg-query -W -f='${Status}' gpusched 2>/dev/null | grep -q installed; then
	echo "test_deb: skipped: a gpusched package is installed already"
	exit 77
fi
state_existed=false
[ -e /var/lib/gpusched ] && state_existed=true
purge() {
	dpkg --purge gpusched >/dev/null 2>&1 || true
	if ! $state_existed; then rm -rf /var/lib/gpusched; fi
	rm -rf /run/gpusched
}
trap 'purge; cleanup' EXIT

# ---- build ----
build="$dir/build"
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGS_BUILD_TESTS=OFF \
	-DCMAKE_INSTALL_PREFIX=/usr >"$dir/cmake.log" 2>&1 || fail "cmake: $(tail -5 "$dir/cmake.log")"
cmake --build "$build" -j"$(nproc)" --target package >"$dir/build.log" 2>&1 ||
	fail "cpack: $(tail -20 "$dir/build.log")"
deb=$(ls "$build"/gpusched_*.deb)
dpkg-deb -f "$deb" Depends | grep -q 'libnng1' || fail "Depends lacks the libraries: $(dpkg-deb -f "$deb" Depends)"
dpkg-deb -f "$deb" Depends | grep -q 'adduser' || fail "Depends lacks adduser"

# ---- install ----
dpkg -i "$deb" >"$dir/dpkg.log" 2>&1 || fail "dpkg -i: $(cat "$dir/dpkg.log")"
dpkg -L gpusched >"$dir/files"
for f in /usr/bin/gpuschedd /usr/bin/gpusched /usr/bin/gpusched-relay /usr/bin/gpusched-sim \
	/usr/include/gpusched/gpusched.h /usr/include/gpusched/wddm.h \
	/usr/share/gpusched/audit.sql /etc/gpusched/gpuschedd.json \
	/usr/lib/systemd/system/gpuschedd.service /usr/lib/systemd/system/gpusched-relay.service \
	/usr/share/man/man8/gpuschedd.8 /usr/share/man/man1/gpusched.1 \
	/usr/share/man/man1/gpusched-sim.1; do
	grep -qx "$f\(.gz\)\?" "$dir/files" || [ -e "$f" ] || [ -e "$f.gz" ] || fail "not installed: $f"
done
ls /usr/lib/*/libgpusched.so.0 >/dev/null 2>&1 || fail "libgpusched.so.0 is not installed"
dpkg-query -W -f='${Conffiles}\n' gpusched | grep -q /etc/gpusched/gpuschedd.json ||
	fail "/etc/gpusched/gpuschedd.json is not a conffile"
getent passwd gpusched >/dev/null || fail "no system user gpusched"
[ "$(stat -c %U /var/lib/gpusched)" = gpusched ] || fail "/var/lib/gpusched is not gpusched's"
grep -q "^ExecStart=/usr/bin/gpuschedd --config /etc/gpusched/gpuschedd.json" \
	/usr/lib/systemd/system/gpuschedd.service || fail "the installed unit names other paths"
out=$(systemd-analyze verify /usr/lib/systemd/system/gpuschedd.service 2>&1) && [ -z "$out" ] ||
	fail "systemd-analyze verify: $out"
nm -D --defined-only /usr/lib/*/libgpusched.so.0 | awk '{print $3}' | grep -v '^gs_' |
	grep -v '^GPUSCHED_0$' >"$dir/exported" || true
[ ! -s "$dir/exported" ] || fail "the library exports more than gs_*: $(head -5 "$dir/exported")"

# ---- the configuration, and the daemon as its unit starts it ----
"$gpuschedd" --check-config /etc/gpusched/gpuschedd.json >"$dir/effective.json" ||
	fail "the installed configuration does not check"
exec_start=$(sed -n 's/^ExecStart=//p' /usr/lib/systemd/system/gpuschedd.service)
install -d -o gpusched -g gpusched -m 0755 /run/gpusched # RuntimeDirectory=gpusched
read -r -a cmd <<<"$exec_start"
mkfifo "$dir/daemon.out"
setpriv --reuid gpusched --regid gpusched --init-groups "${cmd[@]}" >"$dir/daemon.out" \
	2>"$dir/daemon.log" &
daemon_pid=$!
exec {fd}<"$dir/daemon.out"
ready=
while IFS= read -r -t 30 line <&"$fd"; do
	case $line in *ready*) ready=1 && break ;; esac
done
[ -n "$ready" ] || fail "the installed daemon did not become ready"
cat <&"$fd" >/dev/null &
url=ipc:///run/gpusched/gpusched.sock
# The installed configuration: the socket is root's and the group gpusched's, 0660.
[ "$(stat -c '%a %G' /run/gpusched/gpusched.sock)" = "660 gpusched" ] ||
	fail "the socket is $(stat -c '%a %U:%G' /run/gpusched/gpusched.sock)"
admin_token=""
/usr/bin/gpusched --url "$url" info >"$dir/info.out" ||
	fail "gpusched info: $(cat "$dir/info.out")"
# Nobody else reaches it.
if setpriv --reuid nobody --regid nogroup --clear-groups /usr/bin/gpusched --url "$url" \
	--timeout 3000 info >/dev/null 2>&1; then
	fail "a user outside the group gpusched reached the daemon"
fi
[ -e /var/lib/gpusched/audit.db ] || fail "no audit file in /var/lib/gpusched"

# A program built against the installed library, through pkg-config.
cat >"$dir/client.c" <<'C'
#include <gpusched.h>
#include <stdio.h>
int main(int argc, char **argv)
{
	gs_client *c;
	gs_daemon_info *info;
	if (argc < 3 || gs_connect(argv[1], argv[2], &c) != 0)
		return 1;
	int rv = gs_info(c, &info);
	if (rv == 0) {
		printf("adapters %u\n", (unsigned)info->adapter_count);
		gs_info_free(info);
	}
	gs_close(c);
	return rv == 0 ? 0 : 1;
}
C
# shellcheck disable=SC2046
cc -o "$dir/client" "$dir/client.c" $(pkg-config --cflags --libs gpusched) ||
	fail "a program does not build against the installed library"
"$dir/client" "$url" "$admin_token" | grep -q "adapters 1" || fail "the program's gs_info failed"
# The Python package, installed for Debian's python3, finds the installed library (byte code
# written: the purge must not leave it).
env -u PYTHONPATH -u GPUSCHED_LIBRARY -u PYTHONDONTWRITEBYTECODE /usr/bin/python3 -c \
	"import gpusched, sys; i = gpusched.connect(sys.argv[1]).info(); assert i['version'] == gpusched.__version__, i" \
	"$url" || fail "the installed Python package does not reach the daemon"

kill -TERM "$daemon_pid"
wait "$daemon_pid" || fail "the daemon did not stop cleanly"
daemon_pid=

# ---- purge ----
dpkg --purge gpusched >"$dir/purge.log" 2>&1 || fail "dpkg --purge: $(cat "$dir/purge.log")"
while read -r f; do
	[ -d "$f" ] && continue
	if [ -e "$f" ]; then fail "left after purge: $f"; fi
done <"$dir/files"
[ ! -e /etc/gpusched ] || fail "/etc/gpusched left after purge"
[ ! -e /usr/lib/python3/dist-packages/gpusched ] || fail "the Python package left files after purge"
if getent passwd gpusched >/dev/null; then fail "the user gpusched is left after purge"; fi
[ -e /var/lib/gpusched/audit.db ] || fail "the audit data went with the purge (it is kept by design)"
echo "test_deb: $(basename "$deb") installed, served info to the CLI and to a program built with pkg-config, purged leaving only /var/lib/gpusched"
