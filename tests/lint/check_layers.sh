#!/usr/bin/env bash
# Checks the daemon's layering from its #include lines (docs/architecture.md): calls can only
# go where the includes let them (an undeclared function does not compile with -Werror), so
# these rules keep every call pointing down.
#
#   rpc/     requests: may include anything below it
#   vidsch/  the scheduler: never rpc/
#   vidmm/   the memory manager: never rpc/ or vidsch/ (the scheduler calls it, not back)
#   engine/  the backends: only engine/, core/log.h, core/list.h, core/util.h and the wire contract
#   audit/   the audit: only audit/, core/log.h, core/list.h, core/util.h, core/wire_id.h (packets.id
#            is the wire id) and the wire contract
#   core/    the shared model: never rpc/; from vidsch/ and vidmm/ only the self-contained data
#            structures it embeds (LEAF below), which include nothing of the daemon but
#            core/list.h and each other
#   lifecycle.c, main.c: the top; anything
#
# Usage: tests/lint/check_layers.sh [SERVER_DIR]   (default: server/ beside tests/)
# Prints each violation as FILE:LINE: rule, and exits 1 if there is any.
set -u
server=${1:-"$(cd "$(dirname "$0")/../.." && pwd)/server"}
cd "$server" || exit 2

LEAF='vidsch/policy.h vidsch/runq.h vidmm/heap.h'
bad=0

# violation FILE LINE TEXT
violation() {
	printf '%s:%s: %s\n' "server/$1" "$2" "$3"
	bad=1
}

is_leaf() {
	for l in $LEAF; do [ "$1" = "$l" ] && return 0; done
	return 1
}

# Every project include of a file: "LINE TARGET" pairs (system and generated headers have no
# folder and are not ours to check, except the folderless wire-contract headers, allowed
# everywhere).
includes() {
	grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$1" |
		sed -E 's/^([0-9]+):[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1 \2/'
}

check_file() {
	local f=$1 layer=${1%%/*}
	[ "$layer" = "$f" ] && return 0 # lifecycle.c, main.c, lifecycle.h: the top
	local line target tl
	while read -r line target; do
		[ -n "$target" ] || continue
		tl=${target%%/*}
		[ "$tl" = "$target" ] && continue # folderless: the wire contract (isa.h, wddm.h, ...)
		[ "$tl" = "$layer" ] && continue  # its own folder
		case "$layer" in
		rpc) ;;
		vidsch)
			[ "$tl" = rpc ] && violation "$f" "$line" "vidsch/ must not include $target (rpc is above it)" ;;
		vidmm)
			case "$tl" in
			rpc | vidsch) violation "$f" "$line" "vidmm/ must not include $target (the scheduler calls the memory manager, not the other way)" ;;
			esac
			if is_leaf "$f"; then
				[ "$target" = core/list.h ] || is_leaf "$target" ||
					violation "$f" "$line" "$f is a self-contained data structure: it may include only core/list.h and other leaf headers"
			fi
			;;
		engine | audit)
			case "$target" in
			core/log.h | core/list.h | core/util.h) ;;
			core/wire_id.h) [ "$layer" = audit ] || violation "$f" "$line" "engine/ must not include $target" ;;
			*) violation "$f" "$line" "$layer/ must not include $target (it is below every daemon layer)" ;;
			esac
			;;
		core)
			case "$tl" in
			rpc) violation "$f" "$line" "core/ must not include $target (rpc is above it)" ;;
			vidsch | vidmm)
				is_leaf "$target" ||
					violation "$f" "$line" "core/ may include only the leaf data structures of $tl/ ($LEAF), not $target" ;;
			esac
			;;
		*) violation "$f" "$line" "unknown layer folder server/$layer/" ;;
		esac
		# Leaf headers of vidsch/ are held to the same rule as those of vidmm/.
		if [ "$layer" = vidsch ] && is_leaf "$f"; then
			[ "$target" = core/list.h ] || is_leaf "$target" ||
				violation "$f" "$line" "$f is a self-contained data structure: it may include only core/list.h and other leaf headers"
		fi
	done < <(includes "$f")
}

while IFS= read -r f; do
	check_file "${f#./}"
done < <(find . -name '*.[ch]' | sort)

if [ "$bad" -ne 0 ]; then
	echo "check_layers: the include rules above are violated (see docs/architecture.md)" >&2
	exit 1
fi
echo "check_layers: every include in server/ points down"
