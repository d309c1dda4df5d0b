#version 460
// CHECKSUM: XXH64 (seed 0), bit-identical to the library's XXH64, which the emulator uses
// (tests/unit/test_engine.c compares them on random inputs). One invocation: the hash is a
// serial chain. Drivers may cut a long loop short (lavapipe stops an invocation's loops after
// 65,535 iterations in all), so a long input is hashed by several dispatches in a row, each
// carrying the four accumulators on in memory (vulkan.c, record_checksum):
//   mode 0  the whole hash of args.size bytes at args.src, written little-endian at args.dst;
//   mode 1  the 32-byte stripes of args.size bytes (a multiple of 32) at args.src, from the
//           accumulators at args.dst (4 x u64), started afresh when args.aux is 1, left there;
//   mode 2  the end: the accumulators at args.aux, the total length args.count, the tail of
//           args.size (< 32) bytes at args.src; the hash written at args.dst.
#extension GL_GOOGLE_include_directive : require
#include "args.glsl"

const uint64_t P1 = 0x9E3779B185EBCA87ul;
const uint64_t P2 = 0xC2B2AE3D27D4EB4Ful;
const uint64_t P3 = 0x165667B19E3779F9ul;
const uint64_t P4 = 0x85EBCA77C2B2AE63ul;
const uint64_t P5 = 0x27D4EB2F165667C5ul;

uint64_t rotl(uint64_t x, uint r)
{
	return (x << r) | (x >> (64u - r));
}

uint64_t rd32(uint64_t a)
{
	return uint64_t(ld8(a) | (ld8(a + 1ul) << 8u) | (ld8(a + 2ul) << 16u) | (ld8(a + 3ul) << 24u));
}

uint64_t rd64(uint64_t a)
{
	return rd32(a) | (rd32(a + 4ul) << 32u);
}

uint64_t round1(uint64_t acc, uint64_t lane)
{
	acc += lane * P2;
	acc = rotl(acc, 31u);
	return acc * P1;
}

uint64_t merge(uint64_t acc, uint64_t v)
{
	acc ^= round1(0ul, v);
	return acc * P1 + P4;
}

layout(buffer_reference, std430, buffer_reference_align = 8) buffer Lanes {
	uint64_t v[4];
};

// The hash of the accumulated stripes, once there are any.
uint64_t converge(uint64_t v1, uint64_t v2, uint64_t v3, uint64_t v4)
{
	uint64_t h = rotl(v1, 1u) + rotl(v2, 7u) + rotl(v3, 12u) + rotl(v4, 18u);
	h = merge(h, v1);
	h = merge(h, v2);
	h = merge(h, v3);
	return merge(h, v4);
}

// The tail (fewer than 32 bytes, [p, end)) and the avalanche, written at args.dst.
void finish(uint64_t h, uint64_t p, uint64_t end)
{
	while (p + 8ul <= end) {
		h ^= round1(0ul, rd64(p));
		h = rotl(h, 27u) * P1 + P4;
		p += 8ul;
	}
	if (p + 4ul <= end) {
		h ^= rd32(p) * P1;
		h = rotl(h, 23u) * P2 + P3;
		p += 4ul;
	}
	while (p < end) {
		h ^= uint64_t(ld8(p)) * P5;
		h = rotl(h, 11u) * P1;
		p += 1ul;
	}
	h ^= h >> 33u;
	h *= P2;
	h ^= h >> 29u;
	h *= P3;
	h ^= h >> 32u;
	for (uint k = 0u; k < 8u; k++)
		st8(args.dst + k, uint(h >> (8u * k)));
}

void main()
{
	if (args.mode == 2u) {
		if (invocation() != 0ul)
			return;
		Lanes s = Lanes(args.aux);
		uint64_t h = converge(s.v[0], s.v[1], s.v[2], s.v[3]) + args.count;
		finish(h, args.src, args.src + args.size);
		return;
	}
	if (invocation() >= args.count)
		return;
	uint64_t p = args.src;
	uint64_t len = args.size;
	uint64_t end = p + len;
	if (args.mode == 1u) {
		Lanes s = Lanes(args.dst);
		uint64_t v1 = P1 + P2, v2 = P2, v3 = 0ul, v4 = 0ul - P1;
		if (args.aux == 0ul) {
			v1 = s.v[0];
			v2 = s.v[1];
			v3 = s.v[2];
			v4 = s.v[3];
		}
		for (; p < end; p += 32ul) {
			v1 = round1(v1, rd64(p));
			v2 = round1(v2, rd64(p + 8ul));
			v3 = round1(v3, rd64(p + 16ul));
			v4 = round1(v4, rd64(p + 24ul));
		}
		s.v[0] = v1;
		s.v[1] = v2;
		s.v[2] = v3;
		s.v[3] = v4;
		return;
	}
	uint64_t h;
	if (len >= 32ul) {
		uint64_t v1 = P1 + P2, v2 = P2, v3 = 0ul, v4 = 0ul - P1;
		uint64_t limit = end - 32ul;
		do {
			v1 = round1(v1, rd64(p));
			v2 = round1(v2, rd64(p + 8ul));
			v3 = round1(v3, rd64(p + 16ul));
			v4 = round1(v4, rd64(p + 24ul));
			p += 32ul;
		} while (p <= limit);
		h = converge(v1, v2, v3, v4);
	} else {
		h = P5;
	}
	finish(h + len, p, end);
}
