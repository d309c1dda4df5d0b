/*
 * gpusched audit verify: checks an audit file's hash chain (schema/chain.h) locally, without
 * the daemon: every record against its hash, every appended row against its record, every row
 * updated in place against the last record about it.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>
#include <sys/stat.h>

#include "chain.h"
#include "cli.h"

static const char audit_help[] =
        "Usage: gpusched audit verify [FILE] [--head SEQ:LINK] [--json]\n"
        "Checks that nobody changed the audit file FILE (default ./gpusched-audit.db, the\n"
        "daemon's default) since the daemon wrote it. Every record the daemon writes is\n"
        "chained to the one before it by a BLAKE2b hash; verify recomputes the chain and\n"
        "compares each row with its record. It reports OK with the number of records, or\n"
        "the first record or row that does not match: one changed, removed, added or moved\n"
        "with any tool. It reads the file directly (also while the daemon runs) and needs\n"
        "no connection. Besides the chain it checks that every row a record vouches for\n"
        "is there, that the head in the file names the newest record, and that the views,\n"
        "triggers and state names are the schema's, and that a FILE-wal beside it is its own\n"
        "(SQLite reads any -wal it finds: one copied from another audit file would make the\n"
        "pair read as that file).\n"
        "\n"
        "Anyone who can write the file can also recompute the chain after an edit. Keep\n"
        "the head verify prints (SEQ:LINK; the daemon logs it at stop) somewhere else, and\n"
        "pass it back with --head: the file must still hold that record with that link, so\n"
        "records cut from the end, or a chain rewritten up to it, are found.\n"
        "\n"
        "Options:\n"
        "  --head SEQ:LINK  a head kept from an earlier verify (or the daemon's log)\n"
        "  --json   {ok, records, rows, first_seq, last_seq, head, head_seq,\n"
        "           schema_checked, head_checked} and, when not ok, seq, table, row, why\n"
        "\n"
        "Exit status: 0 OK; 4 the file does not match its chain; 1 the file cannot be read\n"
        "or has no chain.\n";

static void hex(const uint8_t *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", b[i]);
}

typedef struct verify_args {
	gs_chain_pin pin;
	bool pinned;
} verify_args;

/* SEQ:LINK, as verify prints the head. */
static int parse_head(cli *ctx, const char *arg, void *field)
{
	gs_chain_pin *pin = field;
	char *end;
	const char *colon = strchr(arg, ':');
	unsigned long long seq = strtoull(arg, &end, 10);
	if (!colon || end != colon || seq == 0 || gs_chain_unhex(colon + 1, pin->hash) != 0) {
		cli_warn(ctx, "--head: '%s' is not SEQ:LINK (a record number, ':', %d hex digits)",
		         arg, 2 * GS_CHAIN_HASH);
		return CLI_EXIT_USAGE;
	}
	pin->seq = seq;
	return 0;
}

/* meta's wire_key and chain_head_seq as `db` reads them ("" and -1 when missing). */
static void file_identity(sqlite3 *db, char *key, size_t cap, long long *head)
{
	sqlite3_stmt *s = NULL;
	key[0] = '\0';
	*head = -1;
	if (sqlite3_prepare_v2(db,
	                       "SELECT (SELECT value FROM meta WHERE key = 'wire_key'),"
	                       " (SELECT CAST(value AS INTEGER) FROM meta"
	                       "  WHERE key = 'chain_head_seq')",
	                       -1, &s, NULL) == SQLITE_OK &&
	    sqlite3_step(s) == SQLITE_ROW) {
		if (sqlite3_column_text(s, 0))
			snprintf(key, cap, "%s", (const char *)sqlite3_column_text(s, 0));
		if (sqlite3_column_type(s, 1) != SQLITE_NULL)
			*head = sqlite3_column_int64(s, 1);
	}
	sqlite3_finalize(s);
}

/*
 * A -wal file beside the audit file that is not its own: SQLite applies any WAL it finds, so a
 * -wal copied from another audit file makes the pair read as that file (and verify as it).
 * The file read alone (immutable: its WAL ignored) has its own wire_key, made with it, and a
 * WAL only ever adds records: another key, or a head behind the file's own, gives it away.
 * Returns 1 with `why` set when the -wal is foreign, 0 otherwise.
 */
static int foreign_wal(const char *path, sqlite3 *db, char *why, size_t cap)
{
	char wal[4096];
	struct stat st;
	snprintf(wal, sizeof wal, "%s-wal", path);
	if (stat(wal, &st) != 0 || st.st_size == 0)
		return 0;
	/* A URI of the path: '%', '?' and '#' escaped. */
	char uri[3 * 4096 + 32] = "file:";
	size_t n = strlen(uri);
	for (const char *c = path; *c && n + 4 < sizeof uri - 16; c++)
		n += (size_t)(*c == '%' || *c == '?' || *c == '#'
		                      ? snprintf(uri + n, sizeof uri - n, "%%%02X",
		                                 (unsigned char)*c)
		                      : snprintf(uri + n, sizeof uri - n, "%c", *c));
	snprintf(uri + n, sizeof uri - n, "?immutable=1");
	sqlite3 *alone = NULL;
	char key_alone[128], key[128];
	long long head_alone, head;
	if (sqlite3_open_v2(uri, &alone, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL) !=
	    SQLITE_OK) {
		sqlite3_close(alone);
		return 0;
	}
	file_identity(alone, key_alone, sizeof key_alone, &head_alone);
	sqlite3_close(alone);
	file_identity(db, key, sizeof key, &head);
	if (key_alone[0] && key[0] && strcmp(key_alone, key) != 0) {
		snprintf(why, cap,
		         "%s is another audit file's WAL (with it the file reads as a file with"
		         " another wire_key): it was copied from elsewhere; move it aside to verify"
		         " the file alone",
		         wal);
		return 1;
	}
	if (head_alone >= 0 && head < head_alone) {
		snprintf(why, cap,
		         "%s is not this file's WAL: with it the newest record is %lld, without it"
		         " %lld (a WAL only adds records); move it aside to verify the file alone",
		         wal, head, head_alone);
		return 1;
	}
	return 0;
}

static int audit_verify(cli *ctx, int argc, char **argv)
{
	static const cli_opt opts[] = {
	        {.name = "head",
	         .kind = CLI_ARG_PARSE,
	         .field = offsetof(verify_args, pin),
	         .given = CLI_GIVEN(verify_args, pinned),
	         .parse = parse_head},
	};
	const cli_syntax syntax = {audit_help, CLI_OPTS(opts), 0, 1, "[FILE]"};
	verify_args args = {0};
	int rv = cli_parse_args(ctx, argc, argv, &syntax, &args);
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
	char why[4096 + 256];
	if (foreign_wal(path, db, why, sizeof why)) {
		sqlite3_close(db);
		if (ctx->json)
			cli_json_print(json_pack("{s:b, s:s}", "ok", 0, "why", why));
		else
			printf("%s: MISMATCH: %s\n", path, why);
		return CLI_EXIT_VERIFY;
	}
	gs_chain_report rep;
	int st = gs_chain_verify_pinned(db, args.pinned ? &args.pin : NULL, &rep);
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
		json_object_set_new(o, "head_seq", cli_json_u64(rep.last_seq));
		json_object_set_new(o, "schema_checked", json_boolean(rep.schema_checked));
		json_object_set_new(o, "head_checked", json_boolean(rep.pin_checked));
		if (!rep.ok) {
			json_object_set_new(o, "seq", cli_json_u64(rep.bad_seq));
			json_object_set_new(o, "table", json_string(rep.bad_table));
			json_object_set_new(o, "row", json_integer(rep.bad_row));
			json_object_set_new(o, "why", json_string(rep.why));
		}
		cli_json_print(o);
	} else if (rep.ok) {
		printf("%s: OK: %" PRIu64 " records (seq %" PRIu64 "..%" PRIu64 ") and %" PRIu64
		       " rows match the hash chain\nchain head %" PRIu64
		       ":%s (keep it elsewhere; pass it"
		       " back with --head)\n",
		       path, rep.records, rep.first_seq, rep.last_seq, rep.rows, rep.last_seq,
		       head);
		if (args.pinned)
			printf(rep.pin_checked
			               ? "the kept head %" PRIu64 " matches\n"
			               : "the kept head %" PRIu64
			                 " is older than the retention base: not compared\n",
			       args.pin.seq);
		if (!rep.schema_checked)
			printf("views and state names not checked: the file has another schema"
			       " version than this gpusched\n");
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
