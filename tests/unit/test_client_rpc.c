/*
 * libgpusched's request/response core against a scripted fake daemon on an inproc:// REP
 * socket: envelope fields (id, token, adapter), the encoding of submissions and filters,
 * decoding of answers, status and message propagation, and every local error path
 * (mismatched id, unexpected body, short read, timeout, refused connection).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pthread.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>

#include "gpusched.h"
#include "gpusched.pb-c.h"

#define URL "inproc://gs-client-test"

/* What the fake daemon saw in the last request (written before it replies). */
static struct {
	uint64_t id;
	char token[64];
	uint32_t adapter;
	int body_case;
	uint8_t dma[256];
	size_t dma_len;
	size_t n_allocations;
	uint64_t alloc_handle[8];
	bool alloc_write[8];
	size_t n_patches;
	uint32_t patch_index[8], patch_slot[8], patch_offset[8];
	uint64_t patch_alloc_offset[8];
	uint32_t submit_flags;
	size_t batch_count;
	uint32_t history_node;
	int history_state;
	uint8_t written[64];
	size_t written_len;
} seen;

static nng_socket rep;
static pthread_t server;

static void record_submit(const Gpusched__V1__SubmitRequest *s)
{
	seen.dma_len = s->dma_buffer.len;
	if (s->dma_buffer.len <= sizeof(seen.dma))
		memcpy(seen.dma, s->dma_buffer.data, s->dma_buffer.len);
	seen.n_allocations = s->n_allocations;
	for (size_t i = 0; i < s->n_allocations && i < 8; i++) {
		seen.alloc_handle[i] = s->allocations[i]->allocation;
		seen.alloc_write[i] = s->allocations[i]->write;
	}
	seen.n_patches = s->n_patches;
	for (size_t i = 0; i < s->n_patches && i < 8; i++) {
		seen.patch_index[i] = s->patches[i]->allocation_index;
		seen.patch_slot[i] = s->patches[i]->slot_id;
		seen.patch_offset[i] = s->patches[i]->patch_offset;
		seen.patch_alloc_offset[i] = s->patches[i]->allocation_offset;
	}
	seen.submit_flags = s->submit_flags;
}

/* The scripted daemon. Returns false to leave the request unanswered. Sub-messages live in
 * statics: one request is answered at a time. */
static bool answer(const Gpusched__V1__Request *req, Gpusched__V1__Response *resp)
{
	static Gpusched__V1__InfoResponse info;
	static Gpusched__V1__AdapterInfo adapter, *adapters[1];
	static Gpusched__V1__NodeInfo nodes[2], *node_ptrs[2];
	static Gpusched__V1__SegmentInfo segment, *segment_ptrs[1];
	static Gpusched__V1__DeviceCreateResponse device;
	static Gpusched__V1__SubmitResponse submit, batch_items[4], *batch_ptrs[4];
	static Gpusched__V1__SubmitBatchResponse batch;
	static Gpusched__V1__HistoryResponse history;
	static Gpusched__V1__PacketRecord records[2], *record_ptrs[2];
	static Gpusched__V1__AllocationReadResponse read;
	static uint8_t read_bytes[64];

	switch (req->body_case) {
	case GPUSCHED__V1__REQUEST__BODY_INFO:
		gpusched__v1__info_response__init(&info);
		gpusched__v1__adapter_info__init(&adapter);
		gpusched__v1__segment_info__init(&segment);
		for (int i = 0; i < 2; i++) {
			gpusched__v1__node_info__init(&nodes[i]);
			node_ptrs[i] = &nodes[i];
		}
		nodes[0].id = 0;
		nodes[0].name = "3d0";
		nodes[0].paging = 1;
		nodes[0].fence = 5;
		nodes[1].id = 1;
		nodes[1].name = "compute0";
		nodes[1].kind = GPUSCHED__V1__NODE_KIND__NODE_KIND_COMPUTE;
		nodes[1].queued = 2;
		segment.id = 1;
		segment.name = "vram";
		segment.size = 1u << 20;
		segment.largest_free = 4096;
		segment.cpu_visible = 1;
		segment_ptrs[0] = &segment;
		adapter.id = 3;
		adapter.name = "emu0";
		adapter.backend = "emu";
		adapter.clock = "virtual";
		adapter.n_nodes = 2;
		adapter.nodes = node_ptrs;
		adapter.n_segments = 1;
		adapter.segments = segment_ptrs;
		adapter.max_dma_buffer = 1u << 20;
		adapters[0] = &adapter;
		info.version = "9.9";
		info.tenant = "t1";
		info.n_adapters = 1;
		info.adapters = adapters;
		resp->body_case = GPUSCHED__V1__RESPONSE__BODY_INFO;
		resp->info = &info;
		return true;
	case GPUSCHED__V1__REQUEST__BODY_DEVICE_CREATE:
		if (strcmp(req->device_create->name, "fail") == 0) {
			resp->status = GPUSCHED__V1__STATUS__STATUS_QUOTA_EXCEEDED;
			resp->message = "too many devices";
			return true;
		}
		gpusched__v1__device_create_response__init(&device);
		device.device = 42;
		resp->body_case = GPUSCHED__V1__RESPONSE__BODY_DEVICE_CREATE;
		resp->device_create = &device;
		return true;
	case GPUSCHED__V1__REQUEST__BODY_CONTEXT_SET_PRIORITY:
		if (req->context_set_priority->context == 13) {
			resp->status = GPUSCHED__V1__STATUS__STATUS_NOT_FOUND;
			resp->message = "no context 13";
		}
		return true;
	case GPUSCHED__V1__REQUEST__BODY_SUBMIT:
		record_submit(req->submit);
		gpusched__v1__submit_response__init(&submit);
		submit.packet = 100;
		submit.fence = 7;
		submit.node = 1;
		resp->body_case = GPUSCHED__V1__RESPONSE__BODY_SUBMIT;
		resp->submit = &submit;
		return true;
	case GPUSCHED__V1__REQUEST__BODY_SUBMIT_BATCH:
		seen.batch_count = req->submit_batch->n_packets;
		gpusched__v1__submit_batch_response__init(&batch);
		for (size_t i = 0; i < seen.batch_count && i < 4; i++) {
			gpusched__v1__submit_response__init(&batch_items[i]);
			batch_items[i].packet = 200 + i;
			batch_items[i].fence = req->submit_batch->packets[i]->context;
			batch_ptrs[i] = &batch_items[i];
		}
		/* A batch of 3 is answered short, to exercise the count check. */
		batch.n_packets = seen.batch_count == 3 ? 2 : seen.batch_count;
		batch.packets = batch_ptrs;
		resp->body_case = GPUSCHED__V1__RESPONSE__BODY_SUBMIT_BATCH;
		resp->submit_batch = &batch;
		return true;
	case GPUSCHED__V1__REQUEST__BODY_HISTORY:
		seen.history_node = req->history->node;
		seen.history_state = req->history->state;
		gpusched__v1__history_response__init(&history);
		for (int i = 0; i < 2; i++) {
			gpusched__v1__packet_record__init(&records[i]);
			records[i].packet = 10 + i;
			records[i].submit_flags = 0xa;
			records[i].state = GPUSCHED__V1__PACKET_STATE__PACKET_STATE_COMPLETED;
			records[i].result = i ? "cancelled by context destroy" : "";
			record_ptrs[i] = &records[i];
		}
		history.n_packets = 2;
		history.packets = record_ptrs;
		resp->body_case = GPUSCHED__V1__RESPONSE__BODY_HISTORY;
		resp->history = &history;
		return true;
	case GPUSCHED__V1__REQUEST__BODY_STATS:
		resp->id = req->id + 1; /* answers some other request */
		return true;
	case GPUSCHED__V1__REQUEST__BODY_SYNC_CREATE:
		gpusched__v1__device_create_response__init(&device);
		resp->body_case = GPUSCHED__V1__RESPONSE__BODY_DEVICE_CREATE; /* wrong body */
		resp->device_create = &device;
		return true;
	case GPUSCHED__V1__REQUEST__BODY_PACKET_WAIT:
		return false;
	case GPUSCHED__V1__REQUEST__BODY_ALLOCATION_READ:
		gpusched__v1__allocation_read_response__init(&read);
		memset(read_bytes, 0xab, sizeof(read_bytes));
		read.data.data = read_bytes;
		read.data.len = req->allocation_read->size;
		if (req->allocation_read->offset == 1)
			read.data.len--; /* a short answer */
		resp->body_case = GPUSCHED__V1__RESPONSE__BODY_ALLOCATION_READ;
		resp->allocation_read = &read;
		return true;
	case GPUSCHED__V1__REQUEST__BODY_ALLOCATION_WRITE:
		seen.written_len = req->allocation_write->data.len;
		if (seen.written_len <= sizeof(seen.written))
			memcpy(seen.written, req->allocation_write->data.data, seen.written_len);
		return true;
	case GPUSCHED__V1__REQUEST__BODY_TENANT_LIST:
		resp->status = GPUSCHED__V1__STATUS__STATUS_UNIMPLEMENTED;
		resp->message = "tenants are not served yet";
		return true;
	default:
		resp->status = GPUSCHED__V1__STATUS__STATUS_INTERNAL;
		return true;
	}
}

static void *serve(void *arg)
{
	(void)arg;
	for (;;) {
		Gpusched__V1__Response resp = GPUSCHED__V1__RESPONSE__INIT;
		Gpusched__V1__Request *req;
		nng_msg *msg;

		if (nng_recvmsg(rep, &msg, 0) != 0)
			return NULL; /* closed: the test is over */
		req = gpusched__v1__request__unpack(NULL, nng_msg_len(msg), nng_msg_body(msg));
		nng_msg_free(msg);
		if (!req)
			continue;
		seen.id = req->id;
		snprintf(seen.token, sizeof(seen.token), "%s", req->token);
		seen.adapter = req->adapter;
		seen.body_case = req->body_case;
		resp.id = req->id;
		if (answer(req, &resp)) {
			size_t len = gpusched__v1__response__get_packed_size(&resp);

			if (nng_msg_alloc(&msg, len) == 0) {
				gpusched__v1__response__pack(&resp, nng_msg_body(msg));
				if (nng_sendmsg(rep, msg, 0) != 0)
					nng_msg_free(msg);
			}
		}
		gpusched__v1__request__free_unpacked(req, NULL);
	}
}

static int start_server(void **state)
{
	(void)state;
	if (nng_rep0_open(&rep) != 0 || nng_listen(rep, URL, NULL, 0) != 0)
		return -1;
	return pthread_create(&server, NULL, serve, NULL);
}

static int stop_server(void **state)
{
	(void)state;
	nng_close(rep);
	pthread_join(server, NULL);
	return 0;
}

static gs_client *connect_test(const char *token)
{
	gs_client *c = NULL;

	assert_int_equal(gs_connect(URL, token, &c), 0);
	assert_non_null(c);
	return c;
}

static void test_info_and_envelope(void **state)
{
	gs_client *c = connect_test("tok");
	gs_daemon_info *info;
	uint64_t first_id;

	(void)state;
	gs_client_set_adapter(c, 3);
	assert_int_equal(gs_client_adapter(c), 3);
	assert_int_equal(gs_info(c, &info), 0);
	assert_string_equal(seen.token, "tok");
	assert_int_equal(seen.adapter, 3);
	assert_int_equal(seen.body_case, GPUSCHED__V1__REQUEST__BODY_INFO);
	first_id = seen.id;

	assert_string_equal(info->version, "9.9");
	assert_string_equal(info->tenant, "t1");
	assert_int_equal(info->adapter_count, 1);
	const gs_adapter_info *a = &info->adapters[0];
	assert_int_equal(a->id, 3);
	assert_string_equal(a->name, "emu0");
	assert_string_equal(a->clock, "virtual");
	assert_int_equal(a->max_dma_buffer, 1u << 20);
	assert_int_equal(a->node_count, 2);
	assert_string_equal(a->nodes[0].name, "3d0");
	assert_true(a->nodes[0].paging);
	assert_int_equal(a->nodes[0].fence, 5);
	assert_int_equal(a->nodes[1].kind, GS_NODE_COMPUTE);
	assert_int_equal(a->nodes[1].queued, 2);
	assert_int_equal(a->segment_count, 1);
	assert_string_equal(a->segments[0].name, "vram");
	assert_int_equal(a->segments[0].size, 1u << 20);
	assert_true(a->segments[0].cpu_visible);
	gs_info_free(info);

	/* Ids grow per request. */
	assert_int_equal(gs_info(c, &info), 0);
	assert_true(seen.id > first_id);
	gs_info_free(info);
	gs_close(c);
}

static void test_status_and_message(void **state)
{
	gs_client *c = connect_test(NULL);
	uint64_t device = 0;

	(void)state;
	assert_int_equal(gs_device_create(c, "fail", &device), GS_STATUS_QUOTA_EXCEEDED);
	assert_string_equal(gs_client_message(c), "too many devices");
	assert_int_equal(gs_context_set_priority(c, 13, 2, 0), GS_STATUS_NOT_FOUND);
	assert_string_equal(gs_client_message(c), "no context 13");
	assert_string_equal(gs_status_name(GS_STATUS_NOT_FOUND), "NOT_FOUND");

	/* Success clears the message. */
	assert_int_equal(gs_device_create(c, "ok", &device), 0);
	assert_int_equal(device, 42);
	assert_string_equal(gs_client_message(c), "");
	assert_int_equal(gs_context_set_priority(c, 14, 2, 0), 0);

	assert_int_equal(gs_tenant_list(c, &(gs_tenant *){NULL}, &(size_t){0}),
	                 GS_STATUS_UNIMPLEMENTED);
	assert_string_equal(gs_client_message(c), "tenants are not served yet");
	gs_close(c);
}

static void test_submit_encoding(void **state)
{
	gs_client *c = connect_test(NULL);
	gs_submit_result res;
	gs_dmabuf b;

	(void)state;
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_copy(&b, 5, 0x10, 6, 0x20, 64), 0);
	assert_int_equal(gs_dmabuf_fill(&b, 6, 0, 4, 1), 0);
	assert_int_equal(gs_dmabuf_signal(&b, 9, 1), 0);
	assert_int_equal(gs_submit(c, 77, &b, 0xa, &res), 0);

	assert_int_equal(seen.body_case, GPUSCHED__V1__REQUEST__BODY_SUBMIT);
	assert_int_equal(seen.dma_len, b.len);
	assert_memory_equal(seen.dma, b.data, b.len);
	assert_int_equal(seen.submit_flags, 0xa);
	assert_int_equal(seen.n_allocations, 2);
	assert_int_equal(seen.alloc_handle[0], 5);
	assert_true(seen.alloc_write[0]);
	assert_int_equal(seen.alloc_handle[1], 6);
	assert_true(seen.alloc_write[1]); /* read by the copy, written by the fill */
	assert_int_equal(seen.n_patches, 3);
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(seen.patch_index[i], b.patches[i].allocation_index);
		assert_int_equal(seen.patch_slot[i], b.patches[i].slot_id);
		assert_int_equal(seen.patch_offset[i], b.patches[i].patch_offset);
		assert_int_equal(seen.patch_alloc_offset[i], b.patches[i].allocation_offset);
	}
	assert_int_equal(res.packet, 100);
	assert_int_equal(res.fence, 7);
	assert_int_equal(res.node, 1);
	gs_dmabuf_free(&b);
	gs_close(c);
}

static void test_submit_batch(void **state)
{
	gs_client *c = connect_test(NULL);
	gs_submit_desc descs[3];
	gs_submit_result res[3];
	gs_dmabuf b;

	(void)state;
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_nop(&b), 0);
	for (int i = 0; i < 3; i++)
		descs[i] = (gs_submit_desc){.context = 50 + i, .dma = &b};
	assert_int_equal(gs_submit_batch(c, descs, 2, res), 0);
	assert_int_equal(seen.batch_count, 2);
	assert_int_equal(res[0].packet, 200);
	assert_int_equal(res[1].packet, 201);
	assert_int_equal(res[1].fence, 51); /* the fake echoes each packet's context */

	/* Answered with fewer packets than sent: a protocol error, not a partial result. */
	assert_int_equal(gs_submit_batch(c, descs, 3, res), GS_ERR_PROTOCOL);
	gs_dmabuf_free(&b);
	gs_close(c);
}

static void test_history_filter(void **state)
{
	gs_client *c = connect_test(NULL);
	gs_history_filter f = {0};
	gs_packet_record *recs;
	size_t n;

	(void)state;
	assert_int_equal(gs_history(c, NULL, &recs, &n), 0);
	assert_int_equal(seen.history_node, 0); /* any */
	assert_int_equal(n, 2);
	assert_int_equal(recs[1].packet, 11);
	assert_int_equal(recs[1].state, GS_PACKET_COMPLETED);
	assert_int_equal(recs[1].submit_flags, 0xa);
	assert_string_equal(recs[1].result, "cancelled by context destroy");
	gs_history_free(recs, n);

	f.match_node = true;
	f.node = 0;
	f.state = GS_PACKET_FAULTED;
	assert_int_equal(gs_history(c, &f, &recs, &n), 0);
	assert_int_equal(seen.history_node, 1); /* node 0, counted from 1 on the wire */
	assert_int_equal(seen.history_state, GS_PACKET_FAULTED);
	gs_history_free(recs, n);
	gs_close(c);
}

static void test_time_parse(void **state)
{
	const uint64_t now = 1700000000ull * 1000000000ull + 5;
	uint64_t t;

	(void)state;
	assert_int_equal(gs_time_parse("now", now, &t), 0);
	assert_int_equal(t, now);
	assert_int_equal(gs_time_parse("10m", now, &t), 0);
	assert_int_equal(t, now - 600ull * 1000000000ull);
	assert_int_equal(gs_time_parse("250ms", now, &t), 0);
	assert_int_equal(t, now - 250000000ull);
	assert_int_equal(gs_time_parse("1d", now, &t), 0);
	assert_int_equal(t, now - 86400ull * 1000000000ull);
	assert_int_equal(gs_time_parse("@1700000000", now, &t), 0);
	assert_int_equal(t, 1700000000ull * 1000000000ull);
	assert_int_equal(gs_time_parse("2023-11-14T22:13:20Z", now, &t), 0);
	assert_int_equal(t, 1700000000ull * 1000000000ull);
	assert_int_equal(gs_time_parse("2023-11-14 23:13:20.25+01:00", now, &t), 0);
	assert_int_equal(t, 1700000000ull * 1000000000ull + 250000000ull);
	assert_int_equal(gs_time_parse("2023-11-14T22:13Z", now, &t), 0);
	assert_int_equal(t, 1699999980ull * 1000000000ull);
	/* Local time: whatever the zone, it parses and lands within a day of the UTC reading. */
	assert_int_equal(gs_time_parse("2023-11-14T22:13:20", now, &t), 0);
	assert_true(t + 86400ull * 1000000000ull > 1700000000ull * 1000000000ull);
	assert_true(t < 1700086400ull * 1000000000ull);

	static const char *const bad[] = {
	        "",
	        "m",
	        "10",
	        "10 m",
	        "10y",
	        "-5m",
	        "@",
	        "@x",
	        "@1e9",
	        "2023-13-01",
	        "2023-11-14T",
	        "2023-11-14T25:00Z",
	        "2023-11-14T22:13+1",
	        "2023-11-14Tx",
	        "2023-11-14T22:13:20.Z",
	        "99999999999999999999s",
	        "1000000d",
	        "@99999999999999999999",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (gs_time_parse(bad[i], now, &t) == 0)
			fail_msg("'%s' parsed as a time", bad[i]);
	assert_int_equal(gs_time_parse(NULL, now, &t), GS_ERR_INVALID);
}

static void test_protocol_errors(void **state)
{
	gs_client *c = connect_test(NULL);
	gs_daemon_stats stats;
	uint64_t sync, device;

	(void)state;
	assert_int_equal(gs_stats(c, &stats), GS_ERR_PROTOCOL);            /* wrong id */
	assert_int_equal(gs_sync_create(c, 1, 0, &sync), GS_ERR_PROTOCOL); /* wrong body */
	assert_true(strlen(gs_client_message(c)) > 0);
	/* The socket is still usable afterwards. */
	assert_int_equal(gs_device_create(c, "ok", &device), 0);
	gs_close(c);
}

static void test_timeout(void **state)
{
	gs_client *c = connect_test(NULL);
	gs_packet_state st;
	uint64_t device;

	(void)state;
	gs_client_set_timeout(c, 200);
	assert_int_equal(gs_packet_wait(c, 1, 0, &st, NULL), GS_ERR_TIMEOUT);
	/* The unanswered request is abandoned; the next one gets its own answer. */
	assert_int_equal(gs_device_create(c, "ok", &device), 0);
	assert_int_equal(device, 42);
	gs_close(c);
}

static void test_read_write(void **state)
{
	gs_client *c = connect_test(NULL);
	uint8_t buf[16] = {0}, want[16];

	(void)state;
	memset(want, 0xab, sizeof(want));
	assert_int_equal(gs_allocation_read(c, 1, 0, buf, sizeof(buf)), 0);
	assert_memory_equal(buf, want, sizeof(buf));
	assert_int_equal(gs_allocation_read(c, 1, 1, buf, sizeof(buf)), GS_ERR_PROTOCOL);
	assert_int_equal(gs_allocation_read(c, 1, 0, NULL, 4), GS_ERR_INVALID);

	assert_int_equal(gs_allocation_write(c, 1, 0, "hello", 5), 0);
	assert_int_equal(seen.written_len, 5);
	assert_memory_equal(seen.written, "hello", 5);
	gs_close(c);
}

static void test_token_from_environment(void **state)
{
	gs_daemon_info *info;
	gs_client *c;

	(void)state;
	setenv("GPUSCHED_TOKEN", "envtok", 1);
	c = connect_test(NULL);
	assert_int_equal(gs_info(c, &info), 0);
	assert_string_equal(seen.token, "envtok");
	gs_info_free(info);
	gs_close(c);

	/* An explicit token wins. */
	c = connect_test("given");
	assert_int_equal(gs_info(c, &info), 0);
	assert_string_equal(seen.token, "given");
	gs_info_free(info);
	gs_close(c);
	unsetenv("GPUSCHED_TOKEN");
}

static void test_default_url(void **state)
{
	char buf[256], want[256];

	(void)state;
	setenv("GPUSCHED_URL", "tcp://10.0.0.1:7000", 1);
	assert_int_equal(gs_default_url(buf, sizeof(buf)), 0);
	assert_string_equal(buf, "tcp://10.0.0.1:7000");
	unsetenv("GPUSCHED_URL");

	setenv("XDG_RUNTIME_DIR", "/run/user/5", 1);
	assert_int_equal(gs_default_url(buf, sizeof(buf)), 0);
	assert_string_equal(buf, "ipc:///run/user/5/gpusched/gpusched.sock");
	assert_int_equal(gs_default_url(buf, 10), -1); /* does not fit */
	assert_int_equal(strlen(buf), 9);

	unsetenv("XDG_RUNTIME_DIR");
	snprintf(want, sizeof(want), "ipc:///tmp/gpusched-%u/gpusched.sock", (unsigned)getuid());
	assert_int_equal(gs_default_url(buf, sizeof(buf)), 0);
	assert_string_equal(buf, want);
}

static void test_connect_refused(void **state)
{
	gs_client *c = (gs_client *)&c;
	char why[256];

	(void)state;
	assert_int_equal(
	        gs_connect_ex("ipc:///nonexistent-gpusched/none.sock", NULL, &c, why, sizeof(why)),
	        GS_ERR_TRANSPORT);
	assert_null(c);
	assert_non_null(strstr(why, "ipc:///nonexistent-gpusched/none.sock"));
	assert_int_not_equal(gs_connect("nosuchscheme://x", NULL, &c), 0);
	assert_null(c);
}

/* A size that ends inside a field leaves that field out (half a pointer is not one): the URL
 * is then the default, from $GPUSCHED_URL. */
static void test_connect_options_size(void **state)
{
	(void)state;
	char why[256];
	gs_client *c = NULL;
	setenv("GPUSCHED_URL", "ipc:///nonexistent-gpusched/default.sock", 1);
	gs_connect_options o = {.url = "ipc:///nonexistent-gpusched/given.sock"};
	o.size = offsetof(gs_connect_options, url) + sizeof(o.url) / 2;
	assert_int_equal(gs_connect_with(&o, &c, why, sizeof(why)), GS_ERR_TRANSPORT);
	assert_non_null(strstr(why, "default.sock"));
	o.size = offsetof(gs_connect_options, url) + sizeof(o.url);
	assert_int_equal(gs_connect_with(&o, &c, why, sizeof(why)), GS_ERR_TRANSPORT);
	assert_non_null(strstr(why, "given.sock"));
	assert_null(c);
	unsetenv("GPUSCHED_URL");
}

/* A NULL client (what a failed connect leaves) makes every call GS_ERR_INVALID, never a
 * crash (a carried-over gap: the library dereferenced it). */
static void test_null_client(void **state)
{
	(void)state;
	gs_daemon_info *info = NULL;
	uint64_t id = 0;
	gs_history_filter f = {0};
	gs_packet_record *recs = NULL;
	size_t n = 0;
	gs_daemon_stats st;
	gs_dmabuf dma;
	char buf[4];
	gs_dmabuf_init(&dma);
	assert_int_equal(gs_dmabuf_nop(&dma), 0);
	assert_int_equal(gs_info(NULL, &info), GS_ERR_INVALID);
	assert_int_equal(gs_device_create(NULL, "x", &id), GS_ERR_INVALID);
	assert_int_equal(gs_history(NULL, &f, &recs, &n), GS_ERR_INVALID);
	assert_int_equal(gs_stats(NULL, &st), GS_ERR_INVALID);
	assert_int_equal(gs_submit(NULL, 1, &dma, 0, NULL), GS_ERR_INVALID);
	assert_int_equal(gs_allocation_read(NULL, 1, 0, buf, sizeof buf), GS_ERR_INVALID);
	assert_int_equal(gs_allocation_read(NULL, 1, 0, NULL, sizeof buf), GS_ERR_INVALID);
	assert_int_equal(gs_tenant_destroy(NULL, "t"), GS_ERR_INVALID);
	gs_client_set_adapter(NULL, 3);
	gs_client_set_timeout(NULL, 5);
	gs_client_set_io_piece(NULL, 7);
	assert_int_equal(gs_client_adapter(NULL), 0);
	assert_string_equal(gs_client_message(NULL), "");
	gs_close(NULL);
	gs_dmabuf_free(&dma);
}

/* A peer that accepts TCP and never answers: the dial ends at the client's timeout, not after
 * nng's own handshake timeout (10 s) or the system's TCP timeout. */
static void test_connect_bounded(void **state)
{
	(void)state;
	int l = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(l, 4), 0);
	assert_int_equal(getsockname(l, (struct sockaddr *)&a, &len), 0);
	char url[64], why[256];
	snprintf(url, sizeof url, "tcp://127.0.0.1:%u", ntohs(a.sin_port));
	gs_connect_options o = {.size = sizeof(o), .url = url, .timeout_ms = 300};
	gs_client *c = NULL;
	assert_int_equal(gs_connect_with(&o, &c, why, sizeof(why)), GS_ERR_TIMEOUT);
	assert_null(c);
	assert_non_null(strstr(why, "no connection within 300 ms"));
	close(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_info_and_envelope),
	        cmocka_unit_test(test_status_and_message),
	        cmocka_unit_test(test_submit_encoding),
	        cmocka_unit_test(test_submit_batch),
	        cmocka_unit_test(test_history_filter),
	        cmocka_unit_test(test_time_parse),
	        cmocka_unit_test(test_protocol_errors),
	        cmocka_unit_test(test_timeout),
	        cmocka_unit_test(test_read_write),
	        cmocka_unit_test(test_token_from_environment),
	        cmocka_unit_test(test_default_url),
	        cmocka_unit_test(test_connect_refused),
	        cmocka_unit_test(test_connect_bounded),
	        cmocka_unit_test(test_null_client),
	        cmocka_unit_test(test_connect_options_size),
	};

	return cmocka_run_group_tests(tests, start_server, stop_server);
}
