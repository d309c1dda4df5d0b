/*
 * gpusched-sim's output: a human report, or JSON for scripts. Every figure is defined in
 * docs/simulation.md (Output).
 */
#include "report.h"

#include "core/config.h"
#include "wddm.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static double ms(uint64_t ns)
{
	return (double)ns / 1e6;
}

static double sec(uint64_t ns)
{
	return (double)ns / 1e9;
}

const char *sim_placement_name(int placement)
{
	return placement == SIM_PLACE_ROUND_ROBIN ? "round_robin" : "least_loaded";
}

static double tenant_error(const sim_tenant_result *t)
{
	return t->entitled_ns ? (double)t->received_ns / (double)t->entitled_ns - 1.0 : 0.0;
}

json_t *sim_result_json(const sim_workload *w, const sim_options *o, const sim_result *r,
                        const sim_run_info *run, bool per_engine, bool per_tenant)
{
	json_t *classes = json_array();
	for (uint32_t c = 0; c < w->nclasses; c++) {
		const sim_class_result *cr = &r->classes[c];
		json_array_append_new(
		        classes,
		        json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f}", "name",
		                  w->classes[c].name, "tenants", (json_int_t)cr->tenants,
		                  "submitted", (json_int_t)cr->submitted, "completed",
		                  (json_int_t)cr->completed, "refused", (json_int_t)cr->refused,
		                  "cancelled", (json_int_t)cr->cancelled, "wait_p50_ms",
		                  ms(sim_hist_percentile(&cr->wait, 50)), "wait_p99_ms",
		                  ms(sim_hist_percentile(&cr->wait, 99)), "share_error_mean",
		                  cr->share_error_mean));
	}
	json_t *root = json_pack("{s:s, s:I, s:I, s:I, s:s, s:s, s:f, s:I}", "workload", w->name,
	                         "adapters", (json_int_t)o->adapters, "engines_per_adapter",
	                         (json_int_t)w->nodes, "tenants", (json_int_t)o->tenants, "policy",
	                         gsd_share_policy_name(o->policy), "placement",
	                         sim_placement_name(o->placement), "duration_s",
	                         sec(o->duration_ns), "seed", (json_int_t)o->seed);
	json_object_set_new(root, "engines",
	                    json_pack("{s:I, s:f, s:f, s:f, s:f}", "count", (json_int_t)r->nengines,
	                              "utilisation_mean", r->util_mean, "utilisation_min",
	                              r->util_min, "utilisation_max", r->util_max,
	                              "paging_fraction", r->paging_mean));
	json_object_set_new(root, "packets",
	                    json_pack("{s:I, s:I, s:I, s:I, s:I}", "submitted",
	                              (json_int_t)r->submitted, "completed",
	                              (json_int_t)r->completed, "refused", (json_int_t)r->refused,
	                              "cancelled", (json_int_t)r->cancelled, "queued_at_end",
	                              (json_int_t)r->queued_at_end));
	json_object_set_new(root, "queue_wait_ms",
	                    json_pack("{s:f, s:f, s:f}", "p50",
	                              ms(sim_hist_percentile(&r->wait, 50)), "p99",
	                              ms(sim_hist_percentile(&r->wait, 99)), "max",
	                              ms(sim_hist_percentile(&r->wait, 100))));
	json_object_set_new(root, "preemptions",
	                    json_pack("{s:I, s:I}", "time_slice", (json_int_t)r->preempt_quantum,
	                              "newcomer", (json_int_t)r->preempt_arrival));
	json_object_set_new(
	        root, "paging",
	        json_pack("{s:I, s:I, s:I, s:I}", "in_bytes", (json_int_t)r->paging_in_bytes,
	                  "out_bytes", (json_int_t)r->paging_out_bytes, "evictions",
	                  (json_int_t)r->evictions, "room_waits", (json_int_t)r->room_waits));
	/* With no tenant owed engine time there are no figures: null, not 0. */
	json_object_set_new(
	        root, "fairness",
	        r->fair_tenants ? json_pack("{s:I, s:f, s:f, s:I, s:f}", "tenants",
	                                    (json_int_t)r->fair_tenants, "share_error_mean",
	                                    r->share_error_mean, "share_error_max",
	                                    r->share_error_max, "share_error_max_tenant",
	                                    (json_int_t)r->share_error_max_tenant, "jain", r->jain)
	                        : json_pack("{s:I, s:n, s:n, s:n, s:n}", "tenants", (json_int_t)0,
	                                    "share_error_mean", "share_error_max",
	                                    "share_error_max_tenant", "jain"));
	json_object_set_new(root, "classes", classes);
	if (per_engine) {
		json_t *a = json_array();
		for (uint32_t i = 0; i < r->nengines; i++) {
			const sim_engine_result *e = &r->engines[i];
			json_array_append_new(a, json_pack("{s:I, s:I, s:I, s:f, s:f, s:f}",
			                                   "adapter", (json_int_t)e->adapter,
			                                   "node", (json_int_t)e->node, "tenants",
			                                   (json_int_t)e->tenants, "utilisation",
			                                   (double)(e->busy_ns + e->paging_ns) /
			                                           (double)o->duration_ns,
			                                   "busy_s", sec(e->busy_ns), "paging_s",
			                                   sec(e->paging_ns)));
		}
		json_object_set_new(root, "engine_rows", a);
	}
	if (per_tenant) {
		json_t *a = json_array();
		for (uint32_t i = 0; i < r->ntenants; i++) {
			const sim_tenant_result *t = &r->tenants[i];
			json_array_append_new(
			        a,
			        json_pack("{s:I, s:s, s:I, s:I, s:f, s:f, s:f, s:f, s:I, s:I, s:I, "
			                  "s:I, "
			                  "s:I}",
			                  "tenant", (json_int_t)i, "class", w->classes[t->cls].name,
			                  "adapter", (json_int_t)t->adapter, "node",
			                  (json_int_t)t->node, "demand_s", sec(t->demand_ns),
			                  "received_s", sec(t->received_ns), "entitled_s",
			                  sec(t->entitled_ns), "share_error", tenant_error(t),
			                  "submitted", (json_int_t)t->submitted, "completed",
			                  (json_int_t)t->completed, "refused",
			                  (json_int_t)t->refused, "cancelled",
			                  (json_int_t)t->cancelled, "preempted",
			                  (json_int_t)t->preempted));
		}
		json_object_set_new(root, "tenant_rows", a);
	}
	if (run)
		json_object_set_new(
		        root, "run",
		        json_pack("{s:f, s:f, s:I, s:f, s:I}", "wall_s", run->wall_s,
		                  "simulated_per_wall",
		                  run->wall_s > 0 ? sec(o->duration_ns) / run->wall_s : 0, "events",
		                  (json_int_t)r->events, "events_per_s",
		                  run->wall_s > 0 ? (double)r->events / run->wall_s : 0,
		                  "peak_rss_bytes", (json_int_t)run->peak_rss_bytes));
	return root;
}

/* 1234567 -> "1,234,567" */
static const char *grouped(uint64_t v, char *buf)
{
	char tmp[32];
	int n = snprintf(tmp, sizeof tmp, "%" PRIu64, v), o = 0;
	for (int i = 0; i < n; i++) {
		if (i && (n - i) % 3 == 0)
			buf[o++] = ',';
		buf[o++] = tmp[i];
	}
	buf[o] = 0;
	return buf;
}

static const char *bytes(uint64_t v, char *buf)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
	double d = (double)v;
	int u = 0;
	while (d >= 1024 && u < 5) {
		d /= 1024;
		u++;
	}
	snprintf(buf, 32, u ? "%.1f %s" : "%.0f %s", d, units[u]);
	return buf;
}

/* A wait in ns as "830 us", "12.3 ms" or "1.20 s". */
static const char *wait_text(uint64_t ns, char *buf)
{
	if (ns < 1000000)
		snprintf(buf, 32, "%.0f us", (double)ns / 1e3);
	else if (ns < 1000000000)
		snprintf(buf, 32, "%.2f ms", ms(ns));
	else
		snprintf(buf, 32, "%.2f s", sec(ns));
	return buf;
}

void sim_result_print(FILE *f, const sim_workload *w, const sim_options *o, const sim_result *r,
                      const sim_run_info *run, bool per_engine, bool per_tenant)
{
	char a[32], b[32], c[32], d[32], e[32];
	fprintf(f,
	        "gpusched-sim: %u adapter%s x %u engine%s, %u tenant%s, workload \"%s\", policy "
	        "%s, "
	        "placement %s, %.0f s simulated, seed %" PRIu64 "\n\n",
	        o->adapters, o->adapters == 1 ? "" : "s", w->nodes, w->nodes == 1 ? "" : "s",
	        o->tenants, o->tenants == 1 ? "" : "s", w->name, gsd_share_policy_name(o->policy),
	        sim_placement_name(o->placement), sec(o->duration_ns), o->seed);
	fprintf(f,
	        "engines      %s   utilisation mean %.1f%%  min %.1f%%  max %.1f%%   paging %.2f%% "
	        "of engine time\n",
	        grouped(r->nengines, a), 100 * r->util_mean, 100 * r->util_min, 100 * r->util_max,
	        100 * r->paging_mean);
	fprintf(f,
	        "packets      submitted %s  completed %s  refused %s  cancelled %s  queued at end "
	        "%s\n",
	        grouped(r->submitted, a), grouped(r->completed, b), grouped(r->refused, c),
	        grouped(r->cancelled, d), grouped(r->queued_at_end, e));
	fprintf(f, "queue wait   p50 %s  p99 %s  max %s\n",
	        wait_text(sim_hist_percentile(&r->wait, 50), a),
	        wait_text(sim_hist_percentile(&r->wait, 99), b),
	        wait_text(sim_hist_percentile(&r->wait, 100), c));
	fprintf(f, "preemptions  by the time slice %s  by a newcomer %s\n",
	        grouped(r->preempt_quantum, a), grouped(r->preempt_arrival, b));
	fprintf(f, "paging       in %s  out %s  evictions %s  waits for room %s\n",
	        bytes(r->paging_in_bytes, a), bytes(r->paging_out_bytes, b),
	        grouped(r->evictions, c), grouped(r->room_waits, d));
	if (r->fair_tenants)
		fprintf(f,
		        "fairness     %s tenants owed engine time: share error mean %.2f%%  max "
		        "%.2f%% "
		        "(tenant %u)  Jain's index %.4f\n",
		        grouped(r->fair_tenants, a), 100 * r->share_error_mean,
		        100 * r->share_error_max, r->share_error_max_tenant, r->jain);
	else
		fprintf(f, "fairness     no tenant was owed engine time\n");
	fprintf(f, "\n%-16s %8s %12s %12s %10s %10s %12s\n", "class", "tenants", "submitted",
	        "completed", "wait p50", "wait p99", "share error");
	for (uint32_t i = 0; i < w->nclasses; i++) {
		const sim_class_result *cr = &r->classes[i];
		fprintf(f, "%-16s %8u %12s %12s %10s %10s %11.2f%%\n", w->classes[i].name,
		        cr->tenants, grouped(cr->submitted, a), grouped(cr->completed, b),
		        wait_text(sim_hist_percentile(&cr->wait, 50), c),
		        wait_text(sim_hist_percentile(&cr->wait, 99), d),
		        100 * cr->share_error_mean);
	}
	if (per_engine) {
		fprintf(f, "\n%8s %5s %8s %12s %10s %10s\n", "adapter", "node", "tenants",
		        "utilisation", "busy s", "paging s");
		for (uint32_t i = 0; i < r->nengines; i++) {
			const sim_engine_result *en = &r->engines[i];
			fprintf(f, "%8u %5u %8u %11.2f%% %10.3f %10.3f\n", en->adapter, en->node,
			        en->tenants,
			        100.0 * (double)(en->busy_ns + en->paging_ns) /
			                (double)o->duration_ns,
			        sec(en->busy_ns), sec(en->paging_ns));
		}
	}
	if (per_tenant) {
		fprintf(f, "\n%8s %-16s %8s %5s %10s %10s %10s %12s %10s\n", "tenant", "class",
		        "adapter", "node", "demand s", "got s", "owed s", "share error",
		        "preempted");
		for (uint32_t i = 0; i < r->ntenants; i++) {
			const sim_tenant_result *t = &r->tenants[i];
			fprintf(f, "%8u %-16s %8u %5u %10.3f %10.3f %10.3f %11.2f%% %10s\n", i,
			        w->classes[t->cls].name, t->adapter, t->node, sec(t->demand_ns),
			        sec(t->received_ns), sec(t->entitled_ns), 100 * tenant_error(t),
			        grouped(t->preempted, a));
		}
	}
	if (run)
		fprintf(f,
		        "\nrun          wall %.2f s  simulated/wall %.1f  events %s (%.2f M/s)  "
		        "peak RSS "
		        "%s\n",
		        run->wall_s, run->wall_s > 0 ? sec(o->duration_ns) / run->wall_s : 0,
		        grouped(r->events, a),
		        run->wall_s > 0 ? (double)r->events / run->wall_s / 1e6 : 0,
		        bytes(run->peak_rss_bytes, b));
}
