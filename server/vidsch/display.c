/*
 * The emulated display: vertical blanks at the configured refresh rate, Flip packets that
 * complete at the next blank after they executed (FlipWithNoWait completes at once), and
 * Present / RedirectedPresent, which copy the source into a display surface.
 */
#include "vidsch/internal.h"

#include "core/log.h"
#include "vidmm/vidmm.h"

#include "wddm.h"

#include <stdio.h>
#include <string.h>

static void vblank_arm(gsd_adapter *a);

static void vblank_cb(uv_timer_t *t)
{
	gsd_adapter *a = t->data;
	gsd_daemon *d = a->d;
	uint64_t blank = (gsd_now_ns() - a->vblank_epoch_ns) / a->vblank_period_ns;
	if (blank < a->vblank_target) {
		/* libuv timers count whole milliseconds and may fire just before the blank. */
		vblank_arm(a);
		return;
	}
	a->vblanks = blank;
	char detail[48];
	snprintf(detail, sizeof(detail), "vertical blank %llu", (unsigned long long)a->vblanks);
	for (uint32_t i = 0; i < a->nnodes; i++) {
		gsd_node *n = &a->nodes[i];
		gsd_packet *p = n->running;
		if (!p || !p->flip_waiting)
			continue;
		a->flips_waiting--;
		gsd_vidsch_node_idle(n);
		gsd_vidsch_complete(d, n, p, detail);
		gsd_context *x = gsd_vidsch_retire_keep_context(d, p);
		gsd_vidsch_make_ready(d, x);
		gsd_context_put(d, x);
		gsd_vidsch_kick(d, n);
	}
	vblank_arm(a);
}

/* Wakes at the next vertical blank while a flip waits (and only then). */
static void vblank_arm(gsd_adapter *a)
{
	if (!a->flips_waiting) {
		uv_timer_stop(&a->vblank_timer);
		return;
	}
	uint64_t now = gsd_now_ns();
	if (a->vblank_target <= (now - a->vblank_epoch_ns) / a->vblank_period_ns)
		a->vblank_target = (now - a->vblank_epoch_ns) / a->vblank_period_ns + 1;
	uint64_t next = a->vblank_epoch_ns + a->vblank_target * a->vblank_period_ns;
	uv_timer_start(&a->vblank_timer, vblank_cb, (next - now + 999999u) / 1000000u, 0);
}

void gsd_vidsch_display_init(gsd_daemon *d, gsd_adapter *a)
{
	uv_timer_init(d->loop, &a->vblank_timer);
	a->vblank_timer.data = a;
	uv_timer_init(d->loop, &a->recover_timer);
	a->recover_timer.data = a;
	a->vblank_period_ns = 1000000000ull / d->cfg.refresh_hz;
	a->vblank_epoch_ns = gsd_now_ns();
}

bool gsd_vidsch_flip_waits(gsd_daemon *d, gsd_node *n, gsd_packet *p)
{
	uint32_t f = p->rec.submit_flags;
	if (!(f & GS_SUBMIT_FLIP) || (f & GS_SUBMIT_FLIP_WITH_NO_WAIT))
		return false;
	gsd_adapter *a = n->adapter;
	if (d->cfg.virtual_clock) {
		/* The node's clock moves on to the next blank; no waiting in wall time. */
		n->vtime_ns = (n->vtime_ns / a->vblank_period_ns + 1) * a->vblank_period_ns;
		return false;
	}
	p->flip_waiting = true;
	n->running = p;
	n->inflight = 1;
	a->flips_waiting++;
	vblank_arm(a);
	return true;
}

/* Present / RedirectedPresent: the source (allocation list entry 0) is copied into the
 * display surface (entry 1: allocation flag 0x2, listed as written) once the packet's commands
 * ran. A present without such an entry is still accepted and recorded (every flag bit is); it
 * just has nothing to copy into. Both are held by the packet, so no CPU access or other engine
 * touches them meanwhile. */
void gsd_vidsch_present(gsd_packet *p)
{
	uint32_t f = p->rec.submit_flags;
	if (!(f & (GS_SUBMIT_PRESENT | GS_SUBMIT_REDIRECTED_PRESENT)) ||
	    (f & GS_SUBMIT_NULL_RENDERING) || p->nallocs < 2 ||
	    !(p->allocs[1].alloc->flags & GS_ALLOC_DISPLAY) || !p->allocs[1].write)
		return;
	const gsd_allocation *src = p->allocs[0].alloc;
	gsd_allocation *dst = p->allocs[1].alloc;
	uint64_t n = src->size < dst->size ? src->size : dst->size;
	char err[160];
	if (gsd_vidmm_cpu_blit(src, dst, n, err, sizeof(err)) != 0)
		GSD_WARN("packet %llu: present: %s", (unsigned long long)p->rec.packet, err);
}
