/*
 * Preloaded into daemons under test in sanitized builds (GS_DAEMON_PRELOAD, tests/lib/testd.c).
 *
 * The Vulkan loader unloads the driver (Mesa's lavapipe) when the daemon destroys its instance.
 * Memory that the driver's own globals still reference at that point is then reachable from
 * nowhere, and LeakSanitizer reports it as the daemon's leak, from an "<unknown module>". Loading
 * the driver once more with RTLD_NODELETE keeps it mapped until exit, so its globals stay
 * visible and only real leaks are reported. It changes nothing else.
 */
#include <dlfcn.h>

__attribute__((constructor)) static void keep_icd(void)
{
	/* Not there (another driver, no Mesa): nothing to keep. */
	(void)dlopen("libvulkan_lvp.so", RTLD_NOW | RTLD_NODELETE);
}
