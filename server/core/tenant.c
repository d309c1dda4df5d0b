#include "core/tenant.h"

#include "core/daemon.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#define HASH_PREFIX "b2$"

static void token_digest(const uint8_t salt[GSD_TOKEN_SALT], const char *token,
                         uint8_t out[GSD_TOKEN_HASH])
{
	crypto_generichash(out, GSD_TOKEN_HASH, (const unsigned char *)token, strlen(token), salt,
	                   GSD_TOKEN_SALT);
}

static int hash_text(const uint8_t salt[GSD_TOKEN_SALT], const uint8_t hash[GSD_TOKEN_HASH],
                     char *out, size_t cap)
{
	if (cap < sizeof HASH_PREFIX + 2 * (GSD_TOKEN_SALT + GSD_TOKEN_HASH) + 1)
		return -1;
	strcpy(out, HASH_PREFIX);
	char *p = out + strlen(out);
	sodium_bin2hex(p, 2 * GSD_TOKEN_SALT + 1, salt, GSD_TOKEN_SALT);
	p += 2 * GSD_TOKEN_SALT;
	*p++ = '$';
	sodium_bin2hex(p, 2 * GSD_TOKEN_HASH + 1, hash, GSD_TOKEN_HASH);
	return 0;
}

int gsd_token_hash_text(const char *token, char *out, size_t cap)
{
	uint8_t salt[GSD_TOKEN_SALT], hash[GSD_TOKEN_HASH];
	if (sodium_init() < 0)
		return -1;
	randombytes_buf(salt, sizeof salt);
	token_digest(salt, token, hash);
	return hash_text(salt, hash, out, cap);
}

int gsd_tenant_hash_text(const gsd_tenant *t, char *out, size_t cap)
{
	return hash_text(t->token_salt, t->token_hash, out, cap);
}

int gsd_token_hash_parse(const char *text, uint8_t salt[GSD_TOKEN_SALT],
                         uint8_t hash[GSD_TOKEN_HASH])
{
	size_t n = strlen(HASH_PREFIX);
	if (strncmp(text, HASH_PREFIX, n) != 0 ||
	    strlen(text) != n + 2 * GSD_TOKEN_SALT + 1 + 2 * GSD_TOKEN_HASH ||
	    text[n + 2 * GSD_TOKEN_SALT] != '$')
		return -1;
	size_t len;
	const char *end;
	if (sodium_hex2bin(salt, GSD_TOKEN_SALT, text + n, 2 * GSD_TOKEN_SALT, NULL, &len, &end) !=
	            0 ||
	    len != GSD_TOKEN_SALT)
		return -1;
	if (sodium_hex2bin(hash, GSD_TOKEN_HASH, text + n + 2 * GSD_TOKEN_SALT + 1,
	                   2 * GSD_TOKEN_HASH, NULL, &len, &end) != 0 ||
	    len != GSD_TOKEN_HASH)
		return -1;
	return 0;
}

int gsd_tenant_set_credential(gsd_tenant *t, const gsd_tenant_config *tc)
{
	if (tc->token_hash[0])
		return gsd_token_hash_parse(tc->token_hash, t->token_salt, t->token_hash);
	randombytes_buf(t->token_salt, sizeof t->token_salt);
	token_digest(t->token_salt, tc->token, t->token_hash);
	return 0;
}

bool gsd_tenant_has_credential(const gsd_tenant *t, const gsd_tenant_config *tc)
{
	if (!tc->token_hash[0])
		return gsd_tenant_token_is(t, tc->token);
	uint8_t salt[GSD_TOKEN_SALT], hash[GSD_TOKEN_HASH];
	return gsd_token_hash_parse(tc->token_hash, salt, hash) == 0 &&
	       sodium_memcmp(salt, t->token_salt, sizeof salt) == 0 &&
	       sodium_memcmp(hash, t->token_hash, sizeof hash) == 0;
}

gsd_tenant *gsd_tenant_add(gsd_daemon *d, const gsd_tenant_config *tc)
{
	if (d->ntenants >= sizeof(d->tenants) / sizeof(d->tenants[0]) || sodium_init() < 0)
		return NULL;
	gsd_tenant *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->conf = *tc;
	if (gsd_tenant_set_credential(t, tc) != 0) {
		free(t);
		return NULL;
	}
	/* Only the hash stays in memory. */
	sodium_memzero(t->conf.token, sizeof t->conf.token);
	snprintf(t->audit_name, sizeof t->audit_name, "%s", t->conf.name);
	if (!t->conf.share)
		t->conf.share = 1;
	d->tenants[d->ntenants++] = t;
	return t;
}

void gsd_tenant_audit(gsd_daemon *d, const gsd_tenant *t, uint64_t removed_ns)
{
	char hash[160];
	if (!t->id || gsd_tenant_hash_text(t, hash, sizeof(hash)) != 0)
		return;
	gsd_tenant_rec r = {.id = t->id,
	                    .tenant = t->conf.name,
	                    .audit_name = t->audit_name,
	                    .token_hash = hash,
	                    .kind = (uint32_t)t->conf.kind,
	                    .created_ns = t->created_ns,
	                    .removed_ns = removed_ns};
#define FROM_CONF(name) r.name = t->conf.name;
	GSD_TENANT_SETTINGS(FROM_CONF)
#undef FROM_CONF
	gsd_audit_tenant(d->audit, &r);
}

void gsd_tenant_free(gsd_tenant *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->guest_names.cap; i++)
		if (t->guest_names.slots[i].key)
			free(t->guest_names.slots[i].value);
	gsd_hmap_free(&t->guest_names);
	gsd_hmap_free(&t->guest_waits);
	free(t);
}

const char *gsd_tenant_guest_name(gsd_tenant *t, uint64_t guest)
{
	if (!guest)
		return t->audit_name;
	char *name = gsd_hmap_get(&t->guest_names, guest);
	if (name)
		return name;
	size_t cap = strlen(t->audit_name) + 24;
	name = malloc(cap);
	if (!name)
		return NULL;
	snprintf(name, cap, "%s/%llu", t->audit_name, (unsigned long long)guest);
	if (gsd_hmap_put(&t->guest_names, guest, name) != 0) {
		free(name);
		return NULL;
	}
	return name;
}

uint64_t gsd_tenant_max_message(const gsd_daemon *d, const gsd_tenant *t)
{
	uint64_t max = t->conf.max_message;
	if (!max && t->conf.kind == GPUSCHED__V1__TENANT_KIND__TENANT_KIND_VM)
		max = GSD_VM_MAX_MESSAGE;
	return max && max < d->cfg.max_message ? max : d->cfg.max_message;
}

uint32_t gsd_tenant_packet_limit(const gsd_daemon *d, const gsd_tenant *t)
{
	return t->conf.packet_limit ? t->conf.packet_limit : d->cfg.max_queued_packets;
}

uint32_t gsd_tenant_sync_limit(const gsd_daemon *d, const gsd_tenant *t)
{
	return t->conf.sync_limit ? t->conf.sync_limit : d->cfg.max_syncs;
}

bool gsd_tenant_token_is(const gsd_tenant *t, const char *token)
{
	uint8_t h[GSD_TOKEN_HASH];
	token_digest(t->token_salt, token ? token : "", h);
	bool same = sodium_memcmp(h, t->token_hash, sizeof h) == 0;
	sodium_memzero(h, sizeof h);
	return same;
}

gsd_tenant *gsd_tenant_by_token(gsd_daemon *d, const char *token)
{
	gsd_tenant *found = NULL;
	uint8_t h[GSD_TOKEN_HASH];
	/* Every live tenant is tried, so the time taken does not say which one matched. */
	for (uint32_t i = 0; i < d->ntenants; i++) {
		gsd_tenant *t = d->tenants[i];
		if (t->removed)
			continue;
		token_digest(t->token_salt, token ? token : "", h);
		if (sodium_memcmp(h, t->token_hash, sizeof h) == 0 && !found)
			found = t;
	}
	sodium_memzero(h, sizeof h);
	return found;
}

bool gsd_tenant_name_used(const gsd_daemon *d, const char *name)
{
	for (const gsd_tenant *t = d->removed_tenants; t; t = t->next_removed)
		if (strcmp(t->conf.name, name) == 0 || strcmp(t->audit_name, name) == 0)
			return true;
	return false;
}

gsd_tenant *gsd_tenant_by_name(gsd_daemon *d, const char *name)
{
	for (uint32_t i = 0; i < d->ntenants; i++)
		if (!d->tenants[i]->removed && strcmp(d->tenants[i]->conf.name, name) == 0)
			return d->tenants[i];
	return NULL;
}

void gsd_tenant_remove(gsd_daemon *d, gsd_tenant *t)
{
	for (uint32_t i = 0; i < d->ntenants; i++)
		if (d->tenants[i] == t) {
			memmove(&d->tenants[i], &d->tenants[i + 1],
			        (d->ntenants - i - 1) * sizeof(d->tenants[0]));
			d->ntenants--;
			break;
		}
	t->next_removed = d->removed_tenants;
	d->removed_tenants = t;
	/* Kept in memory (old records and retired packets point at it), but a removed tenant is
	 * skipped by every token and name lookup, so it can never authenticate again. */
	t->removed = true;
	sodium_memzero(t->token_hash, sizeof(t->token_hash));
}
