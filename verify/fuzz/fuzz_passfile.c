/*-------------------------------------------------------------------------
 *
 * fuzz_passfile.c
 *	  libFuzzer harness for the password file (src/passfile.c,
 *	  rw_passfile_match). The input's first line is the URL (a spec, as
 *	  url.c parses it) the lookup is for, the rest the file's contents.
 *	  Built and run by verify/fuzz.sh.
 *
 * Besides crashes, it checks what redis_conn.c relies on: a URL's user is
 * never replaced by the file's, what is found is a string, and a lookup
 * leaves nothing allocated but what it returns (a connection looks up
 * again at each reconnection, in whatever memory context is current: the
 * keeper's lasts as long as the keeper).
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include <stdio.h>
#include <stdlib.h>

#include "fuzz.h"

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
fail(const char *what)
{
	fprintf(stderr, "fuzz_passfile: %s\n", what);
	abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *s = malloc(size + 1);
	char	   *contents;
	RwEndpoint	ep;
	char	   *why = NULL;
	char	   *user;
	char	   *password;
	int			before;

	memcpy(s, data, size);
	s[size] = '\0';
	contents = strchr(s, '\n');
	if (contents != NULL)
		*contents++ = '\0';
	else
		contents = "";

	/* A URL that names no server directly: as connecting to 127.0.0.1. */
	if (!rw_parse_url(s, &ep, &why) || ep.nquorum > 0)
		rw_parse_url("redis://127.0.0.1:6379/0", &ep, &why);
	if (!ep.is_unix && ep.host == NULL)
	{
		ep.host = "127.0.0.1";
		ep.port = ep.sentinel ? 26379 : 6379;
	}
	ep.password = NULL;
	ep.password_file = "/etc/rwlock.pass";

	user = ep.user;
	password = NULL;
	before = fuzz_live_chunks();
	rw_passfile_match(&ep, contents, &user, &password);
	if (ep.user != NULL && user != ep.user)
		fail("the URL's user replaced by the file's");
	if (fuzz_live_chunks() - before !=
		(user != ep.user ? 1 : 0) + (password != NULL ? 1 : 0))
		fail("a lookup leaves allocations behind");
	if (password != NULL)
		(void) strlen(password);
	if (user != NULL)
		(void) strlen(user);

	fuzz_reset();
	free(s);
	return 0;
}
