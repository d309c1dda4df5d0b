/*
 * Tenant administration (the daemon answers these only for an admin token).
 */
#include <stddef.h>
#include <stdlib.h>

#include "rpc.h"

int gs_tenant_create(gs_client *c, const gs_tenant *tenant, const char *token, char **token_out)
{
	Gpusched__V1__TenantCreateRequest body = GPUSCHED__V1__TENANT_CREATE_REQUEST__INIT;
	Gpusched__V1__Tenant t = GPUSCHED__V1__TENANT__INIT;
	Gpusched__V1__Response *resp;
	int rv;

	if (token_out)
		*token_out = NULL;
	if (!tenant || !tenant->name || !tenant->name[0])
		return gsc_fail(c, GS_ERR_INVALID, "a tenant needs a name");
	/* Packing only reads the strings; the generated structs just lack const. */
	t.name = tenant->name;
	t.kind = (Gpusched__V1__TenantKind)tenant->kind;
	t.share = tenant->share;
	t.priority_ceiling = tenant->priority_ceiling;
	t.memory_quota = tenant->memory_quota;
	t.context_limit = tenant->context_limit;
	t.admin = tenant->admin;
	t.banned = tenant->banned;
	t.allocation_limit = tenant->allocation_limit;
	t.max_requests_per_second = tenant->max_requests_per_second;
	t.max_message = tenant->max_message;
	t.packet_limit = tenant->packet_limit;
	t.sync_limit = tenant->sync_limit;
	body.tenant = &t;
	body.token = (char *)(token ? token : "");
	rv = gsc_call(c, GSC_REQ(TENANT_CREATE), &body, GSC_RESP(TENANT_CREATE), 0, &resp);
	if (rv != 0)
		return rv;
	if (token_out) {
		*token_out = gsc_strdup0(resp->tenant_create->token);
		if (!*token_out)
			rv = gsc_fail(c, GS_ERR_NOMEM, "out of memory copying the token");
	}
	gsc_response_free(resp);
	return rv;
}

static int tenant_destroy(gs_client *c, const char *name, bool release_devices)
{
	Gpusched__V1__TenantDestroyRequest body = GPUSCHED__V1__TENANT_DESTROY_REQUEST__INIT;

	if (!name || !name[0])
		return gsc_fail(c, GS_ERR_INVALID, "a tenant needs a name");
	body.name = (char *)name;
	body.release_devices = release_devices;
	return gsc_call_plain(c, GSC_REQ(TENANT_DESTROY), &body);
}

int gs_tenant_destroy(gs_client *c, const char *name)
{
	return tenant_destroy(c, name, false);
}

int gs_tenant_destroy_release(gs_client *c, const char *name)
{
	return tenant_destroy(c, name, true);
}

int gs_tenant_update(gs_client *c, const char *name, const gs_tenant *settings, unsigned fields)
{
	/* In the order of gs_tenant_field's bits: the names TenantUpdateRequest.fields take. */
	static const char *const names[] = {"share",
	                                    "priority_ceiling",
	                                    "memory_quota",
	                                    "context_limit",
	                                    "allocation_limit",
	                                    "max_requests_per_second",
	                                    "admin",
	                                    "max_message",
	                                    "packet_limit",
	                                    "sync_limit",
	                                    "banned"};
	Gpusched__V1__TenantUpdateRequest body = GPUSCHED__V1__TENANT_UPDATE_REQUEST__INIT;
	Gpusched__V1__Tenant t = GPUSCHED__V1__TENANT__INIT;
	char *chosen[sizeof(names) / sizeof(names[0])];
	size_t n = 0;

	if (!name || !name[0] || !settings)
		return gsc_fail(c, GS_ERR_INVALID, "a tenant update needs a name and settings");
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (fields & (1u << i))
			chosen[n++] = (char *)names[i];
	if (n == 0 || fields >> (sizeof(names) / sizeof(names[0])))
		return gsc_fail(c, GS_ERR_INVALID, "a tenant update needs known fields to change");
	t.share = settings->share;
	t.priority_ceiling = settings->priority_ceiling;
	t.memory_quota = settings->memory_quota;
	t.context_limit = settings->context_limit;
	t.allocation_limit = settings->allocation_limit;
	t.max_requests_per_second = settings->max_requests_per_second;
	t.max_message = settings->max_message;
	t.packet_limit = settings->packet_limit;
	t.sync_limit = settings->sync_limit;
	t.admin = settings->admin;
	t.banned = settings->banned;
	body.name = (char *)name;
	body.tenant = &t;
	body.n_fields = n;
	body.fields = chosen;
	return gsc_call_plain(c, GSC_REQ(TENANT_UPDATE), &body);
}

static void copy_tenant(void *entry, const ProtobufCMessage *msg)
{
	const Gpusched__V1__Tenant *t = (const Gpusched__V1__Tenant *)msg;

	*(gs_tenant *)entry = (gs_tenant){
	        .kind = (gs_tenant_kind)t->kind,
	        .share = t->share,
	        .priority_ceiling = t->priority_ceiling,
	        .memory_quota = t->memory_quota,
	        .context_limit = t->context_limit,
	        .admin = t->admin,
	        .banned = t->banned,
	        .allocation_limit = t->allocation_limit,
	        .max_requests_per_second = t->max_requests_per_second,
	        .max_message = t->max_message,
	        .packet_limit = t->packet_limit,
	        .sync_limit = t->sync_limit,
	};
}

static const gsc_entry_kind tenant_kind = {
        .size = sizeof(gs_tenant),
        .copy = copy_tenant,
        GSC_STRINGS(GSC_STRING(gs_tenant, Gpusched__V1__Tenant, name)),
        .what = "tenants",
        .field = "tenants",
};

void gs_tenant_list_free(gs_tenant *tenants, size_t count)
{
	gsc_free_list(&tenant_kind, tenants, count);
}

int gs_tenant_list(gs_client *c, gs_tenant **tenants, size_t *count)
{
	Gpusched__V1__TenantListRequest body = GPUSCHED__V1__TENANT_LIST_REQUEST__INIT;
	void *list;
	int rv;

	rv = gsc_call_list(c, GSC_REQ(TENANT_LIST), &body, GSC_RESP(TENANT_LIST), &tenant_kind,
	                   &list, count);
	*tenants = list;
	return rv;
}

/* How many devices the release destroyed. */
static void copy_released(void *out, const ProtobufCMessage *answer)
{
	*(uint32_t *)out = ((const Gpusched__V1__GuestReleaseResponse *)answer)->devices;
}

static int guest_release(gs_client *c, uint64_t guest, bool all, uint32_t *devices)
{
	Gpusched__V1__GuestReleaseRequest body = GPUSCHED__V1__GUEST_RELEASE_REQUEST__INIT;

	body.guest = guest;
	body.all_guests = all;
	return gsc_call_copy(c, GSC_REQ(GUEST_RELEASE), &body, GSC_RESP(GUEST_RELEASE),
	                     copy_released, devices);
}

int gs_guest_release(gs_client *c, uint64_t guest, uint32_t *devices)
{
	if (!guest)
		return gsc_fail(c, GS_ERR_INVALID, "guest 0 is the virtual machine itself");
	return guest_release(c, guest, false, devices);
}

int gs_guest_release_all(gs_client *c, uint32_t *devices)
{
	return guest_release(c, 0, true, devices);
}
