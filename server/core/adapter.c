#include "core/adapter.h"

#include "core/daemon.h"

uint64_t gsd_node_now(const gsd_node *n)
{
	if (n->adapter->d->cfg.virtual_clock)
		return n->vtime_ns;
	return gsd_now_ns();
}
