/*-------------------------------------------------------------------------
 *
 * fuzz_url.c
 *	  libFuzzer harness for rwlock.redis_url (src/url.c): the setting's
 *	  check (rw_check_url), the spec a session builds from it
 *	  (rw_current_spec) and the parse of a spec (rw_parse_url), on any
 *	  bytes. Built and run by verify/fuzz.sh.
 *
 * Besides crashes, it checks what callers rely on: a URL the check hook
 * accepts makes a spec that parses; a refusal says why; a parsed endpoint
 * has what its kind needs (a host and a port in range, an absolute socket
 * path, 1 to 64 seeds, a quorum of an odd number of members, each a spec
 * that parses).
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
	fprintf(stderr, "fuzz_url: %s\n", what);
	abort();
}

static void
check_port(int port)
{
	if (port < 1 || port > 65535)
		fail("a port out of range");
}

static void
check_endpoint(const RwEndpoint *ep)
{
	if (ep->url == NULL || ep->display == NULL)
		fail("an endpoint without its spec or display");
	if (ep->nquorum > 0)
	{
		if (ep->nquorum < 3 || ep->nquorum % 2 == 0 || ep->nquorum > RW_QUORUM_MAX)
			fail("a quorum of a wrong number of members");
		for (int i = 0; i < ep->nquorum; i++)
		{
			RwEndpoint	m;
			char	   *why = NULL;

			if (!rw_parse_url(ep->quorum_specs[i], &m, &why))
				fail("a quorum member's spec does not parse");
			if (m.nquorum > 0 || m.sentinel || m.cluster)
				fail("a quorum member that is not one server");
			check_endpoint(&m);
		}
		return;
	}
	if (ep->db < 0 || ep->db > 1000000)
		fail("a database number out of range");
	if (ep->sentinel || ep->cluster)
	{
		if (ep->nseeds < 1 || ep->nseeds > 64)
			fail("a wrong number of seeds");
		for (int i = 0; i < ep->nseeds; i++)
		{
			if (ep->seed_hosts[i] == NULL || ep->seed_hosts[i][0] == '\0')
				fail("a seed without a host");
			check_port(ep->seed_ports[i]);
		}
		if (ep->sentinel && ep->master_name == NULL)
			fail("a sentinel URL without its master's name");
		if (ep->cluster && ep->db != 0)
			fail("a cluster URL with a database other than 0");
	}
	else if (ep->is_unix)
	{
		if (ep->path == NULL || ep->path[0] != '/')
			fail("a unix:// URL without an absolute path");
	}
	else
	{
		if (ep->host == NULL || ep->host[0] == '\0')
			fail("a URL without a host");
		check_port(ep->port);
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *s = malloc(size + 1);
	RwEndpoint	ep;
	char	   *why = NULL;

	memcpy(s, data, size);
	s[size] = '\0';				/* a setting is a C string: up to a NUL */

	/* As the setting: the check hook, then the spec sessions use. */
	if (rw_check_url(s, &why))
	{
		char	   *spec;

		rw_redis_url = s;
		/* Half the inputs with a password file: a spec of two fields. */
		rw_password_file = (size % 2) ? "/etc/rwlock.pass" : NULL;
		spec = rw_current_spec();
		why = NULL;
		if (!rw_parse_url(spec, &ep, &why))
			fail("the check hook accepts a URL whose spec does not parse");
		check_endpoint(&ep);
		rw_redis_url = "redis://127.0.0.1:6379/0";
	}
	else if (why == NULL || why[0] == '\0')
		fail("a URL refused without a reason");

	/* As a spec: tab-separated fields. */
	why = NULL;
	if (rw_parse_url(s, &ep, &why))
		check_endpoint(&ep);
	else if (why == NULL || why[0] == '\0')
		fail("a spec refused without a reason");

	fuzz_reset();
	free(s);
	return 0;
}
