/*
 * Client paging requests (MakeResident, Evict, Transfer) and the allocation list.
 */
#include "daemon.h"
#include "rpc.h"

static void not_yet(gs_call *c)
{
	gs_call_error(c, GS_ST(UNIMPLEMENTED), "%s is defined by the contract but not served yet",
	              gs_request_name(c->req->body_case));
}

void gs_h_make_resident(gs_daemon *d, gs_call *c)
{
	(void)d;
	not_yet(c);
}
void gs_h_evict(gs_daemon *d, gs_call *c)
{
	(void)d;
	not_yet(c);
}
void gs_h_transfer(gs_daemon *d, gs_call *c)
{
	(void)d;
	not_yet(c);
}
void gs_h_allocation_list(gs_daemon *d, gs_call *c)
{
	(void)d;
	not_yet(c);
}
