/*-------------------------------------------------------------------------
 *
 * asan_early.c
 *	  Preloaded into the server after the ASan runtime (verify/memcheck.sh),
 *	  so that the runtime starts before a library's constructor takes
 *	  glibc's gettext lock.
 *
 * The ASan runtime, when preloaded into a program not built with it,
 * starts at the first call it intercepts. In the server that is a malloc
 * inside bindtextdomain, called by libgpg-error's constructor (pulled in by
 * libsystemd) while bindtextdomain holds glibc's _nl_state_lock: starting
 * up, the runtime looks a symbol up, dlerror translates the failure through
 * gettext, which takes the same lock, and the process hangs for good in
 * its first bindtextdomain. Here the first bindtextdomain starts the
 * runtime (a malloc) before glibc's takes the lock.
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>

extern char *bindtextdomain(const char *domainname, const char *dirname);

char *
bindtextdomain(const char *domainname, const char *dirname)
{
	static char *(*real) (const char *, const char *);

	if (real == NULL)
	{
		/* volatile: a malloc freed at once may be optimized away */
		void	   *volatile p = malloc(1);

		free(p);
		real = (char *(*) (const char *, const char *))
			dlsym(RTLD_NEXT, "bindtextdomain");
	}
	return real(domainname, dirname);
}
