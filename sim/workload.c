/*
 * Workloads of gpusched-sim: JSON files (docs/simulation.md, The workload file) and the presets
 * built in. Every key is checked: an unknown one is an error (a misspelt key would otherwise
 * silently take its default), and so is a value out of its range.
 */
#include "sim.h"

#include "vidmm/heap.h"
#include "wddm.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- presets ---- */

#define ADAPTER_DEFAULTS                                                                           \
	"\"adapter\": {\"nodes\": 1, \"memory_mib\": 16384, \"paging_mib_per_s\": 16000, "         \
	"\"time_slice_us\": 2000, \"starvation_ms\": 40, \"packet_limit\": 32768}"

static const struct {
	const char *name, *json;
} presets[] = {
        {"mixed",
         "{\"name\": \"mixed\", " ADAPTER_DEFAULTS ",\n"
         " \"classes\": [\n"
         "  {\"name\": \"interactive\", \"weight\": 2, \"share\": 100, \"priority_class\": "
         "\"high\",\n"
         "   \"arrival\": {\"process\": \"poisson\", \"rate\": 40},\n"
         "   \"packet_us\": {\"dist\": \"lognormal\", \"median\": 1000, \"sigma\": 0.5},\n"
         "   \"memory\": {\"allocations\": 1, \"allocation_mib\": 256, \"per_packet\": 1, "
         "\"priority\": \"high\"}},\n"
         "  {\"name\": \"inference\", \"weight\": 5, \"share\": 100,\n"
         "   \"arrival\": {\"process\": \"poisson\", \"rate\": 30},\n"
         "   \"packet_us\": {\"dist\": \"exponential\", \"mean\": 3000},\n"
         "   \"memory\": {\"allocations\": 2, \"allocation_mib\": 512, \"per_packet\": 2}},\n"
         "  {\"name\": \"training\", \"weight\": 3, \"share\": 200, \"priority_class\": "
         "\"below_normal\",\n"
         "   \"arrival\": {\"process\": \"closed\", \"in_flight\": 1},\n"
         "   \"packet_us\": {\"dist\": \"exponential\", \"mean\": 20000},\n"
         "   \"memory\": {\"allocations\": 2, \"allocation_mib\": 1024, \"per_packet\": 2, "
         "\"priority\": \"low\"}}\n"
         " ]}\n"},
        {"inference",
         "{\"name\": \"inference\", " ADAPTER_DEFAULTS ",\n"
         " \"classes\": [\n"
         "  {\"name\": \"inference\", \"weight\": 1, \"share\": 100,\n"
         "   \"arrival\": {\"process\": \"poisson\", \"rate\": 50},\n"
         "   \"packet_us\": {\"dist\": \"lognormal\", \"median\": 1500, \"sigma\": 0.6},\n"
         "   \"memory\": {\"allocations\": 2, \"allocation_mib\": 512, \"per_packet\": 2}}\n"
         " ]}\n"},
        {"training",
         "{\"name\": \"training\", " ADAPTER_DEFAULTS ",\n"
         " \"classes\": [\n"
         "  {\"name\": \"training\", \"weight\": 1, \"share\": 100,\n"
         "   \"arrival\": {\"process\": \"closed\", \"in_flight\": 1},\n"
         "   \"packet_us\": {\"dist\": \"exponential\", \"mean\": 10000},\n"
         "   \"memory\": {\"allocations\": 2, \"allocation_mib\": 1024, \"per_packet\": 2}}\n"
         " ]}\n"},
        {"overcommit",
         "{\"name\": \"overcommit\", " ADAPTER_DEFAULTS ",\n"
         " \"classes\": [\n"
         "  {\"name\": \"big\", \"weight\": 1, \"share\": 100,\n"
         "   \"arrival\": {\"process\": \"closed\", \"in_flight\": 1, \"think_us\": 5000},\n"
         "   \"packet_us\": {\"dist\": \"exponential\", \"mean\": 5000},\n"
         "   \"memory\": {\"allocations\": 4, \"allocation_mib\": 512, \"per_packet\": 2}}\n"
         " ]}\n"},
        {"bursty",
         "{\"name\": \"bursty\", " ADAPTER_DEFAULTS ",\n"
         " \"classes\": [\n"
         "  {\"name\": \"burst\", \"weight\": 1, \"share\": 100,\n"
         "   \"arrival\": {\"process\": \"bursts\", \"rate\": 400, \"on_ms\": 100, \"off_ms\": "
         "900},\n"
         "   \"packet_us\": {\"dist\": \"uniform\", \"min\": 500, \"max\": 3500}}\n"
         " ]}\n"},
};

const char *const sim_preset_names[] = {"mixed",      "inference", "training",
                                        "overcommit", "bursty",    NULL};

const char *sim_preset_json(const char *name)
{
	for (size_t i = 0; i < sizeof(presets) / sizeof(presets[0]); i++)
		if (strcmp(presets[i].name, name) == 0)
			return presets[i].json;
	return NULL;
}

/* ---- parsing ---- */

typedef struct perr {
	char *buf;
	size_t cap;
	const char *origin;
} perr;

static int bad(const perr *e, const char *path, const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	snprintf(e->buf, e->cap, "%s: %s%s%s", e->origin, path, path[0] ? ": " : "", msg);
	return -1;
}

/* Every key of obj must be in allowed. */
static int only_keys(json_t *obj, const char *path, const char *const *allowed, const perr *e)
{
	const char *key;
	json_t *v;
	json_object_foreach(obj, key, v)
	{
		(void)v;
		bool ok = false;
		for (size_t i = 0; allowed[i] && !ok; i++)
			ok = strcmp(key, allowed[i]) == 0;
		if (!ok)
			return bad(e, path, "unknown key \"%s\"", key);
	}
	return 0;
}

static json_t *object_at(json_t *obj, const char *key, const char *path, bool required,
                         const perr *e, int *rc)
{
	json_t *v = json_object_get(obj, key);
	*rc = 0;
	if (!v) {
		if (required)
			*rc = bad(e, path, "\"%s\" is missing", key);
		return NULL;
	}
	if (!json_is_object(v))
		*rc = bad(e, path, "\"%s\" must be an object", key);
	return v;
}

/* A number in [lo, hi] (a missing optional key keeps *out). */
static int number(json_t *obj, const char *key, const char *path, double lo, double hi,
                  bool required, double *out, const perr *e)
{
	json_t *v = json_object_get(obj, key);
	if (!v)
		return required ? bad(e, path, "\"%s\" is missing", key) : 0;
	if (!json_is_number(v))
		return bad(e, path, "\"%s\" must be a number", key);
	double d = json_number_value(v);
	if (!(d >= lo && d <= hi))
		return bad(e, path, "\"%s\" must be between %g and %g (got %g)", key, lo, hi, d);
	*out = d;
	return 0;
}

static int whole(json_t *obj, const char *key, const char *path, double lo, double hi,
                 bool required, uint64_t *out, const perr *e)
{
	double d = (double)*out;
	if (number(obj, key, path, lo, hi, required, &d, e))
		return -1;
	if (d != (double)(uint64_t)d)
		return bad(e, path, "\"%s\" must be a whole number", key);
	*out = (uint64_t)d;
	return 0;
}

static int u32(json_t *obj, const char *key, const char *path, double lo, double hi, bool required,
               uint32_t *out, const perr *e)
{
	uint64_t v = *out;
	if (whole(obj, key, path, lo, hi, required, &v, e))
		return -1;
	*out = (uint32_t)v;
	return 0;
}

/* A string among names (case-insensitive): its index in *out. */
static int choice(json_t *obj, const char *key, const char *path, const char *const *names,
                  bool required, int *out, const perr *e)
{
	json_t *v = json_object_get(obj, key);
	if (!v)
		return required ? bad(e, path, "\"%s\" is missing", key) : 0;
	const char *s = json_string_value(v);
	for (int i = 0; s && names[i]; i++)
		if (strcasecmp(s, names[i]) == 0) {
			*out = i;
			return 0;
		}
	char list[256] = "";
	for (int i = 0; names[i]; i++)
		snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
		         names[i]);
	return bad(e, path, "\"%s\" must be one of %s", key, list);
}

#define US    1e3
#define MS    1e6
#define MIB   1048576.0
#define MAXUS 3.6e9 /* an hour */

static int parse_dist(json_t *o, const char *path, sim_dist *d, const perr *e)
{
	static const char *const kinds[] = {"fixed", "exponential", "uniform", "lognormal", NULL};
	static const char *const keys[][3] = {{"value", NULL, NULL},
	                                      {"mean", NULL, NULL},
	                                      {"min", "max", NULL},
	                                      {"median", "sigma", NULL}};
	int kind = -1;
	if (choice(o, "dist", path, kinds, true, &kind, e))
		return -1;
	const char *allowed[4] = {"dist", keys[kind][0], keys[kind][1], NULL};
	if (only_keys(o, path, allowed, e))
		return -1;
	d->kind = kind;
	d->b = 0;
	if (number(o, keys[kind][0], path, 1, MAXUS, true, &d->a, e))
		return -1;
	if (kind == SIM_DIST_UNIFORM && number(o, "max", path, d->a, MAXUS, true, &d->b, e))
		return -1;
	if (kind == SIM_DIST_LOGNORMAL && number(o, "sigma", path, 0, 4, true, &d->b, e))
		return -1;
	d->a *= US;
	if (kind == SIM_DIST_UNIFORM)
		d->b *= US;
	return 0;
}

static int parse_arrival(json_t *o, const char *path, sim_class *c, const perr *e)
{
	static const char *const procs[] = {"poisson", "periodic", "closed", "bursts", NULL};
	static const char *const keys[][4] = {{"rate", NULL, NULL, NULL},
	                                      {"rate", NULL, NULL, NULL},
	                                      {"in_flight", "think_us", NULL, NULL},
	                                      {"rate", "on_ms", "off_ms", NULL}};
	if (choice(o, "process", path, procs, true, &c->arrival, e))
		return -1;
	const char *allowed[5] = {"process"};
	memcpy(allowed + 1, keys[c->arrival], sizeof(keys[0]));
	if (only_keys(o, path, allowed, e))
		return -1;
	if (c->arrival == SIM_ARRIVAL_CLOSED) {
		double think = 0;
		c->in_flight = 1;
		if (u32(o, "in_flight", path, 1, 1024, false, &c->in_flight, e) ||
		    number(o, "think_us", path, 0, MAXUS, false, &think, e))
			return -1;
		c->think_ns = (uint64_t)(think * US);
		return 0;
	}
	if (number(o, "rate", path, 1e-3, 1e6, true, &c->rate, e))
		return -1;
	if (c->arrival == SIM_ARRIVAL_BURSTS) {
		double on = 0, off = 0;
		if (number(o, "on_ms", path, 0.001, 3.6e6, true, &on, e) ||
		    number(o, "off_ms", path, 0, 3.6e6, true, &off, e))
			return -1;
		c->on_ns = (uint64_t)(on * MS);
		c->off_ns = (uint64_t)(off * MS);
	}
	return 0;
}

static int parse_priority(json_t *o, const char *key, const char *path, uint32_t *out,
                          const perr *e)
{
	static const char *const names[] = {"minimum", "low", "normal", "high", "maximum", NULL};
	static const uint32_t values[] = {GS_ALLOC_PRIORITY_MINIMUM, GS_ALLOC_PRIORITY_LOW,
	                                  GS_ALLOC_PRIORITY_NORMAL, GS_ALLOC_PRIORITY_HIGH,
	                                  GS_ALLOC_PRIORITY_MAXIMUM};
	int i = 2;
	if (choice(o, key, path, names, false, &i, e))
		return -1;
	*out = values[i];
	return 0;
}

static int parse_memory(json_t *o, const char *path, sim_class *c, const perr *e)
{
	static const char *const keys[] = {"allocations", "allocation_mib", "per_packet",
	                                   "priority", NULL};
	double mib = 0;
	if (only_keys(o, path, keys, e) ||
	    u32(o, "allocations", path, 0, 1024, true, &c->allocations, e))
		return -1;
	c->per_packet = c->allocations;
	if (number(o, "allocation_mib", path, 0.00025, 1048576, c->allocations > 0, &mib, e) ||
	    u32(o, "per_packet", path, c->allocations ? 1 : 0, c->allocations, false,
	        &c->per_packet, e) ||
	    parse_priority(o, "priority", path, &c->alloc_priority, e))
		return -1;
	c->allocation_bytes = (uint64_t)(mib * MIB);
	return 0;
}

static int parse_class(json_t *o, const char *path, sim_class *c, const perr *e)
{
	static const char *const keys[] = {"name",           "weight",   "share",
	                                   "priority_class", "priority", "arrival",
	                                   "packet_us",      "memory",   NULL};
	static const char *const classes[] = {"idle", "below_normal", "normal", "above_normal",
	                                      "high", "realtime",     NULL};
	if (!json_is_object(o))
		return bad(e, path, "must be an object");
	if (only_keys(o, path, keys, e))
		return -1;
	json_t *name = json_object_get(o, "name");
	if (!json_is_string(name) || !json_string_length(name) ||
	    json_string_length(name) >= SIM_NAME_MAX)
		return bad(e, path, "\"name\" must be a string of 1 to %d characters",
		           SIM_NAME_MAX - 1);
	snprintf(c->name, sizeof c->name, "%s", json_string_value(name));
	for (const char *p = c->name; *p; p++)
		if (!isprint((unsigned char)*p))
			return bad(e, path, "\"name\" must be printable");
	c->weight = 1;
	c->share = 100;
	c->priority_class = GS_PRIORITY_CLASS_NORMAL;
	int cls = (int)c->priority_class;
	double prio = 0;
	if (u32(o, "weight", path, 1, 1e6, false, &c->weight, e) ||
	    u32(o, "share", path, 1, 1e6, false, &c->share, e) ||
	    choice(o, "priority_class", path, classes, false, &cls, e) ||
	    number(o, "priority", path, -7, 7, false, &prio, e))
		return -1;
	if (prio != (double)(int)prio)
		return bad(e, path, "\"priority\" must be a whole number");
	c->priority_class = (uint32_t)cls;
	c->priority = (int32_t)prio;
	char sub[96];
	int rc;
	json_t *v = object_at(o, "arrival", path, true, e, &rc);
	snprintf(sub, sizeof sub, "%s.arrival", path);
	if (rc || parse_arrival(v, sub, c, e))
		return -1;
	v = object_at(o, "packet_us", path, true, e, &rc);
	snprintf(sub, sizeof sub, "%s.packet_us", path);
	if (rc || parse_dist(v, sub, &c->packet, e))
		return -1;
	v = object_at(o, "memory", path, false, e, &rc);
	snprintf(sub, sizeof sub, "%s.memory", path);
	c->alloc_priority = GS_ALLOC_PRIORITY_NORMAL;
	if (rc || (v && parse_memory(v, sub, c, e)))
		return -1;
	return 0;
}

static int parse_adapter(json_t *o, sim_workload *w, const perr *e)
{
	static const char *const keys[] = {
	        "nodes",        "memory_mib", "paging_mib_per_s", "time_slice_us", "starvation_ms",
	        "packet_limit", NULL};
	double mem = 16384, paging = 16000;
	if (only_keys(o, "adapter", keys, e) ||
	    u32(o, "nodes", "adapter", 1, 64, false, &w->nodes, e) ||
	    number(o, "memory_mib", "adapter", 1, 16777216, false, &mem, e) ||
	    number(o, "paging_mib_per_s", "adapter", 1, 1e7, false, &paging, e) ||
	    u32(o, "time_slice_us", "adapter", 100, 1e7, false, &w->time_slice_us, e) ||
	    u32(o, "starvation_ms", "adapter", 1, 3.6e6, false, &w->starvation_ms, e) ||
	    u32(o, "packet_limit", "adapter", 1, 1048576, false, &w->packet_limit, e))
		return -1;
	w->memory_bytes = (uint64_t)(mem * MIB);
	w->paging_bytes_per_s = (uint64_t)(paging * MIB);
	return 0;
}

int sim_workload_parse(const char *text, const char *origin, sim_workload *w, char *err, size_t cap)
{
	perr e = {err, cap, origin};
	static const char *const keys[] = {"name", "adapter", "classes", NULL};
	memset(w, 0, sizeof(*w));
	w->nodes = 1;
	w->time_slice_us = 2000;
	w->starvation_ms = 40;
	w->packet_limit = 32768;
	w->memory_bytes = (uint64_t)(16384 * MIB);
	w->paging_bytes_per_s = (uint64_t)(16000 * MIB);
	json_error_t je;
	json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return bad(&e, "", "line %d: %s", je.line, je.text);
	int rc = -1;
	if (!json_is_object(root)) {
		bad(&e, "", "must be a JSON object");
		goto out;
	}
	if (only_keys(root, "", keys, &e))
		goto out;
	json_t *name = json_object_get(root, "name");
	if (name && (!json_is_string(name) || json_string_length(name) >= SIM_NAME_MAX)) {
		bad(&e, "", "\"name\" must be a string of at most %d characters", SIM_NAME_MAX - 1);
		goto out;
	}
	snprintf(w->name, sizeof w->name, "%s", name ? json_string_value(name) : origin);
	int orc;
	json_t *ad = object_at(root, "adapter", "", false, &e, &orc);
	if (orc || (ad && parse_adapter(ad, w, &e)))
		goto out;
	json_t *classes = json_object_get(root, "classes");
	if (!json_is_array(classes) || json_array_size(classes) == 0 ||
	    json_array_size(classes) > SIM_MAX_CLASSES) {
		bad(&e, "", "\"classes\" must be an array of 1 to %d classes", SIM_MAX_CLASSES);
		goto out;
	}
	w->nclasses = (uint32_t)json_array_size(classes);
	for (uint32_t i = 0; i < w->nclasses; i++) {
		char path[32];
		snprintf(path, sizeof path, "classes[%u]", i);
		sim_class *c = &w->classes[i];
		if (parse_class(json_array_get(classes, i), path, c, &e))
			goto out;
		for (uint32_t k = 0; k < i; k++)
			if (strcmp(w->classes[k].name, c->name) == 0) {
				bad(&e, path, "the name \"%s\" is used twice", c->name);
				goto out;
			}
		if (c->arrival == SIM_ARRIVAL_CLOSED && c->in_flight > w->packet_limit) {
			bad(&e, path, "arrival.in_flight %u is above adapter.packet_limit %u",
			    c->in_flight, w->packet_limit);
			goto out;
		}
		/* What one packet needs resident at once must fit in the segment, in the heap's
		 * units (sizes round up to GSD_HEAP_ALIGN, the segment down). */
		if ((double)c->per_packet * (double)gsd_heap_round(c->allocation_bytes) >
		    (double)(w->memory_bytes - w->memory_bytes % GSD_HEAP_ALIGN)) {
			bad(&e, path,
			    "a packet's allocations (memory.per_packet x memory.allocation_mib) do "
			    "not fit "
			    "in adapter.memory_mib");
			goto out;
		}
	}
	rc = 0;
out:
	json_decref(root);
	return rc;
}

int sim_workload_load(const char *what, sim_workload *w, char *err, size_t cap)
{
	const char *preset = sim_preset_json(what);
	if (preset)
		return sim_workload_parse(preset, what, w, err, cap);
	FILE *f = fopen(what, "rb");
	if (!f) {
		char names[128] = "";
		for (size_t i = 0; sim_preset_names[i]; i++)
			snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
			         i ? ", " : "", sim_preset_names[i]);
		snprintf(err, cap, "%s: not a preset (%s) and not a readable file: %m", what,
		         names);
		return -1;
	}
	/* A workload is a few kilobytes; refuse anything absurd before reading it. */
	char *buf = malloc(1u << 20);
	errno = 0;
	size_t n = buf ? fread(buf, 1, (1u << 20) - 1, f) : 0;
	bool more = buf && !feof(f) && fgetc(f) != EOF;
	int read_errno = errno;
	bool failed = ferror(f);
	fclose(f);
	int rc = -1;
	if (!buf)
		snprintf(err, cap, "%s: out of memory", what);
	else if (failed)
		snprintf(err, cap, "%s: cannot read it: %s", what, strerror(read_errno));
	else if (more)
		snprintf(err, cap, "%s: larger than 1 MiB: not a workload", what);
	else if (memchr(buf, 0, n))
		snprintf(err, cap, "%s: contains a NUL byte: not a JSON workload", what);
	else {
		buf[n] = 0;
		rc = sim_workload_parse(buf, what, w, err, cap);
	}
	free(buf);
	return rc;
}
