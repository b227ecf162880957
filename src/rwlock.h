/*-------------------------------------------------------------------------
 *
 * rwlock.h
 *	  Declarations shared by the files of the rwlock extension: distributed
 *	  read/write locks held in Redis, taken and released from SQL.
 *
 * The files, top to bottom; each calls only files below it (every file
 * reads the settings' variables of guc.c):
 *	  functions.c  every SQL entry point, argument checks, _PG_init
 *	  introspect.c the SQL entry points that ask Redis: redis_lock_info,
 *	               redis_connection_info (with functions.c's rw_name_arg);
 *	               redis_lock_stats, from stats.c; redis_locks (holders
 *	               from holdtable.c, waiters from waiters.c) and the
 *	               blockers functions, from deadlock.c
 *	  keeper.c     the background workers (the keeper, a renewer per Redis
 *	               server): renew every session's published holds, release
 *	               those of sessions that exited (release.c), all through
 *	               holdtable.c's interface
 *	  held.c       lock and unlock, stacking, transaction, subtransaction,
 *	               DISCARD ALL and exit callbacks; several names at once,
 *	               all or none
 *	  waiting.c    waiting for a busy lock: wake-ups, timeouts, cancel;
 *	               asks deadlock.c at each wake-up of a wait
 *	  deadlock.c   a wait made visible and its deadlocks ended: lock-wait
 *	               logs, its wait key in Redis (the check-in), when to
 *	               check and check again, the victim's 40P01; blockers for
 *	               redis_blocking_pids
 *	  walk.c       the walk of the wait-for graph from a wait, the cycle
 *	               re-checked, the victim picked and marked
 *	  waiters.c    the waiting sessions of this server in shared memory:
 *	               rows of redis_locks, what the walk checks its own
 *	               server's wait keys against, and the leftovers of waits
 *	               cut off in a stall, which the keeper withdraws
 *	  fanout.c     one call to every member that may answer, and a
 *	               majority's tally of the answers (deadlock.c, walk.c,
 *	               quorum.c)
 *	  release.c    releases owed to Redis: sent and unanswered, to send
 *	               again (a new request each time: a cut-off copy that
 *	               arrives late is stale); settled before a name is taken
 *	               again
 *	  renew.c      when and how a session renews its own leases
 *	  holds.c      the session's table of holds, what the keeper is shown,
 *	               warnings kept for a safe moment
 *	  holdtable.c  the shared table of every session's holds, the one door
 *	               both sides use: sessions publish, change, take out and
 *	               leave holds; the keeper's workers copy what is due, write
 *	               back results, free what is released or moot; rows of
 *	               redis_locks; the renewers' registry
 *	  route.c      which node serves a lock: the one URL, a server, a
 *	               Sentinel-monitored service, a Redis Cluster or a quorum
 *	  quorum.c     quorum mode (experimental): several independent masters
 *	               in rwlock.redis_url; one plain node per URL under the
 *	               logical node, acquisitions and renewals sent to all of
 *	               them at once and counted (a majority, in time), the
 *	               fencing token raised on a majority, members that
 *	               restarted left out for a lease (rw_quorum_attach)
 *	  cluster.c    Redis Cluster: hash slots, the slot map, a connection
 *	               per master, MOVED/ASK/TRYAGAIN/CLUSTERDOWN, renewals
 *	               sent to every master at once; route.c and keeper.c attach it to
 *	               a redis+cluster:// node (rw_cluster_attach), and its
 *	               resolver (ep->resolve) names a node of the cluster when
 *	               redis_conn.c connects the node's own connections
 *	  protocol.c   one C function per Lua script; the owner's request
 *	               sequence that makes a late command a no-op (protocol 3);
 *	               the owner id, and which live backend an owner id is
 *	               (rw_owner_live_pid, records in shared memory)
 *	  scripts.c    the embedded scripts (lua_scripts.c) and EVALSHA/EVAL
 *	  sentinel.c   where a Sentinel-monitored master is now: asks the
 *	               sentinels, each through redis_conn.c on a plain
 *	               endpoint; route.c and keeper.c attach it to a
 *	               redis+sentinel:// endpoint (ep->resolve), which
 *	               redis_conn.c calls when it connects to such a node
 *	  redis_conn.c one connection: socket, hiredis codec, waits through the
 *	               latch, deadlines, interrupts; what a new connection
 *	               checks (ROLE of a Sentinel-named master before AUTH, an
 *	               evicting maxmemory-policy from INFO, the lock channels'
 *	               ACL)
 *	  resolve.c    host names looked up without blocking (getaddrinfo_a)
 *	  errors.c     what a failure means in SQLSTATEs; rw_raise
 *	  tls.c        TLS on that socket (OpenSSL): contexts, handshake,
 *	               reads and writes, what a failure means
 *	  guc.c        the rwlock.* settings; settings refused when the library
 *	               loaded
 *	  stats.c      counters per database in shared memory (redis_lock_stats);
 *	               any file above may count, it calls none of them
 *	  url.c        parsing rwlock.redis_url and a node's spec (guc.c
 *	               validates with it)
 *	  passfile.c   the password file (redis_conn.c authenticates with it)
 *
 *-------------------------------------------------------------------------
 */
#ifndef RWLOCK_H
#define RWLOCK_H

#include "postgres.h"

#include <time.h>
#include <hiredis/hiredis.h>

#include "datatype/timestamp.h"
#include "fmgr.h"
#include "storage/latch.h"

#define RW_PROTOCOL_VERSION "3"
#define RW_NAME_MAX			1024	/* bytes of a lock name */
#define RW_PREFIX_MAX		64		/* bytes of rwlock.key_prefix */
#define RW_URL_MAX			1024	/* bytes of rwlock.redis_url */
#define RW_PATH_MAX			255		/* bytes of a file setting */
/* bytes of a node's spec: the URL and five settings, tab-separated */
#define RW_SPEC_MAX			(RW_URL_MAX + 5 * (RW_PATH_MAX + 1))
#define RW_OWNER_MAX		64		/* bytes of an owner id */
#define RW_INTENT_MS		2000	/* lease of a waiting writer's intent */
#define RW_KEEP_TOKEN_MS	600000	/* the last write token outlives a lock */
#define RW_EXIT_BUDGET_MS	500		/* what backend exit may spend on Redis */
#define RW_QUORUM_MAX		9		/* URLs of a quorum */
#define RW_SENTINEL_RECHECK_MS 1000	/* a connection in use asks the sentinels
										 * again this often (sentinel.c) */
#define RW_SENTINEL_CHECK_BUDGET_MS 500	/* ... spending at most this */

/* What a session holds of a lock; stronger modes compare greater. */
typedef enum RwMode
{
	RW_NONE = 0,
	RW_READ,
	RW_WRITE
} RwMode;

#define RW_NMODES 3

typedef enum RwLevel
{
	RW_SESSION,
	RW_XACT
} RwLevel;

/* What a release leaves the owner holding (release.lua's ARGV[3]). */
typedef enum RwKeep
{
	RW_KEEP_NOTHING,			/* "": let go of everything */
	RW_KEEP_READ,				/* "r": a writer keeps a read lock */
	RW_KEEP_ALL					/* "q": only withdraw a writer's intent */
} RwKeep;

/*
 * Monotonic milliseconds, for every deadline and lease schedule: a step of
 * the wall clock must never make a lease lapse or a wait never end.
 * CLOCK_MONOTONIC is one clock for all processes of the host, so the keeper
 * and the sessions can compare its readings in shared memory.
 */
static inline int64
rw_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A monotonic instant shown as wall-clock time, for the views. */
extern TimestampTz rw_mono_to_timestamp(int64 mono_ms);

/* ---- guc.c ---- */

/* rwlock.tls_verify */
typedef enum RwTlsVerify
{
	RW_TLS_VERIFY_FULL,			/* the certificate's chain and host name */
	RW_TLS_VERIFY_CA,			/* its chain only */
	RW_TLS_VERIFY_NONE			/* nothing: encryption without authentication */
} RwTlsVerify;

extern char *rw_redis_url;
extern char *rw_key_prefix;
extern int	rw_lease_ms;
extern int	rw_connect_timeout_ms;
extern int	rw_command_timeout_ms;
extern char *rw_password_file;
extern int	rw_tls_verify;
extern char *rw_tls_ca_file;
extern char *rw_tls_cert_file;
extern char *rw_tls_key_file;
extern int	rw_wait_replicas;
extern int	rw_wait_replicas_timeout_ms;
extern double rw_quorum_drift;
extern int	rw_quorum_max_lease_ms;
extern uint64 rw_conn_settings_gen;
extern void rw_define_gucs(void);
extern void rw_check_settings(void);

/* ---- url.c ---- */

struct RwError;				/* redis_conn.c's, below */

/* Where a node is and how to connect to it, as parsed from its spec. */
typedef struct RwEndpoint
{
	char	   *url;			/* the spec (url.c): the URL as given,
								 * password included, and the connection
								 * settings in effect; names the node */
	char	   *display;		/* the URL for messages: no password */
	bool		is_unix;
	bool		tls;			/* rediss:// */
	char	   *host;
	int			port;
	char	   *path;
	char	   *user;			/* NULL: AUTH password only */
	char	   *password;		/* NULL: no AUTH, or see password_file */
	int			db;
	char	   *password_file;	/* NULL: none */
	RwTlsVerify tls_verify;
	char	   *tls_ca_file;	/* NULL: the system's CA store */
	char	   *tls_cert_file;	/* NULL: no client certificate */
	char	   *tls_key_file;	/* NULL: the key is in tls_cert_file */
	/* redis+sentinel:// and rediss+sentinel:// (sentinel.c) */
	bool		sentinel;		/* host and port are the master found last */
	char	   *master_name;
	/* redis+cluster:// and rediss+cluster:// (cluster.c) */
	bool		cluster;		/* host and port: a node found last */
	/* the sentinels, or a cluster's seed nodes, as the URL lists them */
	int			nseeds;
	char	  **seed_hosts;
	int		   *seed_ports;
	int			seed_last;		/* the seed that answered last */
	uint64		addr_gen;		/* bumped when the master's address changes */
	int64		resolved_ms;	/* monotonic: when the sentinels last answered */
	/*
	 * finds host and port: rw_sentinel_resolve (set by rw_sentinel_attach)
	 * or cluster.c's (set by rw_cluster_attach)
	 */
	bool		(*resolve) (struct RwEndpoint *ep, int64 deadline,
							struct RwError *err);
	bool		is_sentinel;	/* this endpoint is a sentinel itself */
	/* several URLs: quorum mode (quorum.c); the members' specs */
	int			nquorum;
	char	  **quorum_specs;
} RwEndpoint;

extern bool rw_parse_url(const char *spec, RwEndpoint *ep, char **why);
extern const char *rw_tls_verify_name(RwTlsVerify v);
extern bool rw_check_url(const char *url, char **why);
extern char *rw_current_spec(void);
extern const char *rw_endpoint_where(const RwEndpoint *ep);
extern void rw_endpoint_set_addr(RwEndpoint *ep, const char *host, int port);
extern bool rw_may_see_url(void);

/* ---- passfile.c ---- */

extern bool rw_password_lookup(const RwEndpoint *ep, char **user,
							   char **password, char *why, size_t whylen);
extern void rw_passfile_match(const RwEndpoint *ep, const char *contents,
							  char **user, char **password);

/* ---- redis_conn.c ---- */

/* What went wrong in a Redis exchange. */
typedef enum RwErrKind
{
	RW_OK = 0,
	RW_ERR_CONNECT,				/* could not connect, or SELECT failed */
	RW_ERR_AUTH,				/* Redis refused our credentials */
	RW_ERR_LOST,				/* connection lost while talking */
	RW_ERR_TIMEOUT,				/* rwlock.command_timeout ran out */
	RW_ERR_INTERRUPTED,			/* cancel or terminate cut the wait short */
	RW_ERR_REPLY,				/* Redis answered with an error or nonsense */
	RW_ERR_UNFIT,				/* at connect: a Redis unfit to serve locks
								 * (an evicting maxmemory-policy) */
	RW_ERR_NOPERM,				/* at connect: the Redis user lacks a
								 * permission locks need (lock channels) */
	RW_ERR_UNSERVED,			/* a cluster's redirections (TRYAGAIN,
								 * CLUSTERDOWN, MOVED) outlasted
								 * rwlock.command_timeout: the command did
								 * not run */
} RwErrKind;

typedef struct RwError
{
	RwErrKind	kind;
	bool		maybe_sent;		/* the command may have reached Redis */
	char		msg[512];		/* room for a quorum's reasons (quorum.c) */
} RwError;

/*
 * A reply to a command sent with a tag (rw_append with tag != NULL), read
 * later. reply is NULL when the connection closed before it arrived: the
 * command may or may not have run, or run later still (its bytes in
 * flight), when protocol 3 makes it stale (release.c).
 */
typedef struct RwLate
{
	void	   *tag;
	redisReply *reply;
} RwLate;

/*
 * One connection to a node. ctx is hiredis's codec state only (its output
 * buffer and reply reader); the socket's I/O is redis_conn.c's, through tls
 * when the connection is TLS.
 */
typedef struct RwConn
{
	struct RwNode *node;
	redisContext *ctx;			/* NULL when closed */
	struct RwTls *tls;			/* NULL: plain */
	WaitEventSet *wes;			/* latch, postmaster death, our socket */
	int			sock_pos;		/* position of the socket event in wes */
	uint32		sock_events;	/* what the socket event waits for now */
	bool		is_subscriber;
	bool		asking;			/* cluster.c routed here by an ASK: each
								 * script call goes after an ASKING */
	double		last_rtt_ms;
	uint32		scripts_sent;	/* bit per RwScriptId: its body went out on
								 * this connection (scripts.c) */
	uint64		opens;			/* connections made so far (quorum.c checks
								 * each new one's Redis for a restart) */
	uint64		addr_gen;		/* the node's ep.addr_gen it connected at */
	uint64		failed_call;	/* the call whose connection attempt failed */
	RwError		failed_err;		/* ... and why */
	uint64		cut_call;		/* the call in which a cancel cut a flush of
								 * tagged commands short (rw_flush_tagged) */
	bool		obuf_secret;	/* hiredis's output buffer held a password:
								 * wiped once written out or closed */
	void	  **owed;			/* tags of commands whose replies are due */
	int			nowed;
	int			capowed;
	RwLate	   *late;			/* replies to tagged commands, oldest first */
	int			nlate;
	int			caplate;
} RwConn;

/* The tag of an ASKING sent ahead of a tagged command: its reply is dropped. */
#define RW_TAG_DISCARD ((void *) 1)

extern void rw_call_begin(void);
extern void rw_call_again(void);
extern uint64 rw_call_id(void);
extern void rw_conn_cancellable(bool on);
extern bool rw_conn_cancel_cut(void);
extern bool rw_conn_drain(RwConn *conn, RwError *err);
extern bool rw_conn_pause(long ms);
extern void rw_conn_limit(int64 deadline);
extern int64 rw_conn_tighten(int64 deadline);
extern void rw_conn_restore(int64 cap);
extern bool rw_conn_ensure(RwConn *conn, RwError *err);
extern bool rw_conn_sent_all(RwConn *conn);
extern bool rw_conn_open(RwConn *conn, int64 deadline, RwError *err);
extern bool rw_exchange_longer(RwConn *conn, int nreplies,
							   redisReply **replies, int extra_ms,
							   RwError *err);
extern bool rw_exchange_by(RwConn *conn, int nreplies, redisReply **replies,
						   int64 deadline, RwError *err);
extern void rw_conn_close(RwConn *conn);
extern void rw_append(RwConn *conn, int argc, const char **argv,
					  const size_t *lens, void *tag);
extern bool rw_exchange(RwConn *conn, int nreplies, redisReply **replies,
						RwError *err);
extern bool rw_flush(RwConn *conn, int64 deadline, RwError *err);
extern bool rw_flush_tagged(RwConn *conn, int64 deadline, RwError *err);
extern int	rw_take_late(RwConn *conn, RwLate **late);
extern bool rw_conn_wait_readable(RwConn *conn, long timeout_ms);
extern bool rw_conns_wait_readable(RwConn **conns, int n, long timeout_ms);
extern int	rw_conns_first_readable(RwConn **conns, int n);
extern bool rw_conn_read_pending(RwConn *conn, redisReply **reply, RwError *err);
extern void rw_log_later(const char *fmt,...) pg_attribute_printf(1, 2);
extern void rw_logs_flush(void);

/* ---- resolve.c ---- */
struct gaicb;
struct addrinfo;
extern bool rw_resolve_start(const char *host, const char *port,
							 struct addrinfo **res, struct gaicb **req,
							 RwError *err);
extern int	rw_resolve_poll(struct gaicb *req, struct addrinfo **res,
							RwError *err);
extern void rw_resolve_abandon(struct gaicb *req);

/* ---- errors.c ---- */
extern void rw_error_set(RwError *err, RwErrKind kind, const char *fmt,...) pg_attribute_printf(3, 4);
extern int	rw_error_sqlstate(const RwError *err);
extern void rw_raise(RwConn *conn, const RwError *err) pg_attribute_noreturn();

/* ---- tls.c ---- */
typedef struct RwTls RwTls;

extern RwTls *rw_tls_open(const RwEndpoint *ep, int fd, char *why,
						  size_t whylen);
extern int	rw_tls_handshake(RwTls *tls, uint32 *wants, char *why,
							 size_t whylen);
extern ssize_t rw_tls_read(RwTls *tls, char *buf, size_t len, char *why,
						   size_t whylen);
extern ssize_t rw_tls_write(RwTls *tls, const char *buf, size_t len,
							char *why, size_t whylen);
extern uint32 rw_tls_wait_events(RwTls *tls, uint32 events);
extern bool rw_tls_pending(RwTls *tls);
extern bool rw_tls_heard_from_server(RwTls *tls);
extern void rw_tls_close(RwTls *tls);

/* ---- scripts.c ---- */
typedef enum RwScriptId
{
	RW_SCRIPT_ACQUIRE,
	RW_SCRIPT_RELEASE,
	RW_SCRIPT_RENEW,
	RW_SCRIPT_INFO,
	RW_SCRIPT_FENCE,
	RW_SCRIPT_WAITS,
	RW_SCRIPT_MARK,
	RW_SCRIPT_CHECKIN,
	RW_NSCRIPTS
} RwScriptId;

typedef struct RwScript
{
	const char *name;
	const char *sha1;			/* hex, computed at build time */
	const char *body;
} RwScript;

extern const RwScript rw_scripts[RW_NSCRIPTS];	/* generated */

#define RW_SCRIPT_MAXARGS 14

/* One script call, as EVALSHA; rw_script_run turns it into EVAL if need be. */
typedef struct RwScriptCall
{
	RwScriptId	id;
	int			argc;
	const char *argv[RW_SCRIPT_MAXARGS];
	size_t		lens[RW_SCRIPT_MAXARGS];
	char		numkeys[4];
} RwScriptCall;

extern void rw_script_prepare(RwScriptCall *call, RwScriptId id, int nkeys,
							  const char *const *keys, const size_t *keylens,
							  int nargs, const char *const *args);
extern bool rw_script_run(RwConn *conn, RwScriptCall *calls, int ncalls,
						  redisReply **replies, RwError *err);
extern bool rw_script_run_acked(RwConn *conn, RwScriptCall *calls, int ncalls,
								redisReply **replies, int replicas,
								int *acks, RwError *err);
extern bool rw_script_send(RwConn *conn, RwScriptCall *calls, int ncalls,
						   int replicas, RwError *err);
extern bool rw_script_collect(RwConn *conn, RwScriptCall *calls, int ncalls,
							  redisReply **replies, int replicas, int *acks,
							  RwError *err);
extern void rw_script_append_eval(RwConn *conn, RwScriptCall *call, void *tag);

/* ---- sentinel.c ---- */
extern void rw_sentinel_attach(RwEndpoint *ep);
extern bool rw_sentinel_resolve(RwEndpoint *ep, int64 deadline, RwError *err);

/* ---- protocol.c ---- */

/* The Redis keys of one lock; all share one cluster hash slot. */
#define RW_NKEYS 2
typedef struct RwKeys
{
	char	   *key[RW_NKEYS];	/* the hash, the queue of waiting writers */
	size_t		len[RW_NKEYS];
	char	   *channel;		/* wake-ups are published here */
	size_t		channel_len;
} RwKeys;

typedef enum RwAcquireStatus
{
	RW_ACQ_FAILED,				/* Redis could not be asked: see the error */
	RW_GRANTED,
	RW_BUSY,
	RW_UPGRADE_CONFLICT,
	RW_GRANTED_UNACKED,			/* granted, but fewer replicas than
								 * rwlock.wait_replicas acknowledged it */
	RW_READ_LOST,				/* an upgrade: Redis has no live read lock
								 * of ours any more; nothing changed */
} RwAcquireStatus;

typedef struct RwLockInfo
{
	char		state[8];		/* free, read, write */
	int64		token;
	char	   *writer;			/* NULL if none */
	int64		writer_ms;
	int			nreaders;
	char	  **readers;
	int64	   *reader_ms;
	int			nwaiting;
	char	  **waiting;
	int64	   *waiting_ms;
} RwLockInfo;

/* One acquire (or fence) call's arguments, from send to collect. */
typedef struct RwAcquireCall
{
	RwScriptCall call;
	char		seq[24];		/* the owner's request sequence number */
	char		lease[24];		/* fence.lua: the token */
	char		intent[16];
} RwAcquireCall;

struct pg_atomic_uint64;
extern void rw_proto_seq_share(struct pg_atomic_uint64 *counters);
extern uint64 rw_proto_seq_next(void);
extern uint64 rw_proto_seq_now(void);
extern bool rw_proto_is_stale(const char *msg);
extern const char *rw_owner_id(void);
extern int	rw_owner_live_pid(const char *owner);
extern Size rw_proto_owners_size(int nprocs);
extern void rw_proto_owners_share(void *mem, int nprocs, bool init);
extern void rw_build_keys(const char *prefix, const char *name, RwKeys *keys,
						  MemoryContext cxt);
extern void rw_copy_keys(const RwKeys *from, RwKeys *to, MemoryContext cxt);
extern void rw_free_keys(RwKeys *keys);
extern RwAcquireStatus rw_proto_acquire(RwConn *conn, const RwKeys *keys,
										RwMode mode, RwMode held_mode,
										int lease_ms, int intent_ms,
										int64 *result, char **other,
										int *acks, RwError *err);
extern bool rw_proto_acquire_send(RwConn *conn, const RwKeys *keys,
								  RwMode mode, RwMode held_mode, int lease_ms,
								  int intent_ms, RwAcquireCall *c, RwError *err);
extern RwAcquireStatus rw_proto_acquire_collect(RwConn *conn, RwAcquireCall *c,
												int64 *result, char **other,
												int *acks, RwError *err);
/* First tries of several locks on one connection, pipelined (held.c) */
typedef struct RwTryBatch
{
	int			n;
	int			replicas;		/* a WAIT for this many follows the calls */
	RwAcquireCall *c;			/* each call's argument buffers */
	RwScriptCall *calls;
} RwTryBatch;

extern bool rw_proto_acquire_many_send(RwConn *conn, RwKeys *const *keys,
									   int n, RwMode mode, int lease_ms,
									   int replicas, RwTryBatch *b,
									   RwError *err);
extern bool rw_proto_acquire_many_collect(RwConn *conn, RwTryBatch *b,
										  RwAcquireStatus *status,
										  int64 *result, int *acks,
										  RwError *err);
extern bool rw_proto_acquire_many(RwConn *conn, RwKeys *const *keys, int n,
								  RwMode mode, int lease_ms,
								  RwAcquireStatus *status, int64 *result,
								  int *acks, RwError *err);
extern bool rw_proto_fence_many_send(RwConn *conn, RwKeys *const *keys,
									 const int64 *tokens, int n,
									 RwTryBatch *b, RwError *err);
extern bool rw_proto_fence_many_collect(RwConn *conn, RwTryBatch *b,
										int *held, RwError *err);
extern bool rw_proto_fence_send(RwConn *conn, const RwKeys *keys, int64 token,
								RwAcquireCall *c, RwError *err);
extern int	rw_proto_collect_held(RwConn *conn, RwAcquireCall *c, RwError *err);
extern bool rw_proto_release_send(RwConn *conn, const RwKeys *keys, RwKeep keep,
								  int lease_ms, RwAcquireCall *c, RwError *err);
extern int	rw_proto_release_as(RwConn *conn, const RwKeys *keys,
								const char *owner, uint64 seq, RwKeep keep,
								RwError *err);
extern uint64 rw_proto_seq_next_of(int procno);
extern int	rw_proto_release(RwConn *conn, const RwKeys *keys, RwKeep keep,
							 int lease_ms, RwError *err);
extern void rw_proto_release_append(RwConn *conn, const RwKeys *keys,
									RwKeep keep, int lease_ms, void *tag);
extern int	rw_proto_release_result(redisReply *r, RwError *err);
extern bool rw_proto_is_redirect(const char *msg);
/* Renewals sent and not yet collected (rw_proto_renew_send). */
typedef struct RwRenewCall
{
	int			n;
	RwScriptCall *calls;
	char	   *leases;
	char	   *seqs;
} RwRenewCall;

extern bool rw_proto_renew_send(RwConn *conn, RwKeys **keys,
								const char *const *owners, const uint64 *seqs,
								const int *lease_ms, int n, RwRenewCall *rc,
								RwError *err);
extern bool rw_proto_renew_collect(RwConn *conn, RwRenewCall *rc, int *held,
								   char **why, RwError *err);
extern bool rw_proto_renew(RwConn *conn, RwKeys **keys,
						   const char *const *owners, const uint64 *seqs,
						   const int *lease_ms, int n, int *held, char **why,
						   RwError *err);
extern bool rw_proto_info(RwConn *conn, const RwKeys *keys, RwLockInfo *info,
						  RwError *err);
extern bool rw_proto_info_send(RwConn *conn, const RwKeys *keys,
							   RwScriptCall *call, RwError *err);
extern bool rw_proto_info_collect(RwConn *conn, RwScriptCall *call,
								  RwLockInfo *info, RwError *err);

/* ---- stats.c ---- */

/* What redis_lock_stats counts; the order of its columns. */
typedef enum RwStat
{
	RW_STAT_ACQ_WRITE_SESSION,	/* granted lock calls, stacked ones too */
	RW_STAT_ACQ_WRITE_XACT,
	RW_STAT_ACQ_READ_SESSION,
	RW_STAT_ACQ_READ_XACT,
	RW_STAT_TRY_FAILED,			/* try forms that returned false */
	RW_STAT_WAITS,				/* acquisitions that had to wait */
	RW_STAT_WAIT_MS,			/* time spent in those waits */
	RW_STAT_WAIT_MAX_MS,		/* the longest of them */
	RW_STAT_TIMEOUTS,			/* lock_timeout ran out (55P03) */
	RW_STAT_CANCELS,			/* waits cancelled, statement_timeout */
	RW_STAT_DEADLOCKS,			/* 40P01 for a deadlock */
	RW_STAT_UPGRADE_CONFLICTS,	/* 40P01 for two readers upgrading */
	RW_STAT_HOLDS_LOST,			/* holds found lost (lease, Redis data) */
	RW_STAT_ERR_CONNECTION,		/* errors raised: class 08 */
	RW_STAT_ERR_PERMISSION,		/* 42501 */
	RW_STAT_ERR_OTHER,			/* any other Redis error */
	RW_STAT_RENEWALS,			/* leases renewed (sessions and keeper) */
	RW_STAT_RECONNECTS,			/* connections made after the first */
	RW_STAT_FAILOVERS,			/* a new master followed */
	RW_NSTATS
} RwStat;

typedef struct RwStatsCopy
{
	Oid			dboid;
	uint64		counts[RW_NSTATS];
	TimestampTz reset_at;
} RwStatsCopy;

extern void rw_stats_init(void);
extern void rw_stats_attach(void);
extern void rw_stat_add(RwStat what, uint64 n);
extern void rw_stat_max(RwStat what, uint64 v);
extern void rw_stat_error(int sqlerrcode);
extern int	rw_stats_read(RwStatsCopy **rows);
extern bool rw_stats_reset(void);

/* ---- holdtable.c ---- */

#define RW_RENEWERS_MAX	32		/* servers renewed each by a worker of its own */

/* The session's side. */
extern void rw_holdtable_init(void);
extern bool rw_holdtable_renews(int slot, int lease_ms);
extern int	rw_holdtable_publish(int slot, const char *name, const char *url,
								 const char *key, const char *owner, int64 token,
								 TimestampTz acquired, int64 renewed_ms,
								 int lease_ms, bool *full);
extern int	rw_holdtable_max_holds(void);
extern void rw_holdtable_unpublish(int slot);
extern void rw_holdtable_exiting(int slot);
extern void rw_holdtable_orphan(int slot);
extern void rw_holdtable_set_modes(int slot, RwMode session_mode, RwMode xact_mode);
extern bool rw_holdtable_state(int slot, int64 *renewed_ms);
extern void rw_holdtable_renewed(int slot, int64 renewed_ms, bool lost);

/* The keeper's side: a hold to renew or release, copied out of the table. */
typedef struct RwDueHold
{
	int			slot;
	uint64		gen;			/* the slot's generation when copied */
	int			pid;
	int			lease_ms;
	bool		release;		/* release it (its backend exited), not renew */
	bool		live;			/* its backend was alive when copied */
	uint64		seq;			/* the owner's request sequence to send */
	char	   *owner;
	char	   *url;
	RwKeys		keys;
} RwDueHold;

typedef enum RwMoot
{
	RW_MOOT_NOT,				/* to release */
	RW_MOOT_CHANGED,			/* the slot changed: not ours now */
	RW_MOOT_LOST,				/* found lost: freed */
	RW_MOOT_LAPSED				/* its lease certainly ran out: freed */
} RwMoot;

typedef enum RwRenewal
{
	RW_RENEWAL_DONE,
	RW_RENEWAL_LOST,
	RW_RENEWAL_RETRY,
	RW_RENEWAL_SKIP
} RwRenewal;

extern int	rw_holdtable_nslots(void);
extern int	rw_holdtable_due(int renewer, int64 now, const int64 *retry_at,
							 const uint64 *retry_gen, int max,
							 void (*seen) (const char *url, int64 now),
							 RwDueHold **out, int64 *next, bool *had_holds);
extern bool rw_holdtable_free(const RwDueHold *w, char *name);
extern RwMoot rw_holdtable_moot(const RwDueHold *w, int64 now, char *name,
								int64 *idle_ms);
extern bool rw_holdtable_release_failed(const RwDueHold *w, char *name);
extern void rw_holdtable_tried(const RwDueHold *work, int n, int64 now);
extern void rw_holdtable_renewals(const RwDueHold *work, int n, const int *held,
								  int64 sent, int64 now, const char *where,
								  RwRenewal *outcome);
extern int	rw_holdtable_assign(int64 now, bool may_start, int *start);
extern void rw_holdtable_renewer_failed(int r);
extern void rw_holdtable_keeper_attach(void);
extern bool rw_holdtable_renewer_attach(int r, char *url);
extern void rw_holdtable_beat(int renewer, int64 now);
extern bool rw_holdtable_renewer_leave(int r);
extern void rw_holdtable_detach(int renewer);

/* A published hold, copied for redis_locks (rw_holdtable_rows). */
typedef struct RwKeeperRow
{
	int			pid;
	bool		live;			/* its backend is alive (else pid is stale) */
	bool		releasing;		/* its backend exited or is exiting: the
								 * hold is being released, by it or the
								 * keeper */
	Oid			datid;
	uint8		modes[2];		/* strongest RwMode per RwLevel */
	bool		lost;
	int64		token;
	TimestampTz acquired;
	int64		lease_end_ms;	/* monotonic */
	char	   *owner;
	char	   *name;
} RwKeeperRow;

extern int	rw_holdtable_rows(RwKeeperRow **rows);

/* ---- keeper.c ---- */
extern void rw_keeper_init(void);

/* ---- route.c ---- */

/*
 * A Redis server this session talks to. Each hold remembers its node, so a
 * change of rwlock.redis_url never strands a hold made on the old server.
 */
typedef struct RwNode
{
	RwEndpoint	ep;
	RwConn		cmd;			/* lock commands */
	RwConn		sub;			/* pub/sub wake-ups, opened when first needed */
	int			nholds;			/* holds that live on this node */
	int			nowed;			/* releases owed to it (release.c) */
	int			pins;			/* walks under way that must not see it
								 * freed (release.c) */
	int64		renew_retry_ms; /* no renewal before this after a failure */
	struct RwCluster *cluster;	/* a redis+cluster:// node's (cluster.c) */
	struct RwQuorum *quorum;	/* a quorum's (quorum.c) */
	struct RwNode *next;
} RwNode;

extern RwNode *rw_current_node(void);
extern RwNode *rw_first_node(void);
extern void rw_node_forget_if_unused(RwNode *node);

/* ---- cluster.c ---- */
extern int	rw_cluster_key_slot(const char *key, size_t len);
extern void rw_cluster_attach(RwNode *node);
extern void rw_cluster_detach(RwNode *node);
extern RwNode *rw_cluster_members(RwNode *node);
extern RwConn *rw_cluster_cmd(RwNode *node, const RwKeys *keys);
extern RwNode *rw_cluster_node_of(RwNode *node, const RwKeys *keys);
extern void rw_cluster_note_redirect(RwNode *node, const char *msg);
extern bool rw_cluster_redirected(RwNode *node, RwError *err, int64 started);
extern bool rw_cluster_renew(RwNode *node, RwKeys **keys,
							 const char *const *owners, const uint64 *seqs,
							 const int *lease_ms, int n, int *held,
							 RwError *err);

/* ---- quorum.c ---- */

/* What one member of a quorum answered to an acquisition. */
typedef struct RwVote
{
	RwAcquireStatus status;		/* RW_ACQ_FAILED: not asked, or failed */
	int64		result;			/* as rw_proto_acquire's */
	char	   *other;
	RwError		err;			/* RW_ACQ_FAILED: why; maybe_sent */
	bool		sent;
	bool		counts;			/* toward a majority (not restarted lately) */
} RwVote;

extern void rw_quorum_attach(RwNode *node);
extern void rw_quorum_detach(RwNode *node);
extern int	rw_quorum_size(RwNode *node);
extern RwNode *rw_quorum_member(RwNode *node, int i);
extern int	rw_quorum_majority(RwNode *node);
extern RwNode *rw_node_members(RwNode *node);
extern int	rw_quorum_lease(RwNode *node);
extern int64 rw_lease_drift_ms(int lease_ms);
extern bool rw_quorum_may_ask(RwNode *node, int i);
extern bool rw_quorum_may_ask_round(RwNode *node, int i);
extern void rw_quorum_failed(RwNode *node, int i, const RwError *err);
extern int64 rw_quorum_sending(RwNode *node, bool subscribers, int *order,
								int64 *until);
extern bool rw_quorum_may_send(RwNode *node, int i, int64 until, RwError *err);
extern int64 rw_quorum_reading(void);
extern bool rw_quorum_counts(RwNode *node, int i, const char **run_id);
extern bool rw_quorum_info(RwNode *node, const RwKeys *keys, RwLockInfo *info,
						   RwError *err);
extern RwAcquireStatus rw_quorum_acquire(RwNode *node, const RwKeys *keys,
										 RwMode mode, RwMode held_mode,
										 int intent_ms, const bool *ask,
										 int64 send_until,
										 RwVote *votes, int64 *result,
										 char **other, bool *split,
										 RwError *err);
extern void rw_quorum_acquire_many(RwNode *node, RwKeys *const *keys, int n,
								   RwMode mode, const bool *ask,
								   int64 send_until, RwAcquireStatus *status,
								   int64 *result, bool *owes, RwError *ierr);
extern bool rw_quorum_renew(RwNode *node, RwKeys **keys,
							const char *const *owners, const uint64 *seqs,
							const int *lease_ms, int n, int *held,
							RwError *err);

/* ---- holds.c ---- */

/* One name this session holds: counts per level and mode. */
typedef struct RwHeld
{
	char		name[RW_NAME_MAX + 1];	/* hash key */
	int			count[2][RW_NMODES];	/* [RwLevel][RwMode] */
	RwMode	   *stack;			/* modes of session holds, oldest first */
	int			stack_len;
	int			stack_cap;
	uint64		end_gen;		/* held.c: released at this transaction end */
	RwMode		redis_mode;		/* what Redis has for this session */
	int64		token;
	TimestampTz acquired;
	int64		renewed_ms;		/* monotonic: when the lease last started */
	int			lease_ms;
	bool		lost;
	int			slot;			/* in the keeper's table, or -1 */
	RwNode	   *node;
	RwKeys		keys;
	MemoryContext cxt;			/* keys and stack */
} RwHeld;

/* A row of redis_held_locks */
typedef struct RwHeldRow
{
	char	   *name;
	RwMode		mode;
	RwLevel		level;
	int			depth;
	int64		token;
	TimestampTz acquired;
	bool		lost;
} RwHeldRow;

extern RwHeld *rw_holds_find(const char *name);
extern RwHeld *rw_holds_enter(const char *name, RwNode *node);
extern void rw_holds_reserve(RwHeld *h);
extern void rw_holds_mark_lost(RwHeld *h);
extern void rw_holds_forget(RwHeld *h);
extern void rw_holds_sweep(void);
extern int	rw_holds_count(void);
extern RwHeld **rw_holds_list(int *n);
extern RwMode rw_level_mode(RwHeld *h, RwLevel level);
extern RwMode rw_wanted_mode(RwHeld *h);
extern bool rw_holds_granted(RwHeld *h, RwMode mode, int64 token,
							 int64 since);
extern void rw_holds_refresh(RwHeld *h);
extern void rw_holds_publish_modes(RwHeld *h);
extern void rw_holds_unpublish(RwHeld *h);
extern void rw_holds_exiting(RwHeld *h);
extern void rw_holds_exited(RwHeld *h);
extern int	rw_held_rows(RwHeldRow **rows);
extern void rw_note_lost(const char *name, const char *detail);
extern void rw_note_warning(int sqlstate, const char *msg, const char *detail);
extern void rw_notes_flush(void);

/* ---- renew.c ---- */
extern void rw_renew_scheduled(int64 renewed_ms, int lease_ms);
extern int	rw_renew_due(bool all, int *nlost);

/* ---- release.c ---- */
extern int	rw_release_now(RwNode *node, const char *name, const RwKeys *keys,
						   RwKeep keep, int lease_ms, RwError *err);
extern void rw_release_later(RwNode *node, const char *name,
							 const RwKeys *keys, RwKeep keep, int lease_ms);
extern void rw_release_owe(RwNode *node, int ix, const char *name,
						   const RwKeys *keys, RwKeep keep, int lease_ms);
extern void rw_release_flush(void);
extern void rw_release_send_owed(RwNode *node);
extern void rw_release_granted(RwNode *node, const char *name);
extern bool rw_release_settle_name(RwNode *node, const char *name, RwError *err);
extern bool rw_release_settle_member(RwNode *node, int ix, const char *name,
									 RwError *err);
extern void rw_release_read_answers(void);
extern bool rw_release_await(RwError *err);
extern bool rw_release_owed_name(RwNode *node, const char *name);
extern bool rw_release_found_lost(RwNode *node, const char *name);
extern void rw_release_at_exit(void);
extern bool rw_release_went_out(RwNode *node, const char *name);
extern bool rw_release_as(RwNode *node, const RwKeys *keys, const char *owner,
						  uint64 seq, RwKeep keep, RwError *err);
extern void rw_note_release_failed(const char *name, const RwError *err);

/* ---- waiting.c ---- */
extern int64 rw_wait_cap(long timeout_ms, int64 deadline);
extern bool rw_wait_acquire(RwNode *node, const RwKeys *keys, const char *name,
							RwMode mode, RwMode held_mode, long timeout_ms,
							int64 started, bool timeout_is_error,
							int64 *token, int64 *since, bool *lost);
extern void rw_wait_done(void);
extern void rw_abandon_wait(void);

/* ---- deadlock.c ---- */

/* A waiting session, copied for redis_locks (rw_deadlock_waiters). */
typedef struct RwWaiterRow
{
	int			pid;
	Oid			datid;
	RwMode		mode;
	RwLevel		level;
	TimestampTz waitstart;
	char	   *owner;
	char	   *name;
} RwWaiterRow;

extern void rw_deadlock_init(void);
extern void rw_deadlock_set_level(RwLevel level);
extern bool rw_deadlock_tick(RwNode *node, const RwKeys *keys,
							 const char *name, RwMode mode, int64 *sleep_ms);
extern const char *rw_deadlock_wait_end(bool granted);
extern bool rw_deadlock_drop_key_as(RwNode *node, const char *wait_key,
									RwError *err);
extern void rw_deadlock_report(void) pg_attribute_noreturn();
extern int	rw_deadlock_waiters(RwWaiterRow **rows);
extern bool rw_deadlock_blockers(int pid, char ***owners, int *nowners);
extern int	rw_owner_local_pid(const char *owner);

/* ---- waiters.c ---- */
extern void rw_waiters_publish(RwMode mode, RwLevel level, TimestampTz since,
							   const char *key, const char *name);
extern void rw_waiters_unpublish(void);
extern bool rw_waiters_waits(const char *owner, const char *key);
extern bool rw_waiters_confirms(const char *owner, const char *key);
extern char rw_waiters_local_mode(const char *owner, const char *key);
extern bool rw_waiters_find(int pid, char **key, char **owner, char *mode);
extern void rw_waiters_leave_behind(const char *url, const char *wait_key,
									bool intent);
extern void rw_waiters_take_back(void);
extern void rw_holdtable_wake_keeper(void);

/* A cut-off wait's leftovers, owed like a release (the keeper sends it). */
typedef struct RwLeftover
{
	int			procno;			/* the waiter's PGPROC: its request sequence */
	uint64		gen;			/* the entry's, when copied */
	bool		intent;			/* its intent or mark is to be withdrawn */
	char	   *owner;
	char	   *key;			/* the lock's hash key */
	char	   *url;			/* the node's spec */
	char	   *wait_key;
} RwLeftover;

extern int	rw_waiters_leftovers(RwLeftover **out);
extern void rw_waiters_leftover_done(int procno, uint64 gen);
extern uint64 rw_waiters_leftover_seq(int procno, uint64 gen);

/* ---- walk.c ---- */
typedef enum RwWalkResult
{
	RW_WALK_NO_CYCLE,			/* complete: no cycle through the waiter (or
								 * one found and its victim marked) */
	RW_WALK_INCOMPLETE,			/* something could not be said: again */
	RW_WALK_VICTIM				/* the waiter is a cycle's victim */
} RwWalkResult;

typedef struct RwWalkFrom
{
	RwNode	   *node;			/* the node the waiter waits on */
	const char *value;			/* its wait key's value */
	char		mode;			/* 'r' or 'w' */
	const char *lock_key;		/* the lock's hash key */
	int64		until;			/* the walk ends by then, with a gap */
} RwWalkFrom;

extern RwWalkResult rw_walk(const RwWalkFrom *from, uint32 *seen,
							bool *foreign, char **cycle, char ***first,
							int *nfirst);
extern bool rw_walk_confirming(void);
extern char *rw_wait_key_of(const char *owner);
extern bool rw_walk_blockers(RwNode *node, const char *key,
							 const char *owner, char mode, char ***out,
							 int *nout);

/* ---- fanout.c ---- */
typedef struct RwFan
{
	int			n;				/* connections asked */
	int			size;			/* members there are (1 but in a quorum) */
	int			need;			/* answers that must agree */
	int			missing;		/* members that did not answer */
	bool		version;		/* one answered RWLOCK_VERSION */
	redisReply *r[RW_QUORUM_MAX];	/* NULL: failed or an error */
} RwFan;

typedef struct RwTallyItem
{
	char	   *str;
	int			count;			/* members that listed it */
	int64		ms[RW_QUORUM_MAX];	/* the time each gave */
} RwTallyItem;

typedef struct RwTally
{
	int			n;
	int			room;
	RwTallyItem *items;
} RwTally;

extern void rw_fan_keys_of(const char *key, RwKeys *keys);
extern int	rw_fan_conns(RwNode *node, const char *key, RwConn **conns,
						 int *member);
extern void rw_fan_failed(RwNode *node, RwConn *conn, int member,
						  RwError *err);
extern void rw_fan_script(RwFan *f, RwNode *node, RwScriptId id, int nkeys,
						  const char *const *keys, const size_t *klens,
						  int nargs, const char *const *args);
extern void rw_fan_free(RwFan *f);
extern bool rw_fan_undecided(const RwFan *f, int count);
extern void rw_tally_init(RwTally *t);
extern void rw_tally_add(RwTally *t, const char *str, size_t len, int64 ms);
extern int	rw_tally_agreed(RwTally *t, int need, char ***out, int64 **ms_out);

/* ---- functions.c ---- */
extern void rw_name_arg(FunctionCallInfo fcinfo, char *buf);

/* ---- held.c ---- */
extern void rw_held_init(void);
extern void rw_held_install_hooks(void);
extern void rw_operation_begin(void);
extern void rw_operation_end(void);
extern bool rw_lock(const char *name, RwMode mode, RwLevel level,
					long wait_ms, bool is_try, int64 *token);
extern bool rw_lock_many(const char *const *names, int n, RwMode mode,
						 RwLevel level, long wait_ms, bool is_try,
						 int64 *tokens);
extern bool rw_unlock(const char *name, RwMode mode);
extern void rw_unlock_many(const char *const *names, int n, RwMode mode,
						   bool *released);
extern int	rw_unlock_all(bool await);

#endif							/* RWLOCK_H */
