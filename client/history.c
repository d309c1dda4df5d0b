/*
 * Queries of the daemon's audit record: packet history, a packet's events, the memory
 * manager's moves, statistics.
 */
#include <stddef.h>
#include <stdlib.h>

#include "rpc.h"

static void copy_record(void *entry, const ProtobufCMessage *msg)
{
	const Gpusched__V1__PacketRecord *r = (const Gpusched__V1__PacketRecord *)msg;

	*(gs_packet_record *)entry = (gs_packet_record){
	        .packet = r->packet,
	        .device = r->device,
	        .context = r->context,
	        .node = r->node,
	        .fence = r->fence,
	        .submit_flags = r->submit_flags,
	        .patch_flags = r->patch_flags,
	        .dma_size = r->dma_size,
	        .allocation_count = r->allocation_count,
	        .patch_count = r->patch_count,
	        .state = (gs_packet_state)r->state,
	        .submitted_ns = r->submitted_ns,
	        .ready_ns = r->ready_ns,
	        .started_ns = r->started_ns,
	        .completed_ns = r->completed_ns,
	        .preemptions = r->preemptions,
	        .resubmissions = r->resubmissions,
	};
}

#define RECORD_STRING(member) GSC_STRING(gs_packet_record, Gpusched__V1__PacketRecord, member)

static const gsc_entry_kind record_kind = {
        .size = sizeof(gs_packet_record),
        .copy = copy_record,
        GSC_STRINGS(RECORD_STRING(result), RECORD_STRING(tenant), RECORD_STRING(dispatches)),
        .what = "history",
        .field = "packets",
};

void gs_history_free(gs_packet_record *records, size_t count)
{
	gsc_free_list(&record_kind, records, count);
}

int gs_history(gs_client *c, const gs_history_filter *filter, gs_packet_record **records,
               size_t *count)
{
	Gpusched__V1__HistoryRequest body = GPUSCHED__V1__HISTORY_REQUEST__INIT;
	const gs_history_filter any = {0};
	void *list;
	int rv;

	if (!filter)
		filter = &any;
	body.context = filter->context;
	body.device = filter->device;
	body.state = (Gpusched__V1__PacketState)filter->state;
	/* The wire counts nodes from 1 so that 0 can mean "any". */
	body.node = filter->match_node ? filter->node + 1 : 0;
	body.limit = filter->limit;
	body.before_packet = filter->before_packet;
	body.allocation = filter->allocation;
	body.paging = filter->paging;
	body.since_ns = filter->since_ns;
	body.until_ns = filter->until_ns;
	body.flags_mask = filter->flags_mask;
	body.fence = filter->fence;
	body.oldest_first = filter->oldest_first;
	body.after_packet = filter->after_packet;
	body.tenant = (char *)(filter->tenant ? filter->tenant : "");
	rv = gsc_call_list(c, GSC_REQ(HISTORY), &body, GSC_RESP(HISTORY), &record_kind, &list,
	                   count);
	*records = list;
	return rv;
}

static void copy_event(void *entry, const ProtobufCMessage *msg)
{
	const Gpusched__V1__PacketEvent *e = (const Gpusched__V1__PacketEvent *)msg;

	*(gs_packet_event *)entry = (gs_packet_event){
	        .seq = e->seq,
	        .packet = e->packet,
	        .state = (gs_packet_state)e->state,
	        .time_ns = e->time_ns,
	        .context = e->context,
	};
}

const gsc_entry_kind gsc_event_kind = {
        .size = sizeof(gs_packet_event),
        .copy = copy_event,
        GSC_STRINGS(GSC_STRING(gs_packet_event, Gpusched__V1__PacketEvent, detail)),
        .what = "events",
        .field = "events",
};

void gs_packet_events_free(gs_packet_event *events, size_t count)
{
	gsc_free_list(&gsc_event_kind, events, count);
}

static int packet_events(gs_client *c, Gpusched__V1__PacketEventsRequest *body,
                         gs_packet_event **events, size_t *count)
{
	void *list;
	int rv;

	rv = gsc_call_list(c, GSC_REQ(PACKET_EVENTS), body, GSC_RESP(PACKET_EVENTS),
	                   &gsc_event_kind, &list, count);
	*events = list;
	return rv;
}

int gs_packet_events(gs_client *c, uint64_t packet, gs_packet_event **events, size_t *count)
{
	Gpusched__V1__PacketEventsRequest body = GPUSCHED__V1__PACKET_EVENTS_REQUEST__INIT;

	body.packet = packet;
	return packet_events(c, &body, events, count);
}

int gs_packet_events_window(gs_client *c, uint64_t since_ns, uint64_t until_ns, uint64_t after_seq,
                            uint32_t limit, gs_packet_event **events, size_t *count)
{
	Gpusched__V1__PacketEventsRequest body = GPUSCHED__V1__PACKET_EVENTS_REQUEST__INIT;

	/* A window must bound something: [1, ...) stands for "everything". */
	body.since_ns = since_ns ? since_ns : 1;
	body.until_ns = until_ns;
	body.after_seq = after_seq;
	body.limit = limit;
	return packet_events(c, &body, events, count);
}

int gs_packet_events_range(gs_client *c, uint64_t after_seq, uint64_t before_seq, uint32_t limit,
                           gs_packet_event **events, size_t *count)
{
	Gpusched__V1__PacketEventsRequest body = GPUSCHED__V1__PACKET_EVENTS_REQUEST__INIT;

	body.after_seq = after_seq;
	body.before_seq = before_seq;
	body.limit = limit;
	return packet_events(c, &body, events, count);
}

static void copy_move(void *entry, const ProtobufCMessage *msg)
{
	const Gpusched__V1__MoveRecord *m = (const Gpusched__V1__MoveRecord *)msg;

	*(gs_move *)entry = (gs_move){
	        .seq = m->seq,
	        .time_ns = m->time_ns,
	        .allocation = m->allocation,
	        .device = m->device,
	        .packet = m->packet,
	        .for_packet = m->for_packet,
	        .kind = (gs_move_kind)m->kind,
	        .from_segment = m->from_segment,
	        .from_offset = m->from_offset,
	        .to_segment = m->to_segment,
	        .to_offset = m->to_offset,
	        .bytes = m->bytes,
	        .transfer_flags = m->transfer_flags,
	        .pieces = m->pieces,
	        .offsets_withheld = m->offsets_withheld,
	};
}

static const gsc_entry_kind move_kind = {
        .size = sizeof(gs_move),
        .copy = copy_move,
        GSC_STRINGS(GSC_STRING(gs_move, Gpusched__V1__MoveRecord, reason)),
        .what = "moves",
        .field = "moves",
};

void gs_moves_free(gs_move *moves, size_t count)
{
	gsc_free_list(&move_kind, moves, count);
}

int gs_moves(gs_client *c, const gs_moves_filter *filter, gs_move **moves, size_t *count)
{
	Gpusched__V1__MovesRequest body = GPUSCHED__V1__MOVES_REQUEST__INIT;
	const gs_moves_filter any = {0};
	void *list;
	int rv;

	if (!filter)
		filter = &any;
	body.allocation = filter->allocation;
	body.device = filter->device;
	body.packet = filter->packet;
	body.limit = filter->limit;
	body.before_seq = filter->before_seq;
	rv = gsc_call_list(c, GSC_REQ(MOVES), &body, GSC_RESP(MOVES), &move_kind, &list, count);
	*moves = list;
	return rv;
}

static void copy_stats(void *out, const ProtobufCMessage *answer)
{
	const Gpusched__V1__StatsResponse *r = (const Gpusched__V1__StatsResponse *)answer;

	*(gs_daemon_stats *)out = (gs_daemon_stats){
	        .requests = r->requests,
	        .errors = r->errors,
	        .packets_submitted = r->packets_submitted,
	        .packets_completed = r->packets_completed,
	        .packets_faulted = r->packets_faulted,
	        .packets_cancelled = r->packets_cancelled,
	        .packets_rejected = r->packets_rejected,
	        .audit_records = r->audit_records,
	        .audit_commits = r->audit_commits,
	        .devices = r->devices,
	        .contexts = r->contexts,
	        .allocations = r->allocations,
	        .uptime_ns = r->uptime_ns,
	        .paging_packets = r->paging_packets,
	        .paging_bytes = r->paging_bytes,
	        .evictions = r->evictions,
	        .audit_queued = r->audit_queued,
	        .audit_failed_commits = r->audit_failed_commits,
	        .audit_dropped = r->audit_dropped,
	        .audit_health = (int)r->audit_health,
	        .tenant_view = r->tenant_view,
	};
}

int gs_stats(gs_client *c, gs_daemon_stats *out)
{
	Gpusched__V1__StatsRequest body = GPUSCHED__V1__STATS_REQUEST__INIT;

	return gsc_call_copy(c, GSC_REQ(STATS), &body, GSC_RESP(STATS), copy_stats, out);
}

void gs_explanation_free(gs_explanation *e)
{
	if (!e)
		return;
	gsc_free_list(&record_kind, e->packet, e->packet ? 1 : 0);
	gsc_free_list(&gsc_event_kind, e->events, e->event_count);
	gsc_free_list(&move_kind, e->moves, e->move_count);
	free(e);
}

int gs_explain(gs_client *c, uint64_t packet, const char *tenant, gs_explanation **out)
{
	Gpusched__V1__ExplainRequest body = GPUSCHED__V1__EXPLAIN_REQUEST__INIT;
	Gpusched__V1__Response *resp;
	gs_explanation *e;
	void *list;
	size_t n;
	int rv;

	*out = NULL;
	body.packet = packet;
	body.tenant = (char *)(tenant ? tenant : "");
	rv = gsc_call(c, GSC_REQ(EXPLAIN), &body, GSC_RESP(EXPLAIN), 0, &resp);
	if (rv != 0)
		return rv;
	const Gpusched__V1__ExplainResponse *r = resp->explain;
	e = calloc(1, sizeof(*e));
	rv = e ? 0 : gsc_fail(c, GS_ERR_NOMEM, "out of memory");
	if (rv == 0 && !r->packet)
		rv = gsc_fail(c, GS_ERR_PROTOCOL, "the explanation has no packet");
	if (rv == 0) {
		const ProtobufCMessage *pm = &r->packet->base;
		rv = gsc_copy_list(c, &record_kind, (ProtobufCMessage *const *)&pm, 1, &list, &n);
		e->packet = list;
	}
	if (rv == 0) {
		rv = gsc_copy_list(c, &gsc_event_kind, (ProtobufCMessage *const *)r->events,
		                   r->n_events, &list, &n);
		e->events = list;
		e->event_count = n;
	}
	if (rv == 0) {
		rv = gsc_copy_list(c, &move_kind, (ProtobufCMessage *const *)r->moves, r->n_moves,
		                   &list, &n);
		e->moves = list;
		e->move_count = n;
	}
	gsc_response_free(resp);
	if (rv != 0) {
		gs_explanation_free(e);
		return rv;
	}
	*out = e;
	return 0;
}

static void copy_usage_row(void *entry, const ProtobufCMessage *msg)
{
	const Gpusched__V1__UsageRow *r = (const Gpusched__V1__UsageRow *)msg;

	*(gs_usage_row *)entry = (gs_usage_row){
	        .context = r->context,
	        .adapter = r->adapter,
	        .node = r->node,
	        .packets = r->packets,
	        .completed = r->completed,
	        .faulted = r->faulted,
	        .cancelled = r->cancelled,
	        .preemptions = r->preemptions,
	        .resubmissions = r->resubmissions,
	        .busy_ns = r->busy_ns,
	        .utilisation = r->utilisation,
	        .paging_bytes = r->paging_bytes,
	        .wait_ns = {r->wait_p50_ns, r->wait_p95_ns, r->wait_p99_ns},
	        .run_ns = {r->run_p50_ns, r->run_p95_ns, r->run_p99_ns},
	};
}

static const gsc_entry_kind usage_kind = {
        .size = sizeof(gs_usage_row),
        .copy = copy_usage_row,
        GSC_STRINGS(GSC_STRING(gs_usage_row, Gpusched__V1__UsageRow, tenant)),
        .what = "usage",
};

void gs_usage_free(gs_usage *u)
{
	if (!u)
		return;
	gsc_free_list(&usage_kind, u->rows, u->count);
	free(u);
}

int gs_get_usage(gs_client *c, const gs_usage_filter *filter, gs_usage **out)
{
	Gpusched__V1__UsageRequest body = GPUSCHED__V1__USAGE_REQUEST__INIT;
	const gs_usage_filter any = {0};
	Gpusched__V1__Response *resp;
	void *list;
	int rv;

	*out = NULL;
	if (!filter)
		filter = &any;
	body.since_ns = filter->since_ns;
	body.until_ns = filter->until_ns;
	body.by = (Gpusched__V1__UsageKey)filter->by;
	body.tenant = (char *)(filter->tenant ? filter->tenant : "");
	rv = gsc_call(c, GSC_REQ(USAGE), &body, GSC_RESP(USAGE), 0, &resp);
	if (rv != 0)
		return rv;
	gs_usage *u = calloc(1, sizeof(*u));
	if (!u) {
		gsc_response_free(resp);
		return gsc_fail(c, GS_ERR_NOMEM, "out of memory");
	}
	rv = gsc_copy_list(c, &usage_kind, (ProtobufCMessage *const *)resp->usage->rows,
	                   resp->usage->n_rows, &list, &u->count);
	u->rows = list;
	u->window_ns = resp->usage->window_ns;
	u->truncated = resp->usage->truncated;
	gsc_response_free(resp);
	if (rv != 0) {
		gs_usage_free(u);
		return rv;
	}
	*out = u;
	return 0;
}
