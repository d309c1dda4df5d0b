#version 460
// CHECKSUM: XXH64 (seed 0) of args.size bytes at args.src, written little-endian at args.dst.
// One invocation: the hash is a serial chain. Bit-identical to the library's XXH64, which the
// emulator uses (tests/unit/test_vulkan.c compares them on random inputs).
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

void main()
{
	if (invocation() >= args.count)
		return;
	uint64_t p = args.src;
	uint64_t len = args.size;
	uint64_t end = p + len;
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
		h = rotl(v1, 1u) + rotl(v2, 7u) + rotl(v3, 12u) + rotl(v4, 18u);
		h = merge(h, v1);
		h = merge(h, v2);
		h = merge(h, v3);
		h = merge(h, v4);
	} else {
		h = P5;
	}
	h += len;
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
