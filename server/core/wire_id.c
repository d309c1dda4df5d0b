#include "core/wire_id.h"

#include <sodium.h>
#include <stdbool.h>
#include <string.h>

#define HI_BITS 27
#define LO_BITS 26
#define HI_MASK ((UINT64_C(1) << HI_BITS) - 1)
#define LO_MASK ((UINT64_C(1) << LO_BITS) - 1)
#define ROUNDS  4

/* Keeps the round key apart from any other use of the file's key. */
static const char KEY_CONTEXT[] = "gpusched wire ids v1";

void gsd_wire_key_init(gsd_wire_key *k, const unsigned char key[GSD_WIRE_KEY_BYTES])
{
	crypto_generichash(k->sip, sizeof k->sip, (const unsigned char *)KEY_CONTEXT,
	                   sizeof KEY_CONTEXT - 1, key, GSD_WIRE_KEY_BYTES);
}

/* The round function: SipHash-2-4 of (tweak, round, half), little-endian. */
static uint64_t round_fn(const gsd_wire_key *k, uint64_t tweak, unsigned round, uint64_t half)
{
	unsigned char in[13], out[crypto_shorthash_BYTES];
	for (int i = 0; i < 8; i++)
		in[i] = (unsigned char)(tweak >> (8 * i));
	in[8] = (unsigned char)round;
	for (int i = 0; i < 4; i++)
		in[9 + i] = (unsigned char)(half >> (8 * i));
	crypto_shorthash(out, in, sizeof in, k->sip);
	uint64_t h = 0;
	for (int i = 0; i < 8; i++)
		h |= (uint64_t)out[i] << (8 * i);
	return h;
}

/* One pass of the network over [0, 2^53), or of its inverse (the same rounds in reverse order):
 * the 27 high bits and the 26 low bits take turns. */
static uint64_t permute(const gsd_wire_key *k, uint64_t tweak, uint64_t v, bool inverse)
{
	uint64_t hi = v >> LO_BITS, lo = v & LO_MASK;
	for (unsigned i = 0; i < ROUNDS; i++) {
		unsigned r = inverse ? ROUNDS - 1 - i : i;
		if (r % 2 == 0)
			hi = (hi ^ round_fn(k, tweak, r, lo)) & HI_MASK;
		else
			lo = (lo ^ round_fn(k, tweak, r, hi)) & LO_MASK;
	}
	return hi << LO_BITS | lo;
}

_Static_assert(HI_BITS + LO_BITS == 53 && GSD_WIRE_MAX == (UINT64_C(1) << 53) - 1,
               "the network covers the 53 bits a JSON number holds exactly");

/*
 * Cycle walking: the network permutes [0, 2^53); restricted to the non-zero values, a value
 * whose image is 0 takes the image of 0 instead (one more pass), which leaves a permutation of
 * [1, 2^53) and 0 fixed.
 */
static uint64_t walk(const gsd_wire_key *k, uint64_t tweak, uint64_t v, bool inverse)
{
	if (v == 0 || v > GSD_WIRE_MAX)
		return v == 0 ? 0 : GSD_WIRE_NONE;
	uint64_t w = permute(k, tweak, v, inverse);
	while (w == 0)
		w = permute(k, tweak, w, inverse);
	return w;
}

uint64_t gsd_wire_map(const gsd_wire_key *k, uint64_t tweak, uint64_t v)
{
	return walk(k, tweak, v, false);
}

uint64_t gsd_wire_unmap(const gsd_wire_key *k, uint64_t tweak, uint64_t w)
{
	return walk(k, tweak, w, true);
}
