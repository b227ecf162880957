/*
 * redis_rtt.c: the Redis floor of bench/run.sh, measured the way the
 * extension talks to Redis (hiredis, one connection, one command at a time)
 * but with nothing else around it: a blocking hiredis client in a tight loop.
 *
 *   redis_rtt PORT SECONDS ping            µs per PING
 *   redis_rtt PORT SECONDS eval1           µs per EVALSHA of "return 1"
 *   redis_rtt PORT SECONDS pair ACQ REL    µs per acquire.lua + release.lua
 *                                          pair (a real take and release,
 *                                          protocol 3: each call a new seq)
 *   redis_rtt PORT SECONDS chain           µs per request of a chain of three
 *                                          processes: this one asks a child
 *                                          (one byte over loopback TCP), the
 *                                          child makes one EVALSHA "return 1"
 *                                          round trip, then answers: the
 *                                          shape of a SQL call that asks
 *                                          Redis, without PostgreSQL
 *
 * Prints one number, µs per operation.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <hiredis/hiredis.h>

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static char *
slurp(const char *path)
{
	FILE	   *f = fopen(path, "rb");
	long		n;
	char	   *s;

	if (!f || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0)
	{
		perror(path);
		exit(1);
	}
	rewind(f);
	s = malloc(n + 1);
	if (fread(s, 1, n, f) != (size_t) n)
	{
		perror(path);
		exit(1);
	}
	s[n] = '\0';
	fclose(f);
	return s;
}

static redisReply *
cmd(redisContext *c, int argc, const char **argv)
{
	redisReply *r = redisCommandArgv(c, argc, argv, NULL);

	if (r == NULL)
	{
		fprintf(stderr, "redis: %s\n", c->errstr);
		exit(1);
	}
	if (r->type == REDIS_REPLY_ERROR)
	{
		fprintf(stderr, "redis error: %s\n", r->str);
		exit(1);
	}
	return r;
}

static char *
load(redisContext *c, const char *body)
{
	const char *argv[3] = {"SCRIPT", "LOAD", body};
	redisReply *r = cmd(c, 3, argv);
	char	   *sha = strdup(r->str);

	freeReplyObject(r);
	return sha;
}

/*
 * The seqs of the next pair: the acquire's, then the release's, each larger
 * than every one before (docs/protocol.md 4.1). Formatting two numbers is
 * part of what the extension does per pair too.
 */
static void
next_seqs(unsigned long long *seq, char *acq, char *rel)
{
	snprintf(acq, 24, "%llu", ++*seq);
	snprintf(rel, 24, "%llu", ++*seq);
}

/*
 * The chain: a child that, for each byte read from its client, makes the
 * EVALSHA of a1 and writes the byte back; the client (this process) times
 * the requests. Both ends set TCP_NODELAY, as PostgreSQL and hiredis do.
 */
static double
chain(redisContext *c, const char **a1, int n1, double secs)
{
	struct sockaddr_in addr = {.sin_family = AF_INET};
	socklen_t	len = sizeof(addr);
	int			one = 1,
				ls = socket(AF_INET, SOCK_STREAM, 0),
				s;
	long		n = 0;
	double		t0,
				t;
	char		b = 'x';

	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(ls, (struct sockaddr *) &addr, sizeof(addr)) != 0 ||
		getsockname(ls, (struct sockaddr *) &addr, &len) != 0 || listen(ls, 1) != 0)
	{
		perror("chain: listen");
		exit(1);
	}
	if (fork() == 0)
	{
		s = accept(ls, NULL, NULL);
		setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		while (read(s, &b, 1) == 1)
		{
			freeReplyObject(cmd(c, n1, a1));
			if (write(s, &b, 1) != 1)
				break;
		}
		exit(0);
	}
	s = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(s, (struct sockaddr *) &addr, sizeof(addr)) != 0)
	{
		perror("chain: connect");
		exit(1);
	}
	setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	t0 = now();
	do
	{
		for (int i = 0; i < 100; i++)
			if (write(s, &b, 1) != 1 || read(s, &b, 1) != 1)
			{
				perror("chain");
				exit(1);
			}
		n += 100;
		t = now();
	} while (t - t0 < secs);
	close(s);
	wait(NULL);
	return (t - t0) * 1e6 / n;
}

int
main(int argc, char **argv)
{
	redisContext *c;
	double		secs,
				t0,
				t;
	long		n = 0;
	const char *mode;
	const char *a1[16],
			   *a2[16];
	int			n1 = 0,
				n2 = 0;
	char		acq_seq[24] = "",
				rel_seq[24] = "";
	unsigned long long seq = 0;

	if (argc < 4)
	{
		fprintf(stderr, "usage: redis_rtt PORT SECONDS ping|eval1|chain|pair [ACQ.lua REL.lua]\n");
		return 2;
	}
	secs = atof(argv[2]);
	mode = argv[3];
	c = redisConnect("127.0.0.1", atoi(argv[1]));
	if (c == NULL || c->err)
	{
		fprintf(stderr, "cannot connect to Redis\n");
		return 1;
	}
	if (strcmp(mode, "ping") == 0)
		a1[n1++] = "PING";
	else if (strcmp(mode, "eval1") == 0 || strcmp(mode, "chain") == 0)
	{
		a1[n1++] = "EVALSHA";
		a1[n1++] = load(c, "return 1");
		a1[n1++] = "0";
	}
	else if (strcmp(mode, "pair") == 0 && argc >= 6)
	{
		const char *keys[2] = {"bench:{rtt}", "bench:{rtt}:q"};

		a1[n1++] = "EVALSHA";
		a1[n1++] = load(c, slurp(argv[4]));
		a1[n1++] = "2";
		a2[n2++] = "EVALSHA";
		a2[n2++] = load(c, slurp(argv[5]));
		a2[n2++] = "2";
		for (int i = 0; i < 2; i++)
			a1[n1++] = a2[n2++] = keys[i];
		/*
		 * The arguments protocol.c sends (protocol 3, the lean calling
		 * convention): a blocking write lock (owner, seq, mode, lease, mark;
		 * keep left to the script's default) and a plain release (owner,
		 * seq). The seq (ARGV[2]) grows with every call, as an owner's
		 * must: one that did not would be answered RWLOCK_STALE. The owner
		 * id is new each run, so a record left by an earlier run
		 * (s:<owner>, kept 10 minutes) is not in the way.
		 */
		static char owner[64];

		snprintf(owner, sizeof(owner), "bench-rtt:%d:%ld", (int) getpid(),
				 (long) time(NULL));
		a1[n1++] = owner;
		a1[n1++] = acq_seq;
		a1[n1++] = "w";
		a1[n1++] = "30000";
		a1[n1++] = "2000";
		a2[n2++] = owner;
		a2[n2++] = rel_seq;
	}
	else
	{
		fprintf(stderr, "unknown mode %s\n", mode);
		return 2;
	}

	/* warm up */
	for (int i = 0; i < 200; i++)
	{
		if (n2)
			next_seqs(&seq, acq_seq, rel_seq);
		freeReplyObject(cmd(c, n1, a1));
		if (n2)
			freeReplyObject(cmd(c, n2, a2));
	}
	if (strcmp(mode, "chain") == 0)
	{
		printf("%.2f\n", chain(c, a1, n1, secs));
		return 0;
	}
	t0 = now();
	do
	{
		for (int i = 0; i < 100; i++)
		{
			redisReply *r;

			if (n2)
				next_seqs(&seq, acq_seq, rel_seq);
			r = cmd(c, n1, a1);

			if (n2 && (r->type != REDIS_REPLY_INTEGER || r->integer < 0))
			{
				fprintf(stderr, "acquire was not granted\n");
				return 1;
			}
			freeReplyObject(r);
			if (n2)
				freeReplyObject(cmd(c, n2, a2));
		}
		n += 100;
		t = now();
	} while (t - t0 < secs);
	printf("%.2f\n", (t - t0) * 1e6 / n);
	redisFree(c);
	return 0;
}
