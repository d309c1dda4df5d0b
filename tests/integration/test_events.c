/* The PUB event stream (gpuschedd --events URL): a subscriber receives one Event per packet
 * transition, in order, with the packet's id, state and tenant. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>
#include <nng/nng.h>
#include <nng/protocol/pubsub0/sub.h>

#include "gpusched.h"
#include "gpusched.pb-c.h"
#include "itest.h"
#include "testd.h"

static void test_packet_events_published(void **state)
{
	(void)state;
	char dir[] = "/tmp/gpusched-events-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char url[300];
	snprintf(url, sizeof(url), "ipc://%s/events.sock", dir);
	const char *const args[] = {"--events", url, NULL};
	gs_testd t;
	assert_int_equal(gs_testd_start(&t, args), 0);

	nng_socket sub;
	assert_int_equal(nng_sub0_open(&sub), 0);
	assert_int_equal(nng_socket_set(sub, NNG_OPT_SUB_SUBSCRIBE, "", 0), 0);
	assert_int_equal(nng_socket_set_ms(sub, NNG_OPT_RECVTIMEO, 5000), 0);
	assert_int_equal(nng_dial(sub, url, NULL, 0), 0);

	gs_client *c = itest_connect(&t, NULL);
	itest_layout lay;
	itest_layout_of(c, &lay);
	uint64_t dev;
	assert_int_equal(gs_device_create(c, "events", &dev), 0);
	uint64_t ctx = itest_context(c, dev, 0, lay.paging_node);
	gs_dmabuf b;
	gs_dmabuf_init(&b);
	assert_int_equal(gs_dmabuf_nop(&b), 0);
	/* PUB drops what is sent before the subscription is connected: submit until one
	 * packet's events arrive (bounded), then check that packet's whole sequence. */
	uint64_t packet = 0;
	int want[] = {GPUSCHED__V1__PACKET_STATE__PACKET_STATE_SUBMITTED,
	              GPUSCHED__V1__PACKET_STATE__PACKET_STATE_READY,
	              GPUSCHED__V1__PACKET_STATE__PACKET_STATE_RUNNING,
	              GPUSCHED__V1__PACKET_STATE__PACKET_STATE_COMPLETED};
	size_t got = 0;
	long long deadline = gs_test_now_ms() + 15000;
	while (got < 4 && gs_test_now_ms() < deadline) {
		if (got == 0)
			packet = itest_submit_wait(c, ctx, &b, 0);
		nng_msg *m;
		if (nng_recvmsg(sub, &m, 0) != 0)
			continue;
		Gpusched__V1__Event *ev =
		        gpusched__v1__event__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
		nng_msg_free(m);
		assert_non_null(ev);
		assert_true(ev->seq > 0);
		if (ev->body_case == GPUSCHED__V1__EVENT__BODY_PACKET &&
		    ev->packet->packet == packet) {
			assert_int_equal(ev->packet->state, want[got]);
			assert_string_equal(ev->tenant, "default");
			assert_true(ev->packet->time_ns > 0);
			got++;
		} else if (ev->body_case == GPUSCHED__V1__EVENT__BODY_PACKET && got == 0 &&
		           (int)ev->packet->state == want[0]) {
			/* The first event seen starts a packet's sequence. */
			packet = ev->packet->packet;
			got = 1;
		}
		gpusched__v1__event__free_unpacked(ev, NULL);
	}
	assert_int_equal(got, 4);
	gs_dmabuf_free(&b);
	gs_close(c);
	nng_close(sub);
	assert_int_equal(gs_testd_stop(&t), 0);
	gs_testd_cleanup(&t);
	char cmd[320];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_packet_events_published),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
