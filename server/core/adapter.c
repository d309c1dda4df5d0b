#include "core/adapter.h"

#include "core/daemon.h"

uint64_t gsd_node_now(const gsd_node *n)
{
	if (n->adapter->d->cfg.virtual_clock)
		return n->vtime_ns;
	return gsd_now_ns();
}

bool gsd_daemon_engines_idle(const gsd_daemon *d)
{
	for (uint32_t i = 0; i < d->nadapters; i++)
		for (uint32_t n = 0; n < d->adapters[i].nnodes; n++)
			if (d->adapters[i].nodes[n].inflight)
				return false;
	return true;
}
