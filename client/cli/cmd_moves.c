/*
 * gpusched moves: what the video memory manager did to the tenant's allocations, from the
 * audit record. The table and JSON helpers also serve `alloc show`.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char help[] =
        "Usage: gpusched moves [--allocation ID] [--device ID] [--packet ID] [--limit N]\n"
        "                      [--before SEQ] [--json]\n"
        "Lists the video memory manager's actions on the tenant's allocations, newest first:\n"
        "placements at creation (PLACE), page-ins for a packet or alloc resident (PAGE_IN),\n"
        "evictions to make room (EVICT), alloc transfer (TRANSFER), alloc evict\n"
        "(EVICT_REQUEST), alloc resident of an allocation already resident (RESIDENT),\n"
        "slides within a segment to open a hole (COMPACT) and frees at destruction (FREE).\n"
        "\n"
        "Options:\n"
        "  --allocation ID  only this allocation's moves\n"
        "  --device ID      only moves of this device's allocations\n"
        "  --packet ID      only moves made by this paging packet, or for this render packet\n"
        "  --limit N        at most N moves (default 100, at most 10000)\n"
        "  --before SEQ     only moves older than SEQ (to page back)\n"
        "  --json           an array of objects: seq, time_ns, allocation, device, kind,\n"
        "                   from_segment, from_offset, to_segment, to_offset, bytes,\n"
        "                   transfer_flags (raw value), transfer_flag_names, pieces, packet,\n"
        "                   for_packet, reason, offsets_withheld (true: the offsets are 0\n"
        "                   because only administrators are told them)\n"
        "\n"
        "Columns: FROM and TO are SEGMENT:OFFSET (SEGMENT alone for a tenant that is not an\n"
        "administrator), \"system\" for system memory and \"-\" for\n"
        "nowhere (before a PLACE, after a FREE); PACKET is the paging packet that moved the\n"
        "bytes, FOR the render packet they were moved for.\n";

/* "1:0x5000", "system" or "-" (nowhere: the source of a PLACE, the target of a FREE). */
static void format_place(uint32_t segment, uint64_t offset, bool nowhere, bool withheld, char *buf,
                         size_t cap)
{
	if (nowhere)
		snprintf(buf, cap, "-");
	else if (segment == 0)
		snprintf(buf, cap, "system");
	else if (withheld)
		snprintf(buf, cap, "%" PRIu32, segment);
	else
		snprintf(buf, cap, "%" PRIu32 ":0x%" PRIx64, segment, offset);
}

static void format_id(uint64_t id, char *buf, size_t cap)
{
	if (id)
		snprintf(buf, cap, "%" PRIu64, id);
	else
		snprintf(buf, cap, "-");
}

json_t *cli_json_move(const void *move)
{
	const gs_move *m = move;
	json_t *o = json_object();

	json_object_set_new(o, "seq", cli_json_u64(m->seq));
	json_object_set_new(o, "time_ns", cli_json_u64(m->time_ns));
	json_object_set_new(o, "allocation", cli_json_u64(m->allocation));
	json_object_set_new(o, "device", cli_json_u64(m->device));
	json_object_set_new(o, "kind", json_string(gs_move_kind_name(m->kind)));
	json_object_set_new(o, "from_segment", json_integer(m->from_segment));
	json_object_set_new(o, "from_offset", cli_json_u64(m->from_offset));
	json_object_set_new(o, "to_segment", json_integer(m->to_segment));
	json_object_set_new(o, "to_offset", cli_json_u64(m->to_offset));
	json_object_set_new(o, "offsets_withheld", json_boolean(m->offsets_withheld));
	json_object_set_new(o, "bytes", cli_json_u64(m->bytes));
	json_object_set_new(o, "transfer_flags", json_integer(m->transfer_flags));
	json_object_set_new(o, "transfer_flag_names",
	                    cli_json_flag_names(gs_transfer_flag_names, m->transfer_flags));
	json_object_set_new(o, "pieces", json_integer(m->pieces));
	json_object_set_new(o, "packet", cli_json_u64(m->packet));
	json_object_set_new(o, "for_packet", cli_json_u64(m->for_packet));
	json_object_set_new(o, "reason", json_string(m->reason));
	return o;
}

/* The FLAGS cell of a move: its transfer flags by name, "-" for none. */
static int format_flags(const gs_move *m, char *buf, size_t cap)
{
	if (!m->transfer_flags)
		return snprintf(buf, cap, "-");
	gs_flags_format(gs_transfer_flag_names, m->transfer_flags, buf, cap);
	return (int)strlen(buf);
}

void cli_print_moves(const gs_move *moves, size_t n, const char *indent)
{
	char when[40], from[40], to[40], bytes[32], flags[160], packet[24], forp[24];
	int fw = (int)strlen("FLAGS");

	/* Flag names vary from "-" to four names: the column takes the widest. */
	for (size_t i = 0; i < n; i++) {
		int w = format_flags(&moves[i], flags, sizeof(flags));
		if (w > fw)
			fw = w;
	}
	/* Sequence numbers, handles and packet ids are opaque values below 2^53: 16 digits. */
	printf("%s%-16s %-23s %-16s %-13s %-18s %-18s %10s %6s %-16s %-16s %-*s %s\n", indent,
	       "SEQ", "TIME", "ALLOC", "KIND", "FROM", "TO", "BYTES", "PIECES", "PACKET", "FOR", fw,
	       "FLAGS", "REASON");
	for (size_t i = 0; i < n; i++) {
		const gs_move *m = &moves[i];

		cli_format_time(m->time_ns, when, sizeof(when));
		format_place(m->from_segment, m->from_offset,
		             m->kind == GS_MOVE_PLACE && m->from_segment == 0, m->offsets_withheld,
		             from, sizeof(from));
		format_place(m->to_segment, m->to_offset,
		             m->kind == GS_MOVE_FREE && m->to_segment == 0, m->offsets_withheld, to,
		             sizeof(to));
		cli_format_bytes(m->bytes, bytes, sizeof(bytes));
		format_flags(m, flags, sizeof(flags));
		format_id(m->packet, packet, sizeof(packet));
		format_id(m->for_packet, forp, sizeof(forp));
		printf("%s%-16" PRIu64 " %-23s %-16" PRIu64 " %-13s %-18s %-18s %10s %6" PRIu32
		       " %-16s %-16s %-*s %s\n",
		       indent, m->seq, when, m->allocation, gs_move_kind_name(m->kind), from, to,
		       bytes, m->pieces, packet, forp, fw, flags, m->reason);
	}
	if (n == 0)
		printf("%s(no moves)\n", indent);
}

static const cli_opt moves_opts[] = {
        {"allocation", CLI_ARG_U64, offsetof(gs_moves_filter, allocation)},
        {"device", CLI_ARG_U64, offsetof(gs_moves_filter, device)},
        {"packet", CLI_ARG_U64, offsetof(gs_moves_filter, packet)},
        {"limit", CLI_ARG_U32, offsetof(gs_moves_filter, limit), .min = 1, .max = 10000},
        {"before", CLI_ARG_U64, offsetof(gs_moves_filter, before_seq)},
};

static const cli_syntax moves_syntax = {help, CLI_OPTS(moves_opts)};

static void print_moves(const void *items, size_t n)
{
	cli_print_moves(items, n, "");
}

int cmd_moves(cli *ctx, int argc, char **argv)
{
	gs_moves_filter filter = {0};
	gs_move *moves = NULL;
	size_t n = 0;
	int rv;

	rv = cli_start(ctx, argc, argv, &moves_syntax, &filter);
	if (rv != CLI_CONTINUE)
		return rv;
	rv = gs_moves(ctx->client, &filter, &moves, &n);
	int st = rv;
	rv = cli_list_result(ctx, rv, moves, n, sizeof(*moves), cli_json_move, print_moves);
	/* A full page is never cut silently (on stderr, so --json stays an array). */
	if (st == 0 && n > 0 && n == (filter.limit ? filter.limit : 100))
		cli_warn(
		        ctx,
		        "%zu moves, the limit (--limit, at most 10000): there may be more; the next"
		        " page: --before %" PRIu64,
		        n, moves[n - 1].seq);
	gs_moves_free(moves, n);
	return rv;
}
