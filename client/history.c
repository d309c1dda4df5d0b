/*
 * Queries of the daemon's audit record: packet history, a packet's events, the memory
 * manager's moves, statistics.
 */
#include <stdlib.h>

#include "rpc.h"

void gs_history_free(gs_packet_record *records, size_t count)
{
	if (!records)
		return;
	for (size_t i = 0; i < count; i++) {
		free(records[i].result);
		free(records[i].tenant);
	}
	free(records);
}

static int copy_record(gs_packet_record *dst, const Gpusched__V1__PacketRecord *r)
{
	*dst = (gs_packet_record){
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
	        .result = gsc_strdup0(r->result),
	        .tenant = gsc_strdup0(r->tenant),
	};
	return dst->result && dst->tenant ? 0 : GS_ERR_NOMEM;
}

int gs_history(gs_client *c, const gs_history_filter *filter, gs_packet_record **records,
               size_t *count)
{
	Gpusched__V1__HistoryRequest body = GPUSCHED__V1__HISTORY_REQUEST__INIT;
	const gs_history_filter any = {0};
	const Gpusched__V1__HistoryResponse *r;
	Gpusched__V1__Response *resp;
	gs_packet_record *out = NULL;
	size_t n = 0;
	int rv;

	*records = NULL;
	*count = 0;
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
	rv = gsc_call(c, GSC_REQ(HISTORY), &body, GSC_RESP(HISTORY), 0, &resp);
	if (rv != 0)
		return rv;
	r = resp->history;
	if (r->n_packets) {
		out = calloc(r->n_packets, sizeof(*out));
		if (!out)
			rv = GS_ERR_NOMEM;
	}
	for (; rv == 0 && n < r->n_packets; n++)
		rv = copy_record(&out[n], r->packets[n]);
	gsc_response_free(resp);
	if (rv != 0) {
		/* n counts the entry whose copy failed, so its partial strings go too. */
		gs_history_free(out, n);
		return gsc_fail(c, rv, "out of memory copying the history");
	}
	*records = out;
	*count = n;
	return 0;
}

void gs_packet_events_free(gs_packet_event *events, size_t count)
{
	if (!events)
		return;
	for (size_t i = 0; i < count; i++)
		free(events[i].detail);
	free(events);
}

int gs_packet_events(gs_client *c, uint64_t packet, gs_packet_event **events, size_t *count)
{
	Gpusched__V1__PacketEventsRequest body = GPUSCHED__V1__PACKET_EVENTS_REQUEST__INIT;
	const Gpusched__V1__PacketEventsResponse *r;
	Gpusched__V1__Response *resp;
	gs_packet_event *out = NULL;
	size_t n = 0;
	int rv;

	*events = NULL;
	*count = 0;
	body.packet = packet;
	rv = gsc_call(c, GSC_REQ(PACKET_EVENTS), &body, GSC_RESP(PACKET_EVENTS), 0, &resp);
	if (rv != 0)
		return rv;
	r = resp->packet_events;
	if (r->n_events) {
		out = calloc(r->n_events, sizeof(*out));
		if (!out)
			rv = GS_ERR_NOMEM;
	}
	for (; rv == 0 && n < r->n_events; n++) {
		const Gpusched__V1__PacketEvent *e = r->events[n];

		out[n] = (gs_packet_event){
		        .seq = e->seq,
		        .packet = e->packet,
		        .state = (gs_packet_state)e->state,
		        .time_ns = e->time_ns,
		        .detail = gsc_strdup0(e->detail),
		};
		if (!out[n].detail)
			rv = GS_ERR_NOMEM;
	}
	gsc_response_free(resp);
	if (rv != 0) {
		gs_packet_events_free(out, n);
		return gsc_fail(c, rv, "out of memory copying the events");
	}
	*events = out;
	*count = n;
	return 0;
}

void gs_moves_free(gs_move *moves, size_t count)
{
	if (!moves)
		return;
	for (size_t i = 0; i < count; i++)
		free(moves[i].reason);
	free(moves);
}

int gs_moves(gs_client *c, const gs_moves_filter *filter, gs_move **moves, size_t *count)
{
	Gpusched__V1__MovesRequest body = GPUSCHED__V1__MOVES_REQUEST__INIT;
	const gs_moves_filter any = {0};
	const Gpusched__V1__MovesResponse *r;
	Gpusched__V1__Response *resp;
	gs_move *out = NULL;
	size_t n = 0;
	int rv;

	*moves = NULL;
	*count = 0;
	if (!filter)
		filter = &any;
	body.allocation = filter->allocation;
	body.device = filter->device;
	body.packet = filter->packet;
	body.limit = filter->limit;
	body.before_seq = filter->before_seq;
	rv = gsc_call(c, GSC_REQ(MOVES), &body, GSC_RESP(MOVES), 0, &resp);
	if (rv != 0)
		return rv;
	r = resp->moves;
	if (r->n_moves) {
		out = calloc(r->n_moves, sizeof(*out));
		if (!out)
			rv = GS_ERR_NOMEM;
	}
	for (; rv == 0 && n < r->n_moves; n++) {
		const Gpusched__V1__MoveRecord *m = r->moves[n];

		out[n] = (gs_move){
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
		        .reason = gsc_strdup0(m->reason),
		};
		if (!out[n].reason)
			rv = GS_ERR_NOMEM;
	}
	gsc_response_free(resp);
	if (rv != 0) {
		gs_moves_free(out, n);
		return gsc_fail(c, rv, "out of memory copying the moves");
	}
	*moves = out;
	*count = n;
	return 0;
}

int gs_stats(gs_client *c, gs_daemon_stats *out)
{
	Gpusched__V1__StatsRequest body = GPUSCHED__V1__STATS_REQUEST__INIT;
	const Gpusched__V1__StatsResponse *r;
	Gpusched__V1__Response *resp;
	int rv;

	rv = gsc_call(c, GSC_REQ(STATS), &body, GSC_RESP(STATS), 0, &resp);
	if (rv != 0)
		return rv;
	r = resp->stats;
	*out = (gs_daemon_stats){
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
	};
	gsc_response_free(resp);
	return 0;
}
