/*-------------------------------------------------------------------------
 *
 * resolve.c
 *	  Host names looked up without blocking: getaddrinfo_a runs the lookup
 *	  on glibc's helper thread (which blocks every signal: the backend's
 *	  handlers still run on the backend's own thread), and the caller
 *	  polls it from its own wait through the latch (redis_conn.c), so that
 *	  a DNS server that does not answer never outlasts
 *	  rwlock.connect_timeout, cancel or terminate.
 *
 *-------------------------------------------------------------------------
 */
#include "rwlock.h"

#include <netdb.h>

/*
 * Start looking up host:port. A numeric address is converted at once:
 * *req is NULL and *res set. Otherwise *req is the lookup under way, for
 * rw_resolve_poll and rw_resolve_abandon. False (err set) if it could not
 * start.
 */
bool
rw_resolve_start(const char *host, const char *port, struct addrinfo **res,
				 struct gaicb **req, RwError *err)
{
	struct addrinfo hints;
	struct gaicb *list[1];
	struct gaicb *r;
	int			rc;

	*req = NULL;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICHOST;
	if (getaddrinfo(host, port, &hints, res) == 0)
		return true;
	hints.ai_flags = 0;

	/* One block, outliving the caller if the lookup cannot be cancelled. */
	r = calloc(1, sizeof(struct gaicb) + sizeof(struct addrinfo) +
			   strlen(host) + strlen(port) + 2);
	if (r == NULL)
	{
		rw_error_set(err, RW_ERR_CONNECT, "could not resolve the host name: out of memory");
		return false;
	}
	memcpy(r + 1, &hints, sizeof(hints));
	r->ar_request = (struct addrinfo *) (r + 1);
	r->ar_name = (char *) (r->ar_request + 1);
	strcpy((char *) r->ar_name, host);
	r->ar_service = r->ar_name + strlen(host) + 1;
	strcpy((char *) r->ar_service, port);
	list[0] = r;
	if ((rc = getaddrinfo_a(GAI_NOWAIT, list, 1, NULL)) != 0)
	{
		free(r);
		rw_error_set(err, RW_ERR_CONNECT, "could not resolve the host name: %s",
					 gai_strerror(rc));
		return false;
	}
	*req = r;
	return true;
}

/*
 * Whether the lookup is done: 0 while it runs; 1 when it found addresses
 * (*res set); -1 when it failed (err set). Either way, once done, req is
 * freed.
 */
int
rw_resolve_poll(struct gaicb *req, struct addrinfo **res, RwError *err)
{
	int			rc = gai_error(req);

	if (rc == EAI_INPROGRESS)
		return 0;
	*res = req->ar_result;
	free(req);
	if (rc != 0)
	{
		rw_error_set(err, RW_ERR_CONNECT, "could not resolve the host name: %s",
					 rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
		return -1;
	}
	return 1;
}

/*
 * Give up a lookup still under way: freed if glibc's helper has not started
 * on it, else left to it (it writes into the request when its resolver
 * gives up): a small leak per lookup abandoned that way, the price of never
 * blocking on a resolver.
 */
void
rw_resolve_abandon(struct gaicb *req)
{
	int			rc = gai_cancel(req);

	if (rc == EAI_NOTCANCELED)
		return;
	if (rc == EAI_ALLDONE && req->ar_result != NULL)
		freeaddrinfo(req->ar_result);
	free(req);
}
