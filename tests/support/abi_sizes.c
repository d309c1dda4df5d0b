/*
 * abi_sizes: prints "NAME SIZE" for each structure of the public C API that the Python
 * package declares again with ctypes (python/gpusched/_capi.py), and "NAME.FIELD OFFSET" for
 * the fields whose place matters most. python/tests compares them with ctypes' own figures,
 * so a field added to the header without the binding fails a test, not a user's call.
 */
#include <stddef.h>
#include <stdio.h>

#include "gpusched.h"
#include "wddm.h"

#define SIZE(py, c)          printf("%s %zu\n", py, sizeof(c))
#define OFFSET(py, c, field) printf("%s.%s %zu\n", py, #field, offsetof(c, field))

int main(void)
{
	SIZE("Dmabuf", gs_dmabuf);
	SIZE("ConnectOptions", gs_connect_options);
	SIZE("ContextDesc", gs_context_desc);
	SIZE("ContextStatus", gs_context_status);
	SIZE("AllocDesc", gs_allocation_desc);
	SIZE("Placement", gs_allocation_placement);
	SIZE("AllocStatus", gs_allocation_status);
	SIZE("Segpref", gs_segpref);
	SIZE("SubmitResult", gs_submit_result);
	SIZE("SubmitDesc", gs_submit_desc);
	SIZE("HistoryFilter", gs_history_filter);
	SIZE("PacketRecord", gs_packet_record);
	SIZE("PacketEvent", gs_packet_event);
	SIZE("Move", gs_move);
	SIZE("Explanation", gs_explanation);
	SIZE("UsageFilter", gs_usage_filter);
	SIZE("UsageRow", gs_usage_row);
	SIZE("Usage", gs_usage);
	SIZE("DaemonStats", gs_daemon_stats);
	SIZE("KernelBindingInfo", gs_kernel_binding_info);
	SIZE("KernelInfo", gs_kernel_info);
	SIZE("DmaBinding", gs_dmabuf_binding);
	SIZE("DaemonInfo", gs_daemon_info);
	SIZE("AdapterInfo", gs_adapter_info);
	SIZE("NodeInfo", gs_node_info);
	OFFSET("AdapterInfo", gs_adapter_info, nodes);
	OFFSET("AdapterInfo", gs_adapter_info, kernels);
	SIZE("AsyncOpts", gs_async_opts);
	SIZE("AsyncEvent", gs_async_event);
	OFFSET("AsyncEvent", gs_async_event, value);
	OFFSET("AsyncEvent", gs_async_event, submit);
	OFFSET("PacketRecord", gs_packet_record, dispatches);
	OFFSET("HistoryFilter", gs_history_filter, tenant);
	OFFSET("DaemonStats", gs_daemon_stats, tenant_view);
	OFFSET("KernelInfo", gs_kernel_info, created_ns);
	OFFSET("UsageRow", gs_usage_row, run_ns);
	/* Constants the package repeats. */
	printf("const SUBMIT_PRESENT %u\n", GS_SUBMIT_PRESENT);
	printf("const SUBMIT_NULL_RENDERING %u\n", GS_SUBMIT_NULL_RENDERING);
	printf("const _C.STATUS_FAULTED %d\n", GS_STATUS_FAULTED);
	printf("const _C.ERR_TRANSPORT %d\n", GS_ERR_TRANSPORT);
	printf("const _C.ERR_INVALID %d\n", GS_ERR_INVALID);
	printf("const _C.ERR_CANCELLED %d\n", GS_ERR_CANCELLED);
	printf("const _C.ASYNC_MESSAGE_MAX %u\n", GS_ASYNC_MESSAGE_MAX);
	printf("const _C.KERNEL_MAX_BINDINGS %u\n", GS_KERNEL_MAX_BINDINGS);
	return 0;
}
