/*
 * gpusched audit verify: checks an audit file's hash chain (schema/chain.h) locally, without
 * the daemon: every record against its hash, every appended row against its record, every row
 * updated in place against the last record about it.
 */
#include <inttypes.h>
#include <stdio.h>

#include <sqlite3.h>

#include "chain.h"
#include "cli.h"

static const char audit_help[] =
        "Usage: gpusched audit verify [FILE] [--json]\n"
        "Checks that nobody changed the audit file FILE (default ./gpusched-audit.db, the\n"
        "daemon's default) since the daemon wrote it. Every record the daemon writes is\n"
        "chained to the one before it by a BLAKE2b hash; verify recomputes the chain and\n"
        "compares each row with its record. It reports OK with the number of records, or\n"
        "the first record or row that does not match: one changed, removed, added or moved\n"
        "with any tool. It reads the file directly (also while the daemon runs) and needs\n"
        "no connection.\n"
        "\n"
        "Options:\n"
        "  --json   {ok, records, rows, first_seq, last_seq, head} and, when not ok, seq,\n"
        "           table, row and why\n"
        "\n"
        "Exit status: 0 OK; 4 the file does not match its chain; 1 the file cannot be read\n"
        "or has no chain.\n";

static void hex(const uint8_t *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", b[i]);
}

static int audit_verify(cli *ctx, int argc, char **argv)
{
	const cli_syntax syntax = {audit_help, NULL, 0, 0, 1, "[FILE]"};
	int rv = cli_parse_args(ctx, argc, argv, &syntax, NULL);
	if (rv != CLI_CONTINUE)
		return rv;
	const char *path = optind < argc ? argv[optind] : "gpusched-audit.db";

	sqlite3 *db = NULL;
	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
		cli_warn(ctx, "cannot open %s: %s", path,
		         db ? sqlite3_errmsg(db) : "out of memory");
		sqlite3_close(db);
		return CLI_EXIT_DAEMON;
	}
	sqlite3_busy_timeout(db, 5000);
	gs_chain_report rep;
	int st = gs_chain_verify(db, &rep);
	sqlite3_close(db);
	if (st != 0) {
		cli_warn(ctx, "%s: %s", path, rep.why);
		return CLI_EXIT_DAEMON;
	}
	char head[2 * GS_CHAIN_HASH + 1];
	hex(rep.head, GS_CHAIN_HASH, head);
	if (ctx->json) {
		json_t *o = json_pack(
		        "{s:b, s:o, s:o, s:o, s:o, s:o, s:s}", "ok", rep.ok, "records",
		        cli_json_u64(rep.records), "rows", cli_json_u64(rep.rows), "first_seq",
		        cli_json_u64(rep.first_seq), "last_seq", cli_json_u64(rep.last_seq),
		        "retention_base_seq", cli_json_u64(rep.base_seq), "head", head);
		if (!rep.ok) {
			json_object_set_new(o, "seq", cli_json_u64(rep.bad_seq));
			json_object_set_new(o, "table", json_string(rep.bad_table));
			json_object_set_new(o, "row", json_integer(rep.bad_row));
			json_object_set_new(o, "why", json_string(rep.why));
		}
		cli_json_print(o);
	} else if (rep.ok) {
		printf("%s: OK: %" PRIu64 " records (seq %" PRIu64 "..%" PRIu64 ") and %" PRIu64
		       " rows match the hash chain\nchain head %s\n",
		       path, rep.records, rep.first_seq, rep.last_seq, rep.rows, head);
		if (rep.base_seq)
			printf("records up to seq %" PRIu64
			       " were removed by the retention; the rows "
			       "they left are anchored and match\n",
			       rep.base_seq);
		else if (rep.first_seq > 1)
			printf("records before seq %" PRIu64
			       " predate the chain and are not covered\n",
			       rep.first_seq);
	} else {
		printf("%s: MISMATCH at record %" PRIu64 ", %s row %" PRId64 ": %s\n", path,
		       rep.bad_seq, rep.bad_table, rep.bad_row, rep.why);
		printf("%" PRIu64 " records before it match\n", rep.records);
	}
	return rep.ok ? CLI_EXIT_OK : CLI_EXIT_VERIFY;
}

int cmd_audit(cli *ctx, int argc, char **argv)
{
	static const cli_command sub[] = {
	        {"verify", "check the audit file against its hash chain", audit_verify},
	};

	return cli_dispatch(ctx, sub, sizeof(sub) / sizeof(sub[0]), argc, argv, audit_help);
}
