/*
 * Wire ids: what a client sees of the daemon's sequences. Packet ids, submission fences and
 * audit sequence numbers are counted inside the daemon (and in the audit file's columns) one
 * +1 at a time across every tenant, so their gaps would tell one tenant how much the others
 * do. Every value crosses the wire through a keyed permutation instead: gsd_wire_map on the way
 * out, gsd_wire_unmap on the way in, for every caller (administrators too), so a wire value is
 * opaque, stable (the key lives in the audit file's meta table, 'wire_key'), unique within its
 * domain and unordered.
 *
 * The permutation is a 4-round unbalanced Feistel network on 53 bits (a 27-bit and a 26-bit
 * half) whose round function is SipHash-2-4 (libsodium crypto_shorthash) of the round, the
 * domain's tweak and the other half; cycle walking keeps 0 out of the image of any non-zero
 * value, so 0 (the wire's "none") maps to itself and nothing else maps to 0. Each domain has
 * its own tweak: equal internal values give unrelated wire values in two domains.
 *
 * 53 bits, because a wire value is printed as a JSON number by the CLI, the trace and the
 * timeline, and read back by jq and JavaScript, which hold integers exactly only up to
 * 2^53 - 1 (GSD_WIRE_MAX). A value above it is never a wire value: gsd_wire_unmap gives
 * GSD_WIRE_NONE for it, which matches no packet, fence or record. (Schema 6 files were
 * written by daemons whose network covered 63 bits: the same key gives other wire values now.)
 */
#ifndef GSD_WIRE_ID_H
#define GSD_WIRE_ID_H

#include <stdint.h>

#define GSD_WIRE_KEY_BYTES 32
/* The largest wire value (and internal value) the permutation covers: JSON's exact integers. */
#define GSD_WIRE_MAX ((UINT64_C(1) << 53) - 1)
/* What gsd_wire_unmap answers for a value that is no wire value (> GSD_WIRE_MAX): above every
 * internal value, so it finds nothing. */
#define GSD_WIRE_NONE UINT64_MAX

/* Domains (tweaks). A fence's tweak also names its adapter and node: gsd_wire_fence_tweak. */
#define GSD_WIRE_PACKET UINT64_C(0x0100000000000000) /* packet ids (render and paging) */
#define GSD_WIRE_SEQ    UINT64_C(0x0200000000000000) /* audit sequence numbers */
#define GSD_WIRE_EVENTS UINT64_C(0x0300000000000000) /* EventsWait cursors (ring positions) */
#define GSD_WIRE_FENCE  UINT64_C(0x0400000000000000) /* submission fences, per (adapter, node) */

/* The round key, derived from the 32-byte key of the audit file. */
typedef struct gsd_wire_key {
	unsigned char sip[16];
} gsd_wire_key;

/* Derives k from the file's key (BLAKE2b, keyed; libsodium must be initialised). */
void gsd_wire_key_init(gsd_wire_key *k, const unsigned char key[GSD_WIRE_KEY_BYTES]);

/* Internal value v (<= GSD_WIRE_MAX) -> its wire value in domain `tweak`; 0 -> 0. */
uint64_t gsd_wire_map(const gsd_wire_key *k, uint64_t tweak, uint64_t v);
/* Wire value w -> the internal value it stands for; 0 -> 0, w > GSD_WIRE_MAX -> GSD_WIRE_NONE. */
uint64_t gsd_wire_unmap(const gsd_wire_key *k, uint64_t tweak, uint64_t w);

static inline uint64_t gsd_wire_fence_tweak(uint32_t adapter, uint32_t node)
{
	return GSD_WIRE_FENCE | (uint64_t)(adapter & 0xffffu) << 16 | (node & 0xffffu);
}

/*
 * The daemon's counters (packet ids, fences, audit seqs; not the event ring's positions, see
 * gsd_h_events_wait) stay at or below
 * GSD_WIRE_ISSUED_MAX (2^44 - 1, about 17.6 trillion). A value coming in that unmaps above it
 * was never issued: it was made up, and it is taken as GSD_WIRE_NONE (it names nothing). Only
 * 1 in 2^9 made-up values unmaps inside the range, and one that does names a position, not a
 * number: a cursor compares in the daemon's order against the caller's own records, whose
 * numbers the caller never sees, so it tells where the made-up value falls among them and
 * nothing about the counters' values or the other tenants' work.
 */
#define GSD_WIRE_ISSUED_MAX ((UINT64_C(1) << 44) - 1)
static inline uint64_t gsd_wire_in(const gsd_wire_key *k, uint64_t tweak, uint64_t w)
{
	uint64_t v = gsd_wire_unmap(k, tweak, w);
	return v <= GSD_WIRE_ISSUED_MAX ? v : GSD_WIRE_NONE;
}

/* The crossings, by domain: *_out on the way to a client, *_in on the way from one. */
static inline uint64_t gsd_wire_packet_out(const gsd_wire_key *k, uint64_t packet)
{
	return gsd_wire_map(k, GSD_WIRE_PACKET, packet);
}
static inline uint64_t gsd_wire_packet_in(const gsd_wire_key *k, uint64_t packet)
{
	return gsd_wire_in(k, GSD_WIRE_PACKET, packet);
}
static inline uint64_t gsd_wire_seq_out(const gsd_wire_key *k, uint64_t seq)
{
	return gsd_wire_map(k, GSD_WIRE_SEQ, seq);
}
static inline uint64_t gsd_wire_seq_in(const gsd_wire_key *k, uint64_t seq)
{
	return gsd_wire_in(k, GSD_WIRE_SEQ, seq);
}
static inline uint64_t gsd_wire_fence_out(const gsd_wire_key *k, uint32_t adapter, uint32_t node,
                                          uint64_t fence)
{
	return gsd_wire_map(k, gsd_wire_fence_tweak(adapter, node), fence);
}
static inline uint64_t gsd_wire_fence_in(const gsd_wire_key *k, uint32_t adapter, uint32_t node,
                                         uint64_t fence)
{
	return gsd_wire_in(k, gsd_wire_fence_tweak(adapter, node), fence);
}

#endif
