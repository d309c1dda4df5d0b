/*
 * Times as users write them on a command line: a duration back from now ("10m", "90s", "2h"),
 * an ISO 8601 date and time (UTC with "Z" or an offset, else local time), "@SECONDS" since the
 * Unix epoch, or "now". Every form ends as CLOCK_REALTIME nanoseconds, the audit's clock.
 */
/* timegm is a GNU and BSD extension; the build defines _GNU_SOURCE. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpusched.h"

#define NS_PER_S 1000000000ull

static const struct {
	const char *unit;
	uint64_t ns;
} duration_units[] = {
        {"ns", 1},
        {"us", 1000},
        {"ms", 1000000},
        {"s", NS_PER_S},
        {"m", 60 * NS_PER_S},
        {"h", 3600 * NS_PER_S},
        {"d", 86400 * NS_PER_S},
};

/* "10m" -> 600 s in ns. Only a whole number and one unit; false on anything else or overflow. */
static bool parse_duration(const char *s, uint64_t *ns)
{
	char *end;
	if (!isdigit((unsigned char)s[0]))
		return false;
	errno = 0;
	unsigned long long n = strtoull(s, &end, 10);
	if (errno || end == s)
		return false;
	for (size_t i = 0; i < sizeof(duration_units) / sizeof(duration_units[0]); i++) {
		if (strcmp(end, duration_units[i].unit) != 0)
			continue;
		if (n > UINT64_MAX / duration_units[i].ns)
			return false;
		*ns = n * duration_units[i].ns;
		return true;
	}
	return false;
}

/* Reads exactly `digits` decimal digits. */
static bool read_fixed(const char **p, int digits, int *out)
{
	int v = 0;
	for (int i = 0; i < digits; i++) {
		if (!isdigit((unsigned char)(*p)[i]))
			return false;
		v = v * 10 + ((*p)[i] - '0');
	}
	*p += digits;
	*out = v;
	return true;
}

/* YYYY-MM-DD[(T| )HH:MM[:SS[.frac]]][Z|(+|-)HH:MM] */
static bool parse_iso(const char *s, uint64_t *ns)
{
	struct tm tm = {0};
	const char *p = s;
	int year, mon, day, hour = 0, min = 0, sec = 0;
	uint64_t frac = 0;

	if (!read_fixed(&p, 4, &year) || *p++ != '-' || !read_fixed(&p, 2, &mon) || *p++ != '-' ||
	    !read_fixed(&p, 2, &day))
		return false;
	if (*p == 'T' || *p == ' ') {
		p++;
		if (!read_fixed(&p, 2, &hour) || *p++ != ':' || !read_fixed(&p, 2, &min))
			return false;
		if (*p == ':') {
			p++;
			if (!read_fixed(&p, 2, &sec))
				return false;
			if (*p == '.') {
				uint64_t scale = NS_PER_S / 10;
				p++;
				if (!isdigit((unsigned char)*p))
					return false;
				for (; isdigit((unsigned char)*p); p++, scale /= 10)
					frac += (uint64_t)(*p - '0') * scale;
			}
		}
	}
	if (mon < 1 || mon > 12 || day < 1 || day > 31 || hour > 23 || min > 59 || sec > 60)
		return false;
	tm.tm_year = year - 1900;
	tm.tm_mon = mon - 1;
	tm.tm_mday = day;
	tm.tm_hour = hour;
	tm.tm_min = min;
	tm.tm_sec = sec;

	time_t t;
	if (*p == '\0') {
		tm.tm_isdst = -1; /* local time, daylight saving as it was on that date */
		t = mktime(&tm);
	} else {
		long offset = 0;
		if (*p == 'Z' || *p == 'z') {
			p++;
		} else if (*p == '+' || *p == '-') {
			int sign = *p++ == '-' ? -1 : 1, oh, om;
			if (!read_fixed(&p, 2, &oh) || *p++ != ':' || !read_fixed(&p, 2, &om) ||
			    oh > 23 || om > 59)
				return false;
			offset = sign * (oh * 3600L + om * 60L);
		} else {
			return false;
		}
		if (*p != '\0')
			return false;
		t = timegm(&tm);
		if (t != (time_t)-1)
			t -= offset;
	}
	if (t == (time_t)-1 || t < 0)
		return false;
	*ns = (uint64_t)t * NS_PER_S + frac;
	return true;
}

int gs_time_parse(const char *s, uint64_t now_ns, uint64_t *out)
{
	uint64_t v;

	if (!s || !out)
		return GS_ERR_INVALID;
	if (strcmp(s, "now") == 0) {
		*out = now_ns;
		return 0;
	}
	if (s[0] == '@') {
		char *end;
		errno = 0;
		unsigned long long secs = strtoull(s + 1, &end, 10);
		if (errno || end == s + 1 || *end || !isdigit((unsigned char)s[1]) ||
		    secs > UINT64_MAX / NS_PER_S)
			return GS_ERR_INVALID;
		*out = secs * NS_PER_S;
		return 0;
	}
	if (parse_duration(s, &v)) {
		if (v > now_ns)
			return GS_ERR_INVALID;
		*out = now_ns - v;
		return 0;
	}
	if (parse_iso(s, &v)) {
		*out = v;
		return 0;
	}
	return GS_ERR_INVALID;
}
