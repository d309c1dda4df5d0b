/* gpusched-sim's output (report.c). */
#ifndef GS_SIM_REPORT_H
#define GS_SIM_REPORT_H

#include "sim.h"

#include <jansson.h>
#include <stdio.h>

/* What the run cost: not part of the result (it differs from run to run). */
typedef struct sim_run_info {
	double wall_s;
	uint64_t peak_rss_bytes;
} sim_run_info;

const char *sim_placement_name(int placement);
/* run may be NULL (left out); per_engine and per_tenant add a row for each. */
json_t *sim_result_json(const sim_workload *w, const sim_options *o, const sim_result *r,
                        const sim_run_info *run, bool per_engine, bool per_tenant);
void sim_result_print(FILE *f, const sim_workload *w, const sim_options *o, const sim_result *r,
                      const sim_run_info *run, bool per_engine, bool per_tenant);

#endif
