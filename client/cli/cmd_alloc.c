/*
 * gpusched alloc: create, destroy, list and inspect allocations, and ask the video memory
 * manager to move them (make resident, evict, transfer).
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

#define DEFAULT_SHOW_MOVES   10u
#define DEFAULT_PAGE_WAIT_MS 10000u

static const char alloc_help[] =
        "Usage: gpusched alloc create DEVICE SIZE [--segments SET] [--preference P]\n"
        "                             [--priority PRIO] [--tiled] [--display] [--json]\n"
        "       gpusched alloc destroy ID [--json]\n"
        "       gpusched alloc ls [--device ID] [--resident] [--limit N] [--json]\n"
        "       gpusched alloc show ID [--moves N] [--json]\n"
        "       gpusched alloc resident DEVICE ID... [--wait] [--timeout-ms MS] [--json]\n"
        "       gpusched alloc evict DEVICE ID... [--wait] [--timeout-ms MS] [--json]\n"
        "       gpusched alloc transfer ID SEGMENT [--flags swizzle|unswizzle] [--wait]\n"
        "                               [--timeout-ms MS] [--json]\n"
        "\n"
        "create makes an allocation of SIZE bytes (a number, or with a K, M or G suffix: KiB,\n"
        "MiB, GiB) on DEVICE (see gpusched device create) and prints its handle and where the\n"
        "memory manager placed it: a segment and offset, or \"system memory (not resident)\"\n"
        "when video memory is full (over-commit: it is paged in when a packet needs it).\n"
        "Offsets and GPU addresses are shown to administrators only (0 in --json, \"-\" in\n"
        "ls for other tenants): they would show where the neighbours' allocations lie.\n"
        "Allocations belong to the tenant, not to the connection: it lives on after the\n"
        "command exits, until alloc destroy (or device destroy).\n"
        "  --segments SET    supported segments: a bitmask of segment ids, bit n for segment\n"
        "                    n (0x6 = segments 1 and 2); default 0, every segment\n"
        "  --preference P    D3DDDI_SEGMENTPREFERENCE: its raw Value (a number), or up to five\n"
        "                    segment ids in order, each optionally \":down\" (Direction 1,\n"
        "                    top-down) or \":up\" (0), e.g. \"1,2:down\"; default none\n"
        "  --priority PRIO   minimum, low, normal (default), high, maximum, or a number\n"
        "  --tiled           a tiled allocation (kept swizzled in memory segments)\n"
        "  --display         a display surface (the target of Present)\n"
        "destroy frees an allocation once no packet uses it any more.\n"
        "\n"
        "ls lists the tenant's allocations on the adapter in handle order (handles are random,\n"
        "not the order they were made in): handle, device, size, segment (\"system\" when not\n"
        "resident in one), offset, priority, flags (tiled, display), PINNED (packets running or\n"
        "about to run that hold it in place), BUSY (packets in flight that reference it) and\n"
        "MOVES (times the memory manager moved it).\n"
        "  --device ID      only this device's allocations\n"
        "  --resident       only allocations resident in a segment now\n"
        "  --limit N        at most N (default 1000, at most 100000)\n"
        "\n"
        "show prints one allocation: size, segments, placement, residency, the packets using\n"
        "it, when a packet last used it, and its most recent moves, newest first.\n"
        "  --moves N        show at most N moves (default 10; 0: none)\n"
        "\n"
        "resident makes the allocations of DEVICE resident in video memory (each in a segment\n"
        "of its supported set, by its preference; others are evicted if needed) until they\n"
        "are evicted; evict moves them out to system memory once no packet uses them;\n"
        "transfer moves one allocation to SEGMENT (a segment id, or 0 or \"system\" for system\n"
        "memory). A tiled allocation is swizzled in memory segments and linear elsewhere:\n"
        "--flags may name the conversion the move implies (swizzle or unswizzle, or a\n"
        "DXGK_TRANSFERFLAGS number); by default the daemon chooses.\n"
        "Each prints the device's paging fence and paging sync object: the moves are done\n"
        "once that sync object reaches that fence.\n"
        "  --wait           wait for that (gs_sync_wait) before returning\n"
        "  --timeout-ms MS  how long --wait waits (default 10000; TIMEOUT after it)\n"
        "\n"
        "--json prints one JSON document: create {allocation, device, size, resident,\n"
        "segment, offset, address}, destroy {ok}, ls an array and show an object with the\n"
        "fields of the allocation (show adds \"recent_moves\", as gpusched moves --json prints\n"
        "them); resident, evict and transfer {paging_fence, paging_sync, moves}, with --wait\n"
        "also \"value\", the sync object's value after the wait.\n";

/* ---- formatting ------------------------------------------------------------------------- */

/* The name of a standard allocation priority, or NULL. */
static const char *priority_name(uint32_t priority)
{
	static const struct {
		uint32_t value;
		const char *name;
	} names[] = {
	        {GS_ALLOC_PRIORITY_MINIMUM, "MINIMUM"}, {GS_ALLOC_PRIORITY_LOW, "LOW"},
	        {GS_ALLOC_PRIORITY_NORMAL, "NORMAL"},   {GS_ALLOC_PRIORITY_HIGH, "HIGH"},
	        {GS_ALLOC_PRIORITY_MAXIMUM, "MAXIMUM"},
	};

	for (size_t i = 0; i < COUNT(names); i++)
		if (names[i].value == priority)
			return names[i].name;
	return NULL;
}

static void format_priority(uint32_t priority, char *buf, size_t cap)
{
	const char *name = priority_name(priority);

	if (name)
		snprintf(buf, cap, "%s", name);
	else
		snprintf(buf, cap, "0x%08" PRIx32, priority);
}

/* "tiled,display", "-" for none; unknown bits as hex. */
static void format_alloc_flags(uint32_t flags, char *buf, size_t cap)
{
	uint32_t rest = flags & ~GS_ALLOC_VALID_MASK;

	snprintf(buf, cap, "%s%s%s", (flags & GS_ALLOC_TILED) ? "tiled" : "",
	         (flags & GS_ALLOC_TILED) && (flags & GS_ALLOC_DISPLAY) ? "," : "",
	         (flags & GS_ALLOC_DISPLAY) ? "display" : "");
	if (rest) {
		size_t len = strlen(buf);
		snprintf(buf + len, cap - len, "%s0x%" PRIx32, len ? "," : "", rest);
	}
	if (!buf[0])
		snprintf(buf, cap, "-");
}

static json_t *status_json(const void *status)
{
	const gs_allocation_status *a = status;
	json_t *o = json_object();
	json_t *flags = json_array();
	const char *prio = priority_name(a->priority);

	if (a->flags & GS_ALLOC_TILED)
		json_array_append_new(flags, json_string("tiled"));
	if (a->flags & GS_ALLOC_DISPLAY)
		json_array_append_new(flags, json_string("display"));
	json_object_set_new(o, "allocation", cli_json_u64(a->allocation));
	json_object_set_new(o, "device", cli_json_u64(a->device));
	json_object_set_new(o, "size", cli_json_u64(a->size));
	json_object_set_new(o, "supported_segment_set", json_integer(a->supported_segment_set));
	json_object_set_new(o, "segment_preference", json_integer(a->segment_preference));
	json_object_set_new(o, "priority", json_integer(a->priority));
	json_object_set_new(o, "priority_name", prio ? json_string(prio) : json_null());
	json_object_set_new(o, "flags", json_integer(a->flags));
	json_object_set_new(o, "flag_names", flags);
	json_object_set_new(o, "resident", json_boolean(a->resident));
	json_object_set_new(o, "segment", json_integer(a->segment));
	json_object_set_new(o, "offset", cli_json_u64(a->offset));
	json_object_set_new(o, "address", cli_json_u64(a->address));
	json_object_set_new(o, "busy_packets", cli_json_u64(a->busy_packets));
	json_object_set_new(o, "pinned", json_integer(a->pinned));
	json_object_set_new(o, "moves", cli_json_u64(a->moves));
	json_object_set_new(o, "moving", json_boolean(a->moving));
	json_object_set_new(o, "last_used_ns", cli_json_u64(a->last_used_ns));
	return o;
}

/* ---- create, destroy -------------------------------------------------------------------- */

/* A D3DDDI_SEGMENTPREFERENCE: its Value, or "ID[:down|:up],..." (at most five ids, 1..31).
 * A lone id reads the same either way: slot 0 is the low bits. */
static bool parse_preference(const char *s, uint32_t *out)
{
	gs_segpref p = {{0}};
	char buf[128], *save = NULL, *tok;
	unsigned n = 0;

	if (cli_parse_u32(s, out))
		return true;
	if (strlen(s) >= sizeof(buf))
		return false;
	strcpy(buf, s);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *dir = strchr(tok, ':');
		uint32_t id;

		if (n == GS_SEGPREF_SLOTS)
			return false;
		if (dir)
			*dir++ = '\0';
		if (!cli_parse_u32(tok, &id) || id < 1 || id > GS_SEGMENT_ID_MAX)
			return false;
		p.segment[n] = (uint8_t)id;
		if (!dir || strcasecmp(dir, "up") == 0 || strcasecmp(dir, "bottom-up") == 0)
			p.direction[n] = 0;
		else if (strcasecmp(dir, "down") == 0 || strcasecmp(dir, "top-down") == 0)
			p.direction[n] = 1;
		else
			return false;
		n++;
	}
	if (n == 0)
		return false;
	*out = gs_segpref_encode(&p);
	return true;
}

/* An allocation priority: a standard name (any case) or a number. */
static bool parse_priority(const char *s, uint32_t *out)
{
	static const struct {
		const char *name;
		uint32_t value;
	} names[] = {
	        {"minimum", GS_ALLOC_PRIORITY_MINIMUM}, {"low", GS_ALLOC_PRIORITY_LOW},
	        {"normal", GS_ALLOC_PRIORITY_NORMAL},   {"high", GS_ALLOC_PRIORITY_HIGH},
	        {"maximum", GS_ALLOC_PRIORITY_MAXIMUM},
	};

	for (size_t i = 0; i < COUNT(names); i++) {
		if (strcasecmp(s, names[i].name) == 0) {
			*out = names[i].value;
			return true;
		}
	}
	return cli_parse_u32(s, out);
}

static int preference_option(cli *ctx, const char *arg, void *field)
{
	if (parse_preference(arg, field))
		return 0;
	return cli_usage(ctx,
	                 "--preference: '%s' is neither a number nor a list of at most %d "
	                 "segment ids (1..%u) like \"1,2:down\"",
	                 arg, GS_SEGPREF_SLOTS, GS_SEGMENT_ID_MAX);
}

static int priority_option(cli *ctx, const char *arg, void *field)
{
	if (parse_priority(arg, field))
		return 0;
	return cli_usage(ctx,
	                 "--priority: '%s' is not minimum, low, normal, high, maximum or a number",
	                 arg);
}

static const cli_opt create_opts[] = {
        {"segments", CLI_ARG_U32, offsetof(gs_allocation_desc, supported_segment_set)},
        {"preference", CLI_ARG_PARSE, offsetof(gs_allocation_desc, segment_preference),
         .parse = preference_option},
        {"priority", CLI_ARG_PARSE, offsetof(gs_allocation_desc, priority),
         .parse = priority_option},
        {"tiled", CLI_SET_BITS, offsetof(gs_allocation_desc, flags), .bits = GS_ALLOC_TILED},
        {"display", CLI_SET_BITS, offsetof(gs_allocation_desc, flags), .bits = GS_ALLOC_DISPLAY},
};

static const cli_syntax create_syntax = {alloc_help, CLI_OPTS(create_opts), 2, 2,
                                         "DEVICE and SIZE"};

static int alloc_create(cli *ctx, int argc, char **argv)
{
	gs_allocation_desc desc = {0};
	gs_allocation_placement pl;
	char size[32];
	int rv;

	rv = cli_parse_args(ctx, argc, argv, &create_syntax, &desc);
	if (rv != CLI_CONTINUE)
		return rv;
	rv = cli_arg_u64(ctx, "DEVICE", argv[optind], &desc.device);
	if (rv != 0)
		return rv;
	if (!cli_parse_bytes(argv[optind + 1], &desc.size) || desc.size == 0)
		return cli_usage(ctx,
		                 "SIZE: '%s' is not a positive byte count (e.g. 65536, 64K, 1M)",
		                 argv[optind + 1]);
	rv = cli_connect(ctx);
	if (rv != CLI_EXIT_OK)
		return rv;
	rv = gs_allocation_create(ctx->client, &desc, &pl);
	if (rv != 0)
		return cli_fail(ctx, rv);
	/* Segment 0 is system memory: created there when no segment had room. */
	if (ctx->json) {
		json_t *o = json_object();

		json_object_set_new(o, "allocation", cli_json_u64(pl.allocation));
		json_object_set_new(o, "device", cli_json_u64(desc.device));
		json_object_set_new(o, "size", cli_json_u64(desc.size));
		json_object_set_new(o, "resident", json_boolean(pl.segment != 0));
		json_object_set_new(o, "segment", json_integer(pl.segment));
		json_object_set_new(o, "offset", cli_json_u64(pl.offset));
		json_object_set_new(o, "address", cli_json_u64(pl.address));
		cli_json_print(o);
		return CLI_EXIT_OK;
	}
	cli_format_bytes(desc.size, size, sizeof(size));
	if (pl.segment && !pl.address)
		printf("allocation %" PRIu64 " (device %" PRIu64 ", %s): segment %" PRIu32 "\n",
		       pl.allocation, desc.device, size, pl.segment);
	else if (pl.segment)
		printf("allocation %" PRIu64 " (device %" PRIu64 ", %s): segment %" PRIu32
		       " offset 0x%" PRIx64 " address 0x%" PRIx64 "\n",
		       pl.allocation, desc.device, size, pl.segment, pl.offset, pl.address);
	else
		printf("allocation %" PRIu64 " (device %" PRIu64
		       ", %s): system memory (not resident)\n",
		       pl.allocation, desc.device, size);
	return CLI_EXIT_OK;
}

static int alloc_destroy(cli *ctx, int argc, char **argv)
{
	uint64_t id;
	int rv;

	rv = cli_start_id(ctx, argc, argv, CLI_SIMPLE(alloc_help, 1, 1, "an allocation ID"), NULL,
	                  "ID", &id);
	if (rv != CLI_CONTINUE)
		return rv;
	rv = gs_allocation_destroy(ctx->client, id);
	if (rv != 0)
		return cli_fail(ctx, rv);
	if (ctx->json)
		cli_json_print(json_pack("{s:b}", "ok", 1));
	else
		printf("allocation %" PRIu64 " destroyed\n", id);
	return CLI_EXIT_OK;
}

/* ---- ls --------------------------------------------------------------------------------- */

static void print_allocations(const void *items, size_t n)
{
	const gs_allocation_status *list = items;

	/* Handles are random, below 2^53: up to 16 digits. */
	printf("%-16s %-16s %10s %-7s %-12s %-10s %-13s %6s %6s %6s\n", "HANDLE", "DEVICE", "SIZE",
	       "SEGMENT", "OFFSET", "PRIORITY", "FLAGS", "PINNED", "BUSY", "MOVES");
	for (size_t i = 0; i < n; i++) {
		const gs_allocation_status *a = &list[i];
		char size[32], seg[16], off[24], prio[16], flags[32];

		cli_format_bytes(a->size, size, sizeof(size));
		if (a->resident) {
			snprintf(seg, sizeof(seg), "%" PRIu32, a->segment);
			if (a->address)
				snprintf(off, sizeof(off), "0x%" PRIx64, a->offset);
			else
				snprintf(off, sizeof(off), "-");
		} else {
			snprintf(seg, sizeof(seg), "system");
			snprintf(off, sizeof(off), "-");
		}
		format_priority(a->priority, prio, sizeof(prio));
		format_alloc_flags(a->flags, flags, sizeof(flags));
		printf("%-16" PRIu64 " %-16" PRIu64 " %10s %-7s %-12s %-10s %-13s %6" PRIu32
		       " %6" PRIu64 " %6" PRIu64 "%s\n",
		       a->allocation, a->device, size, seg, off, prio, flags, a->pinned,
		       a->busy_packets, a->moves, a->moving ? "  moving" : "");
	}
	if (n == 0)
		printf("(no allocations)\n");
}

/* What alloc ls parses: its filter. */
typedef struct ls_args {
	uint64_t device;
	bool resident;
	uint32_t limit;
} ls_args;

static const cli_opt ls_opts[] = {
        {"device", CLI_ARG_U64, offsetof(ls_args, device)},
        {"resident", CLI_SET_BOOL, offsetof(ls_args, resident)},
        {"limit", CLI_ARG_U32, offsetof(ls_args, limit)},
};

static const cli_syntax ls_syntax = {alloc_help, CLI_OPTS(ls_opts)};

static int alloc_ls(cli *ctx, int argc, char **argv)
{
	ls_args filter = {0};
	gs_allocation_status *list = NULL;
	size_t n = 0;
	int rv;

	rv = cli_start(ctx, argc, argv, &ls_syntax, &filter);
	if (rv != CLI_CONTINUE)
		return rv;
	rv = gs_allocation_list(ctx->client, filter.device, filter.resident, filter.limit, 0, &list,
	                        &n);
	rv = cli_list_result(ctx, rv, list, n, sizeof(*list), status_json, print_allocations);
	gs_allocation_list_free(list);
	return rv;
}

/* ---- show ------------------------------------------------------------------------------- */

static int alloc_show(cli *ctx, int argc, char **argv)
{
	/* The parse state is the number of moves to show. */
	static const cli_opt opts[] = {{"moves", CLI_ARG_U32, 0}};
	static const cli_syntax syntax = {alloc_help, CLI_OPTS(opts), 1, 1, "an allocation ID"};
	uint32_t show_moves = DEFAULT_SHOW_MOVES;
	gs_allocation_status a;
	gs_move *moves = NULL;
	size_t n = 0;
	bool have_moves = false;
	char size[32], prio[16], flags[32], used[40];
	uint64_t id;
	int rv;

	rv = cli_start_id(ctx, argc, argv, &syntax, &show_moves, "ID", &id);
	if (rv != CLI_CONTINUE)
		return rv;
	rv = gs_allocation_query(ctx->client, id, &a);
	if (rv != 0)
		return cli_fail(ctx, rv);
	if (show_moves) {
		gs_moves_filter f = {.allocation = id, .limit = show_moves};

		rv = gs_moves(ctx->client, &f, &moves, &n);
		/* A daemon that does not serve moves yet still shows the allocation. */
		if (rv != 0 && rv != GS_STATUS_UNIMPLEMENTED)
			return cli_fail(ctx, rv);
		have_moves = rv == 0;
	}

	if (ctx->json) {
		json_t *o = status_json(&a);

		if (have_moves)
			json_object_set_new(
			        o, "recent_moves",
			        cli_json_array(moves, n, sizeof(*moves), cli_json_move));
		cli_json_print(o);
		gs_moves_free(moves, n);
		return CLI_EXIT_OK;
	}
	cli_format_bytes(a.size, size, sizeof(size));
	format_priority(a.priority, prio, sizeof(prio));
	format_alloc_flags(a.flags, flags, sizeof(flags));
	cli_format_time(a.last_used_ns, used, sizeof(used));
	printf("allocation   %" PRIu64 " (device %" PRIu64 ")\n", a.allocation, a.device);
	printf("size         %s (%" PRIu64 " bytes)\n", size, a.size);
	printf("flags        %s\n", flags);
	printf("segments     supported 0x%08" PRIx32 ", preference 0x%08" PRIx32 "\n",
	       a.supported_segment_set, a.segment_preference);
	if (priority_name(a.priority))
		printf("priority     %s (0x%08" PRIx32 ")\n", prio, a.priority);
	else
		printf("priority     %s\n", prio);
	if (a.resident && !a.address)
		printf("placement    segment %" PRIu32 " (offset: administrators only)\n",
		       a.segment);
	else if (a.resident)
		printf("placement    segment %" PRIu32 " offset 0x%" PRIx64 " address 0x%" PRIx64
		       "\n",
		       a.segment, a.offset, a.address);
	else
		printf("placement    system memory (not resident)\n");
	printf("busy         %" PRIu64 " packet%s in flight, %" PRIu32 " pinning it\n",
	       a.busy_packets, a.busy_packets == 1 ? "" : "s", a.pinned);
	printf("moves        %" PRIu64 "%s\n", a.moves,
	       a.moving ? ", a transfer is under way" : "");
	printf("last used    %s\n", used);
	if (have_moves) {
		printf("\nrecent moves (newest first):\n");
		cli_print_moves(moves, n, "  ");
	}
	gs_moves_free(moves, n);
	return CLI_EXIT_OK;
}

/* ---- resident, evict, transfer ---------------------------------------------------------- */

typedef struct paging_args {
	bool wait;
	uint32_t timeout_ms;
	uint32_t transfer_flags;
} paging_args;

/* resident and evict take no --flags. */
static int no_flags(cli *ctx, const char *arg, void *field)
{
	(void)arg;
	(void)field;
	return cli_usage(ctx, "--flags: only alloc transfer takes flags");
}

static int transfer_flags(cli *ctx, const char *arg, void *field)
{
	const char *bad = arg;

	if (gs_flags_parse(gs_transfer_flag_names, arg, field, &bad) == 0)
		return 0;
	return cli_usage(ctx,
	                 "--flags: unknown flag '%.*s' (names: swizzle, unswizzle, or a number)",
	                 (int)strcspn(bad, ",|"), bad);
}

static const cli_opt page_opts[] = {
        {"wait", CLI_SET_BOOL, offsetof(paging_args, wait)},
        {"timeout-ms", CLI_ARG_U32, offsetof(paging_args, timeout_ms)},
        {"flags", CLI_ARG_PARSE, offsetof(paging_args, transfer_flags), .parse = no_flags},
};

static const cli_opt transfer_opts[] = {
        {"wait", CLI_SET_BOOL, offsetof(paging_args, wait)},
        {"timeout-ms", CLI_ARG_U32, offsetof(paging_args, timeout_ms)},
        {"flags", CLI_ARG_PARSE, offsetof(paging_args, transfer_flags), .parse = transfer_flags},
};

static const cli_syntax page_list_syntax = {alloc_help, CLI_OPTS(page_opts), 2, INT_MAX,
                                            "DEVICE and at least one allocation ID"};
static const cli_syntax transfer_syntax = {alloc_help, CLI_OPTS(transfer_opts), 2, 2,
                                           "an allocation ID and a SEGMENT"};

/* Prints a paging answer, after waiting for its fence when asked. */
static int paging_report(cli *ctx, int status, const gs_paging_result *r, const paging_args *p)
{
	uint64_t value = 0;
	int rv;

	if (status != 0)
		return cli_fail(ctx, status);
	if (p->wait && r->paging_sync) {
		rv = gs_sync_wait(ctx->client, r->paging_sync, r->paging_fence, p->timeout_ms,
		                  &value);
		if (rv != 0)
			return cli_fail(ctx, rv);
	}
	if (ctx->json) {
		json_t *o = json_object();

		json_object_set_new(o, "paging_fence", cli_json_u64(r->paging_fence));
		json_object_set_new(o, "paging_sync", cli_json_u64(r->paging_sync));
		json_object_set_new(o, "moves", json_integer(r->moves));
		if (p->wait)
			json_object_set_new(o, "value", cli_json_u64(value));
		cli_json_print(o);
		return CLI_EXIT_OK;
	}
	printf("paging fence %" PRIu64 " sync %" PRIu64 " (%" PRIu32 " moved)%s\n", r->paging_fence,
	       r->paging_sync, r->moves, p->wait ? ", reached" : "");
	return CLI_EXIT_OK;
}

/* Shared by resident and evict: DEVICE ID... */
static int page_list(cli *ctx, int argc, char **argv,
                     int (*call)(gs_client *, uint64_t, const uint64_t *, size_t,
                                 gs_paging_result *))
{
	paging_args p = {.timeout_ms = DEFAULT_PAGE_WAIT_MS};
	gs_paging_result r = {0};
	uint64_t device, ids[256];
	size_t count;
	int rv;

	rv = cli_parse_args(ctx, argc, argv, &page_list_syntax, &p);
	if (rv != CLI_CONTINUE)
		return rv;
	count = (size_t)(argc - optind - 1);
	if (count > COUNT(ids))
		return cli_usage(ctx, "at most %zu allocations at once", COUNT(ids));
	rv = cli_arg_u64(ctx, "DEVICE", argv[optind], &device);
	for (size_t i = 0; rv == 0 && i < count; i++)
		rv = cli_arg_u64(ctx, "ID", argv[optind + 1 + (int)i], &ids[i]);
	if (rv == 0)
		rv = cli_connect(ctx);
	if (rv != 0)
		return rv;
	return paging_report(ctx, call(ctx->client, device, ids, count, &r), &r, &p);
}

static int alloc_resident(cli *ctx, int argc, char **argv)
{
	return page_list(ctx, argc, argv, gs_make_resident);
}

static int alloc_evict(cli *ctx, int argc, char **argv)
{
	return page_list(ctx, argc, argv, gs_evict);
}

static int alloc_transfer(cli *ctx, int argc, char **argv)
{
	paging_args p = {.timeout_ms = DEFAULT_PAGE_WAIT_MS};
	gs_paging_result r = {0};
	uint64_t id;
	uint32_t segment;
	const char *seg;
	int rv;

	rv = cli_parse_args(ctx, argc, argv, &transfer_syntax, &p);
	if (rv != CLI_CONTINUE)
		return rv;
	rv = cli_arg_u64(ctx, "ID", argv[optind], &id);
	if (rv != 0)
		return rv;
	seg = argv[optind + 1];
	if (strcasecmp(seg, "system") == 0)
		segment = 0;
	else if (!cli_parse_u32(seg, &segment) || segment > GS_SEGMENT_ID_MAX)
		return cli_usage(ctx, "SEGMENT: '%s' is not a segment id (0..%u) or \"system\"",
		                 seg, GS_SEGMENT_ID_MAX);
	rv = cli_connect(ctx);
	if (rv != CLI_EXIT_OK)
		return rv;
	return paging_report(ctx, gs_transfer(ctx->client, id, segment, p.transfer_flags, &r), &r,
	                     &p);
}

int cmd_alloc(cli *ctx, int argc, char **argv)
{
	static const cli_command sub[] = {
	        {"create", "create an allocation on a device", alloc_create},
	        {"destroy", "destroy an allocation", alloc_destroy},
	        {"ls", "list allocations", alloc_ls},
	        {"show", "show an allocation and its recent moves", alloc_show},
	        {"resident", "make allocations resident", alloc_resident},
	        {"evict", "evict allocations to system memory", alloc_evict},
	        {"transfer", "move an allocation to a segment", alloc_transfer},
	};

	return cli_dispatch(ctx, sub, COUNT(sub), argc, argv, alloc_help);
}
