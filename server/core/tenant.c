#include "core/tenant.h"

#include "core/daemon.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

gsd_tenant *gsd_tenant_add(gsd_daemon *d, const gsd_tenant_config *tc)
{
	if (d->ntenants >= sizeof(d->tenants) / sizeof(d->tenants[0]))
		return NULL;
	gsd_tenant *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->conf = *tc;
	if (!t->conf.share)
		t->conf.share = 1;
	d->tenants[d->ntenants++] = t;
	return t;
}

gsd_tenant *gsd_tenant_by_token(gsd_daemon *d, const char *token)
{
	for (uint32_t i = 0; i < d->ntenants; i++)
		if (!d->tenants[i]->removed &&
		    strcmp(d->tenants[i]->conf.token, token ? token : "") == 0)
			return d->tenants[i];
	return NULL;
}

gsd_tenant *gsd_tenant_by_name(gsd_daemon *d, const char *name)
{
	for (uint32_t i = 0; i < d->ntenants; i++)
		if (!d->tenants[i]->removed && strcmp(d->tenants[i]->conf.name, name) == 0)
			return d->tenants[i];
	return NULL;
}

void gsd_tenant_remove(gsd_tenant *t)
{
	/* Kept in memory (old records and retired packets point at it), but a removed tenant is
	 * skipped by every token and name lookup, so it can never authenticate again. */
	t->removed = true;
	memset(t->conf.token, 0, sizeof(t->conf.token));
}
