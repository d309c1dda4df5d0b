#include "core/events.h"

#include "core/daemon.h"
#include "core/log.h"
#include "core/util.h"

#include <nng/nng.h>
#include <nng/protocol/pubsub0/pub.h>
#include <stdlib.h>

struct gsd_events {
	nng_socket pub;
	uint64_t last_seq; /* of the last event published */
};

int gsd_events_open(gsd_daemon *d, const char *url)
{
	if (!url[0])
		return 0;
	gsd_events *ev = calloc(1, sizeof(*ev));
	if (!ev)
		return -1;
	int rv = nng_pub0_open(&ev->pub);
	if (rv == 0) {
		rv = gsd_listen(ev->pub, url, d->cfg.ipc_mode, d->tls, NULL);
		if (rv != 0)
			nng_close(ev->pub);
	}
	if (rv != 0) {
		GSD_ERROR("cannot publish events on %s: %s", url,
		          rv == NNG_EINVAL && !d->tls ? "tls+tcp:// needs \"tls\" in the config"
		                                      : nng_strerror(rv));
		free(ev);
		return -1;
	}
	d->events = ev;
	GSD_INFO("publishing events on %s", url);
	return 0;
}

void gsd_events_close(gsd_daemon *d)
{
	if (!d->events)
		return;
	nng_close(d->events->pub);
	free(d->events);
	d->events = NULL;
}

bool gsd_events_on(const gsd_daemon *d)
{
	return d->events != NULL;
}

void gsd_events_publish(gsd_daemon *d, Gpusched__V1__Event *ev)
{
	gsd_events *e = d->events;
	if (!e)
		return;
	ev->prev_seq = e->last_seq;
	e->last_seq = ev->seq;
	size_t len = gpusched__v1__event__get_packed_size(ev);
	nng_msg *m;
	if (nng_msg_alloc(&m, len) != 0)
		return;
	gpusched__v1__event__pack(ev, nng_msg_body(m));
	if (nng_sendmsg(e->pub, m, NNG_FLAG_NONBLOCK) != 0)
		nng_msg_free(m);
}

void gsd_events_packet(gsd_daemon *d, const gsd_packet_rec *rec, uint64_t seq, const char *detail)
{
	/* Every transition passes here: nothing to build when no PUB socket is configured. */
	if (!d->events)
		return;
	Gpusched__V1__Event ev = GPUSCHED__V1__EVENT__INIT;
	Gpusched__V1__PacketEvent pe = GPUSCHED__V1__PACKET_EVENT__INIT;
	pe.seq = seq;
	pe.packet = rec->packet;
	pe.context = rec->context;
	pe.state = rec->state;
	/* The same clock as the audit event. */
	pe.time_ns = rec->event_ns ? rec->event_ns : rec->submitted_ns;
	pe.detail = (char *)(detail ? detail : "");
	ev.seq = seq;
	ev.time_ns = pe.time_ns;
	ev.tenant = (char *)rec->tenant;
	ev.body_case = GPUSCHED__V1__EVENT__BODY_PACKET;
	ev.packet = &pe;
	gsd_events_publish(d, &ev);
}

void gsd_events_note(gsd_daemon *d, const char *tenant, const char *kind, const char *text)
{
	uint64_t seq = gsd_audit_note(d->audit, tenant, kind, text);
	if (!d->events)
		return;
	Gpusched__V1__Event ev = GPUSCHED__V1__EVENT__INIT;
	ev.seq = seq;
	ev.time_ns = gsd_now_ns();
	ev.tenant = (char *)tenant;
	ev.body_case = GPUSCHED__V1__EVENT__BODY_MESSAGE;
	ev.message = (char *)text;
	gsd_events_publish(d, &ev);
}
