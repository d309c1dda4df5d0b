/*
 * gpusched info: what the daemon serves.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char help[] =
        "Usage: gpusched info [--json]\n"
        "Shows the daemon's version, the tenant the token authenticates as, where it\n"
        "publishes events (for gpusched watch; \"\" when it does not), and for each\n"
        "adapter its nodes (fence = last completed submission fence, queued = packets queued\n"
        "or running), its segments (size, used, largest free block, CPU visibility), its\n"
        "system memory (the pool allocations are evicted to: size and use) with the paging\n"
        "chunk (bytes per sub-transfer of a paging transfer), and its submission limits.\n"
        "A tenant that is not an administrator sees its own share only: its last completed\n"
        "fence and its packets queued per node, the memory its allocations take per segment\n"
        "and in system memory (no largest free block); an administrator sees the daemon's.\n";

static json_t *node_json(const void *node)
{
	const gs_node_info *n = node;

	return json_pack("{s:I, s:s, s:s, s:I, s:b, s:o, s:o}", "id", (json_int_t)n->id, "name",
	                 n->name, "kind", gs_node_kind_name(n->kind), "engines",
	                 (json_int_t)n->engines, "paging", n->paging, "fence",
	                 cli_json_u64(n->fence), "queued", cli_json_u64(n->queued));
}

static json_t *segment_json(const void *segment)
{
	const gs_segment_info *s = segment;

	return json_pack("{s:I, s:s, s:s, s:o, s:o, s:o, s:b}", "id", (json_int_t)s->id, "name",
	                 s->name, "kind", gs_segment_kind_name(s->kind), "size",
	                 cli_json_u64(s->size), "used", cli_json_u64(s->used), "largest_free",
	                 cli_json_u64(s->largest_free), "cpu_visible", s->cpu_visible);
}

/* What users' kernels may do on the adapter (kernels false: it runs none). */
static json_t *kernels_json(const gs_adapter_info *a)
{
	if (!a->kernels)
		return json_pack("{s:b}", "supported", 0);
	return json_pack("{s:b, s:[I,I,I], s:I, s:I, s:o, s:o, s:I, s:s}", "supported", 1,
	                 "max_local_size", (json_int_t)a->max_local_size[0],
	                 (json_int_t)a->max_local_size[1], (json_int_t)a->max_local_size[2],
	                 "max_invocations", (json_int_t)a->max_invocations,
	                 "max_push_constant_bytes", (json_int_t)a->max_push_constant_bytes,
	                 "max_storage_buffer_range", cli_json_u64(a->max_storage_buffer_range),
	                 "max_uniform_buffer_range", cli_json_u64(a->max_uniform_buffer_range),
	                 "binding_offset_alignment", (json_int_t)a->binding_offset_alignment,
	                 "preemption", "dispatch boundary");
}

static json_t *adapter_json(const void *adapter)
{
	const gs_adapter_info *a = adapter;
	json_t *nodes = cli_json_array(a->nodes, a->node_count, sizeof(*a->nodes), node_json);
	json_t *segments =
	        cli_json_array(a->segments, a->segment_count, sizeof(*a->segments), segment_json);
	json_t *o = json_pack(
	        "{s:I, s:s, s:s, s:s, s:s, s:s, s:s, s:I, s:o, s:s, s:I, s:b, s:s, s:I, "
	        "s:I, s:b, s:b, s:I, s:I, s:I, s:o, s:o, s:o, s:o, s:o}",
	        "id", (json_int_t)a->id, "name", a->name, "backend", a->backend, "clock", a->clock,
	        "device", a->device, "driver", a->driver, "api", a->api, "queues",
	        (json_int_t)a->queues, "preempt_granularity_ns",
	        cli_json_u64(a->preempt_granularity_ns), "cpu_access", a->cpu_access,
	        "device_losses", (json_int_t)a->device_losses, "device_dead", a->device_dead,
	        "share_policy", gs_share_policy_name(a->share_policy), "time_slice_us",
	        (json_int_t)a->time_slice_us, "caps", (json_int_t)a->caps, "preemption",
	        (a->caps & GS_ADAPTER_CAP_PREEMPTION) != 0, "virtual_clock",
	        (a->caps & GS_ADAPTER_CAP_VIRTUAL_CLOCK) != 0, "max_dma_buffer",
	        (json_int_t)a->max_dma_buffer, "max_allocation_list",
	        (json_int_t)a->max_allocation_list, "max_patch_list", (json_int_t)a->max_patch_list,
	        "system_memory", cli_json_u64(a->system_memory), "system_memory_used",
	        cli_json_u64(a->system_memory_used), "paging_chunk", cli_json_u64(a->paging_chunk),
	        "nodes", nodes, "segments", segments);
	json_object_set_new(o, "kernels", kernels_json(a));
	json_object_set_new(o, "device_retrying", json_boolean(a->device_retrying));
	return o;
}

static void print_adapter(const gs_adapter_info *a, bool mine)
{
	char size[32], used[32], largest[32], dma[32], sys[32], sys_used[32], chunk[32];

	cli_format_bytes(a->max_dma_buffer, dma, sizeof(dma));
	printf("\nadapter %" PRIu32 ": %s (backend %s, clock %s%s)\n", a->id, a->name, a->backend,
	       a->clock, (a->caps & GS_ADAPTER_CAP_PREEMPTION) ? ", preemption" : "");
	if (a->api && *a->api)
		printf("  device: %s, %s, driver %s\n", a->device, a->api, a->driver);
	else
		printf("  device: %s\n", a->device);
	if (a->queues && a->queues < a->node_count)
		printf("  queues: %" PRIu32 " for %zu nodes: the nodes take turns on %s\n",
		       a->queues, a->node_count, a->queues == 1 ? "it" : "them");
	else if (a->queues)
		printf("  queues: one per node (%" PRIu32 ")\n", a->queues);
	if (a->cpu_access && !strcmp(a->cpu_access, "staging"))
		printf("  memory: device memory the CPU does not map; reads and writes go through "
		       "a staging buffer\n");
	if (a->device_dead && a->device_retrying)
		printf("  OUT OF SERVICE: a dispatch that did not stop after a reset still runs; "
		       "every packet is cancelled until it ends and the device is recreated\n");
	else if (a->device_dead)
		printf("  DEVICE LOST: lost %" PRIu32 " time%s, could not be recreated; every "
		       "packet is cancelled\n",
		       a->device_losses, a->device_losses == 1 ? "" : "s");
	else if (a->device_losses)
		printf("  device losses: %" PRIu32 ", each recreated\n", a->device_losses);
	if (a->preempt_granularity_ns)
		printf("  preemption: a SPIN stops within %.0f us of a request; other commands run "
		       "in short batches, stopping between them\n",
		       (double)a->preempt_granularity_ns / 1e3);
	if (a->kernels) {
		char range[32];
		cli_format_bytes(a->max_storage_buffer_range, range, sizeof(range));
		printf("  kernels: SPIR-V, local size up to %" PRIu32 "x%" PRIu32 "x%" PRIu32
		       " (%" PRIu32 " invocations), %" PRIu32 " B of push constants, bindings up "
		       "to %s at offsets that are multiples of %" PRIu32
		       "; preempted between dispatches\n",
		       a->max_local_size[0], a->max_local_size[1], a->max_local_size[2],
		       a->max_invocations, a->max_push_constant_bytes, range,
		       a->binding_offset_alignment);
	} else {
		printf("  kernels: none (the %s backend runs the built-in commands only)\n",
		       a->backend);
	}
	printf("  sharing: tenants share each engine by policy %s, in turns of %.1f ms\n",
	       gs_share_policy_name(a->share_policy), (double)a->time_slice_us / 1e3);
	printf("  limits: DMA buffer %s, allocation list %" PRIu32 ", patch list %" PRIu32 "\n",
	       dma, a->max_allocation_list, a->max_patch_list);
	cli_format_bytes(a->system_memory, sys, sizeof(sys));
	cli_format_bytes(a->system_memory_used, sys_used, sizeof(sys_used));
	cli_format_bytes(a->paging_chunk, chunk, sizeof(chunk));
	printf("  system memory: %s (%s used%s), paging chunk %s\n", sys, sys_used,
	       mine ? " by your tenant" : "", chunk);

	printf("\n  %-4s %-16s %-8s %-7s %-6s %12s %8s\n", "NODE", "NAME", "KIND", "ENGINES",
	       "PAGING", mine ? "YOUR FENCE" : "FENCE", mine ? "YOURS" : "QUEUED");
	for (size_t i = 0; i < a->node_count; i++) {
		const gs_node_info *n = &a->nodes[i];

		printf("  %-4" PRIu32 " %-16s %-8s %-7" PRIu32 " %-6s %12" PRIu64 " %8" PRIu64 "\n",
		       n->id, n->name, gs_node_kind_name(n->kind), n->engines,
		       n->paging ? "yes" : "no", n->fence, n->queued);
	}

	printf("\n  %-4s %-16s %-8s %10s %10s %12s %-3s\n", "SEG", "NAME", "KIND", "SIZE",
	       mine ? "YOURS" : "USED", "LARGEST FREE", "CPU");
	for (size_t i = 0; i < a->segment_count; i++) {
		const gs_segment_info *s = &a->segments[i];

		cli_format_bytes(s->size, size, sizeof(size));
		cli_format_bytes(s->used, used, sizeof(used));
		if (mine)
			snprintf(largest, sizeof(largest), "-");
		else
			cli_format_bytes(s->largest_free, largest, sizeof(largest));
		printf("  %-4" PRIu32 " %-16s %-8s %10s %10s %12s %-3s\n", s->id, s->name,
		       gs_segment_kind_name(s->kind), size, used, largest,
		       s->cpu_visible ? "yes" : "no");
	}
}

int cmd_info(cli *ctx, int argc, char **argv)
{
	gs_daemon_info *info;
	int rv;

	rv = cli_start(ctx, argc, argv, CLI_SIMPLE(help, 0, 0, NULL), NULL);
	if (rv != CLI_CONTINUE)
		return rv;
	rv = gs_info(ctx->client, &info);
	if (rv != 0)
		return cli_fail(ctx, rv);

	if (ctx->json) {
		json_t *adapters = cli_json_array(info->adapters, info->adapter_count,
		                                  sizeof(*info->adapters), adapter_json);

		cli_json_print(json_pack("{s:s, s:s, s:s, s:s, s:s, s:o}", "version", info->version,
		                         "url", gs_client_url(ctx->client), "tenant", info->tenant,
		                         "scope", info->tenant_view ? "tenant" : "daemon",
		                         "events_url", info->events_url, "adapters", adapters));
	} else {
		printf("gpuschedd %s at %s, tenant '%s', %zu adapter%s\n", info->version,
		       gs_client_url(ctx->client), info->tenant, info->adapter_count,
		       info->adapter_count == 1 ? "" : "s");
		if (info->events_url[0])
			printf("events published on %s (gpusched watch)\n", info->events_url);
		if (info->tenant_view)
			printf("queued packets, fences and memory used: your tenant's only\n");
		for (size_t i = 0; i < info->adapter_count; i++)
			print_adapter(&info->adapters[i], info->tenant_view);
	}
	gs_info_free(info);
	return CLI_EXIT_OK;
}
