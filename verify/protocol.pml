/*
 * protocol.pml: the rwlock protocol (lua/*.lua, docs/protocol.md) and its
 * clients (src/waiting.c, src/release.c, src/renew.c) as a SPIN model.
 *
 * Run it with verify/spin.sh, which also says what each configuration
 * (the -D flags below) is expected to show.
 *
 * What is modelled
 *
 *   One lock: the hash P:{E} with the fields the scripts keep (w, f, r:<o>,
 *   n, rm, i:<o>, qe, rt, rw, z, s:<o>) and the queue key P:{E}:q with its
 *   own TTL.  Each script (acquire, release, renew) is one atomic step, as
 *   Redis runs it; the inlines below follow the Lua line by line, field by
 *   field.
 *
 *   Protocol 3's request order (docs/protocol.md 4.1): each client keeps a
 *   request counter; every acquire and release it sends carries the next
 *   value (seq, ARGV[3]); the hash keeps s:<o>, the newest seq it ran of
 *   each owner.  An acquire or release whose seq is not above s:<o> is
 *   stale (RWLOCK_STALE) and changes nothing; any other runs and records
 *   its seq whatever it answers, a release even where the owner held
 *   nothing (it makes the hash).  A renewal carries the counter as it is,
 *   is stale when s:<o> is above it, answers 0 without an s:<o>, and
 *   records nothing.  The record lives with the hash: the keep expiry, a
 *   restart, an eviction or a failover loses it, as in Redis (not a
 *   writer's lease: verify/FINDINGS.md F5, fixed); so does acquire.lua's
 *   pruning (PRUNES: the
 *   s: field of an owner with no other field goes, at any moment, as when
 *   a new owner comes to a hash of 48 fields or more).
 *
 *   Time: a discrete clock.  Every time field is kept relative to now, as
 *   a "tval": 0 the field is absent, 1 present but lapsed (<= now), k+1
 *   k ticks left.  A tick lowers every tval >= 2 by one (on the master and
 *   on the replica alike).  LEASE, MARK (the waiter's mark, RW_INTENT_MS)
 *   and TURN (READER_TURN_MS) are ticks, in the protocol's order:
 *   TURN < MARK <= LEASE.  A writer's lease is a time of its own (wl:
 *   in the scripts, its token's time plus LEASE, or field we), not the
 *   hash's TTL: grants and renewals only raise the TTL, so the hash, and
 *   every record in it, outlives the lease.  A writer whose lease has
 *   ended holds nothing: its w stays until a general path of acquire or
 *   release removes it (release.lua still answers 1 to that writer while
 *   w names it), renew.lua answers it 0.  (OLD_WRITER_TTL, a mutant: the
 *   old rule, the lease is the hash's TTL and the whole hash goes with it;
 *   the queue key is separate and lives until its own TTL, qe.)
 *
 *   Abstracted: the field x and the keep TTL (600 s, far beyond a lease):
 *   a hash in which nothing is live any more (no writer, or one whose
 *   lease has ended) may expire at any moment (an over-approximation: Redis waits keep longer).  The
 *   version field v (always 3) and the take-over of protocol 2 hashes.
 *   Upgrades (u) and downgrades (keep "r"): the clients here hold nothing
 *   when they acquire, and say so with mode "r" or "w" (ARGV[3]; not "u")
 *   as the extension does.
 *   Stacking (the client's own counts) and the try forms without a wait
 *   (mark 0).  Seqs are kept as ranks (normseq): only their order matters.
 *
 *   Tokens: Redis's TIME in microseconds is later at every script call
 *   than at the one before (the clock never steps back: the assumption of
 *   docs/protocol.md 11), so a new write token max(f + 1, TIME) is larger
 *   than every token issued before.  The model keeps tokens as ranks
 *   among the ones still referenced (f on the master, f on the replica,
 *   the largest token returned to a writer, the largest issued).
 *
 *   Clients (N of them, each an owner id): IDLE -> acquire (read or
 *   write, with a mark: a waiting acquisition) -> granted: HOLD, with a
 *   belief of holding for LEASE ticks by its own clock, renewed by each
 *   renewal answered 1 | busy with hint h: SLEEP for min(h, MARK/2) ticks
 *   (waiting.c: never past the hint, never letting the mark lapse) or
 *   until a message on its channel (a reader on :c, a writer on
 *   :c:<owner>), then try again | give up: a writer withdraws its intent
 *   (release keep "q", sent without waiting for the answer).  HOLD ->
 *   renew | release -> IDLE.  A command whose connection drops (budget
 *   DROPS) may or may not have run; the client does not know: a failed
 *   acquisition or release owes the release (keep ""), and every owed
 *   release is completed before the client acquires again (release.c).
 *   A failed renewal changes nothing in the client's belief, which ends by
 *   its own clock.
 *
 *   Faults, each bounded: DROPS dropped connections; FAILOVERS failovers
 *   to a replica that missed the writes since it last synced (the replica
 *   syncs at any moment: it may miss any number of the last writes);
 *   RESTARTS restarts that lose the data set; EVICTIONS of the hash or of
 *   the queue key; LOSTMSG wake-up messages lost (the subscriber's
 *   connection broke); LATE requests delivered late: any acquire, release,
 *   withdrawal or renewal, cut off (to its client, a dropped connection)
 *   but still in flight, runs at any later step, after any of the other
 *   clients' and the same client's later requests (a proxy, a partition
 *   that heals, TCP retransmission: on any connection; no client kills
 *   one).  With DUPS, a request that ran and was answered may also be
 *   still in flight, and run a second time later (duplicated).  One
 *   request in flight at a time, LATE in all.  SCRIPT FLUSH is not a
 *   step of its own: EVALSHA answers NOSCRIPT without running anything and
 *   the client sends the same call as EVAL (releases at commit go as EVAL
 *   from the start), so a flush is either invisible or a dropped
 *   connection.
 *
 * Properties (asserted after every step; see spin.sh for which faults
 * each configuration admits)
 *
 *   P1 exclusion: among clients that believe they hold (HOLD, and their
 *      own clock says the lease has time left) never two writers, nor a
 *      writer and a reader.
 *   P2 tokens: every write grant a client receives carries a token larger
 *      than every write token any client received before.
 *   P3 no lost wake-up: a sleeping waiter that has no message pending is
 *      never in a state where its try would be granted unless its sleep
 *      ends now (it sleeps no longer than the hint while the lock is free
 *      for it).  Not asserted for a sleep during which a fault lost data
 *      or a message: then the hint is all there is, by design.
 *   P4 a released lock is free: a release answered by Redis leaves no
 *      record of the client's hold, and a client that holds nothing and
 *      owes nothing has no live hold in Redis.  Save a "phantom": a hold
 *      made by a late request that ran after Redis lost its owner's record
 *      (the hash went: keep, a restart, an eviction, a failover; or the
 *      record was pruned), which no record can stop (docs/protocol.md
 *      4.1).  With NO_PHANTOMS none is admitted, and keep never runs out
 *      while a request is in flight (every request arrives within keep):
 *      verify/FINDINGS.md F5.  A hold is live: a w whose lease has ended
 *      is none.
 *   P5 a client's own newest request (acquire, release, renewal) is never
 *      answered RWLOCK_STALE.
 */

#ifndef N
#define N 3
#endif
#ifndef LEASE
#define LEASE 3
#endif
#ifndef MARK
#define MARK 2
#endif
#ifndef TURN
#define TURN 1
#endif
#define CAP (MARK / 2)			/* a waiter re-tries every half mark */
#ifndef DROPS
#define DROPS 0
#endif
#ifndef FAILOVERS
#define FAILOVERS 0
#endif
#ifndef RESTARTS
#define RESTARTS 0
#endif
#ifndef EVICTIONS
#define EVICTIONS 0
#endif
#ifndef LOSTMSG
#define LOSTMSG 0
#endif
#ifndef LATE
#define LATE 0
#endif
#ifndef PRUNES
#define PRUNES 0
#endif
#ifndef ACQUIRES
#define ACQUIRES 255			/* acquisitions per client (bounds a run) */
#endif

#if LATE > 0
#define LATEC late_c
#define LATEK late_k
#define LATES late_s
#else
#define LATEC NONE
#define LATEK 0
#define LATES 0
#endif

#ifdef MUT_NO_SETTLE
#define MUT_NO_SETTLE_ON 1
#else
#define MUT_NO_SETTLE_ON 0
#endif

#define NONE 255
#define R 1
#define W 2
#define IDLE 0
#define SLEEP 1
#define HOLD 2
#define NEWTOK 15
#define LIVE(v) ((v) >= 2)
#define TV(k) ((k) + 1)			/* a time k ticks from now */
#define STALE 2					/* res: RWLOCK_STALE, nothing changed */
#define SEQMAX 8				/* seq ranks stay below */

typedef Lock {
	bool	ex;					/* the hash exists */
	byte	w;					/* field w: the writer, or NONE */
	byte	wl;					/* the writer's lease end while w is there
								 * (tval; 1: ended, w holds nothing) */
	byte	f;					/* field f: last write token (rank), 0 absent */
	byte	r[N];				/* fields r:<o> */
	byte	n;					/* field n */
	byte	rm;					/* field rm */
	byte	in[N];				/* fields i:<o> */
	byte	qe;
	byte	rt;
	byte	rw;
	byte	z;
	byte	q[N];				/* the queue key: members, by score */
	byte	qn;
	byte	qt;					/* the queue key's TTL (tval) */
	byte	s[N];				/* fields s:<o>: the newest seq run (rank), 0 absent */
};

Lock	st;						/* the master */
#if FAILOVERS > 0
Lock	snap;					/* the replica: the master as it last synced */
#endif
hidden Lock sc;				/* scratch: a try that is only looked at */

/* The clients */
byte	pc[N];					/* IDLE, SLEEP, HOLD */
byte	md[N];					/* R or W: what it waits for or holds */
byte	bl[N];					/* HOLD: ticks its own clock leaves the lease */
byte	sl[N];					/* SLEEP: ticks left of the sleep */
bool	msg[N];					/* a wake-up message is pending */
bool	taint[N];				/* this sleep saw a fault that loses wake-ups */
bool	owed[N];				/* a release (keep "") is owed */
byte	sq[N];					/* the owner's request counter: the seq of its
								 * newest acquire or release (rank) */
bool	lost[N];				/* ghost: Redis lost the record s:<o> of the
								 * newest request of o's that it ran */
bool	phantom[N];				/* ghost: a late request of o's ran after its
								 * record was lost: it may hold what o does
								 * not know of (F5) */
#if ACQUIRES < 255
byte	nacq[N];
#endif

/* Faults used */
byte	drops, failovers, restarts, evictions, lostmsgs, prunes;
#if LATE > 0
byte	late_c = NONE;			/* a request in flight, to run late */
byte	late_k;					/* 1 acquire r, 2 acquire w, 3 release "",
								 * 4 release "q", 5 renew */
byte	late_s;					/* its seq (rank, as sq) */
byte	lates;
#endif

/* Tokens, as ranks: top is the last issued, lastret the largest returned */
byte	top, lastret;

/* Temporaries of the atomic steps (not part of the state) */
hidden byte cc, mm, mk, res, hint, tokr, held, i, j, e, q0, first, fe, go;
hidden byte more, behind, g6, g7, waiting, changed, left_reader, readers_wait,
			rgo, r0;
hidden int ln, lrm, lqe, lrt, lrw, cnt, until, myread, myint, zz;
hidden byte saverq;
hidden byte savecc, savemm, c2, tmp, oldf, ub, inq, cleaned, sfirst, sfe, smore;
hidden byte gnow;
hidden byte rq;					/* the seq a request carries (rank) */
hidden byte stale;				/* the request was stale: nothing changed */
hidden byte olds[N];
hidden byte ph;

/* ------------------------------------------------------------------ */
/* Redis primitives                                                   */

inline clear_hash(S)
{
	S.ex = 0; S.w = NONE; S.wl = 0; S.f = 0; S.n = 0; S.rm = 0;
	S.qe = 0; S.rt = 0; S.rw = 0; S.z = 0;
	i = 0;
	do
	:: i < N -> S.r[i] = 0; S.in[i] = 0; S.s[i] = 0; i++
	:: else -> break
	od;
	skip
}

inline clear_queue(S)
{
	S.qn = 0; S.qt = 0
}

/* ZREM queue x */
inline zrem(S, x)
{
	j = 0;
	do
	:: j < S.qn && S.q[j] != x -> j++
	:: else -> break
	od;
	if
	:: j < S.qn ->
		do
		:: j + 1 < S.qn -> S.q[j] = S.q[j + 1]; j++
		:: else -> break
		od;
		S.qn--;
		S.q[S.qn] = 0;
		if
		:: S.qn == 0 -> S.qt = 0		/* the empty key is gone */
		:: else
		fi
	:: else
	fi
}

/* ZADD queue <now> x: a member already there moves to the back */
inline zadd(S, x)
{
	zrem(S, x);
	S.q[S.qn] = x;
	S.qn++
}

inline copy_state(D, S)
{
	D.ex = S.ex; D.w = S.w; D.wl = S.wl; D.f = S.f; D.n = S.n; D.rm = S.rm;
	D.qe = S.qe; D.rt = S.rt; D.rw = S.rw; D.z = S.z; D.qn = S.qn; D.qt = S.qt;
	i = 0;
	do
	:: i < N -> D.r[i] = S.r[i]; D.in[i] = S.in[i]; D.q[i] = S.q[i]; D.s[i] = S.s[i]; i++
	:: else -> break
	od;
	skip
}

inline dec(v)
{
	if
	:: v >= 2 -> v--
	:: else
	fi
}

/* One tick of Redis's clock on a data set */
inline tick_state(S)
{
	dec(S.wl); dec(S.rm); dec(S.qe); dec(S.rt); dec(S.rw); dec(S.z); dec(S.qt);
	i = 0;
	do
	:: i < N -> dec(S.r[i]); dec(S.in[i]); i++
	:: else -> break
	od;
#ifdef OLD_WRITER_TTL
	/* mutant, the rule before F5's fix: the writer's lease is the hash's
	 * TTL (the write grant and the renewal set it): when it runs out, the
	 * hash goes, every owner's record with it */
	if
	:: S.w != NONE && S.wl <= 1 -> clear_hash(S)
	:: else
	fi;
#endif
	if
	:: S.qn > 0 && S.qt <= 1 -> clear_queue(S)
	:: else
	fi
}

/* commit() of the scripts: z is max(qe, rt, rw) while that is live */
inline commit_z(S, a, b, c)
{
	zz = a;
	if :: b > zz -> zz = b :: else fi;
	if :: c > zz -> zz = c :: else fi;
	if
	:: zz >= 2 -> S.z = zz
	:: else -> S.z = 0
	fi
}

/* ------------------------------------------------------------------ */
/* acquire.lua: caller cc, mode mm ("r"/"w": holds nothing), mark mk  */
/* out: res 1 granted (tokr: NEWTOK or the rank returned), 0 busy     */
/* (hint: ticks)                                                      */

inline acq_head(S)
{
	first = NONE; fe = 0; more = 0;
	do
	:: S.qn == 0 ->
		if
		:: lqe > 0 -> lqe = 0; S.qe = 0
		:: else
		fi;
		break
	:: else ->
		q0 = S.q[0];
		if
		:: q0 == cc -> e = myint
		:: else -> e = S.in[q0]
		fi;
		if
		:: e >= 2 -> first = q0; fe = e; more = (S.qn > 1); break
		:: else ->
			zrem(S, q0);
			S.in[q0] = 0;
			if
			:: q0 == cc -> myint = 0
			:: else
			fi
		fi
	od;
	skip
}

inline acq_others(S)
{
	if
	:: ln == 0 -> cnt = 0; until = 0
	:: else ->
		if
		:: lrm <= 1 ->
			ln = 0; lrm = 0;
			i = 0;
			do
			:: i < N ->
				if
				:: S.r[i] == 1 -> S.r[i] = 0
				:: S.r[i] >= 2 ->
					ln++;
					if
					:: lrm == 0 || S.r[i] < lrm -> lrm = S.r[i]
					:: else
					fi
				:: else
				fi;
				i++
			:: else -> break
			od;
			if
			:: myread <= 1 -> myread = 0; g7 = 0
			:: else
			fi;
			S.n = (ln > 0 -> ln : 0);
			S.rm = (ln > 0 -> lrm : 0)
		:: else
		fi;
		cnt = ln - (myread >= 2 -> 1 : 0);
		until = lrm
	fi
}

inline acq_busy(S, u)
{
	tmp = u;
#ifndef OLD_NO_CLEANUP_WAKE
	/* The "-" clean-up let go of what a lost release should have: the
	 * waiter that may now proceed is told, as by that release (F2 fixed). */
	if
	:: cleaned && S.w == NONE ->
		sfirst = first; sfe = fe; smore = more;
		acq_head(S);
		if
		:: first != NONE && first != cc ->
			if
			:: pc[first] == SLEEP && md[first] == W -> msg[first] = 1
			:: else
			fi
		:: first == NONE && lrw >= 2 ->
			i = 0;
			do
			:: i < N ->
				if
				:: pc[i] == SLEEP && md[i] == R -> msg[i] = 1
				:: else
				fi;
				i++
			:: else -> break
			od
		:: else
		fi;
		first = sfirst; fe = sfe; more = smore
	:: else
	fi;
#endif
	if
	:: mk > 0 ->
		e = TV(mk);
		if
		:: mm == R ->
			if
			:: e > lrw -> lrw = e; S.rw = e
			:: else
			fi
		:: else ->
#ifdef OLD_QUEUE_JOIN
			/* before the fix of F1: joined only when i: was absent */
			if
			:: myint == 0 -> zadd(S, cc)
			:: else
			fi;
#else
			/* always (back) in the queue as it renews its intent: a live
			 * intent keeps its place (ZADD NX), a lapsed or absent one
			 * goes to the back */
			if
			:: myint >= 2 ->
				inq = (S.qn > 0 && S.q[0] == cc) || (S.qn > 1 && S.q[1] == cc) ||
					(S.qn > 2 && S.q[2 % N] == cc);
				if
				:: !inq -> S.q[S.qn] = cc; S.qn++
				:: else
				fi
			:: else -> zadd(S, cc)
			fi;
#endif
			S.in[cc] = e;
			if
			:: e > lqe -> lqe = e; S.qe = e
			:: else
			fi;
			if
			:: S.qn > 0 -> S.qt = lqe		/* PEXPIRE queue qe - now */
			:: else
			fi
		fi
	:: else
	fi;
	commit_z(S, lqe, lrt, lrw);
	hint = (tmp >= 2 -> tmp - 1 : 1);
	res = 0
}

inline acq_body(S)
{
	res = 0; hint = 0; tokr = 0; cleaned = 0;
	if
	:: S.w == NONE && S.z == 0 && mm == W && S.n == 0 ->
		/* fast path: the lock is free */
		S.ex = 1; S.w = cc; S.f = NEWTOK; S.wl = TV(LEASE);
		res = 1; tokr = NEWTOK
	:: S.w == NONE && S.z == 0 && mm == R ->
		/* fast path: a reader, nobody waits */
		S.ex = 1;
		if
		:: S.r[cc] > 0 -> S.r[cc] = TV(LEASE)
		:: S.r[cc] == 0 && S.n > 0 ->
			S.r[cc] = TV(LEASE); S.n++;
			if
			:: S.rm == 0 || S.rm > TV(LEASE) -> S.rm = TV(LEASE)
			:: else
			fi
		:: S.r[cc] == 0 && S.n == 0 ->
			S.r[cc] = TV(LEASE); S.n = 1; S.rm = TV(LEASE)
		fi;
		res = 1; tokr = S.f
	:: else ->
		/* the general path (its commit puts v if the hash was not there) */
		S.ex = 1;
		ln = S.n; lrm = S.rm; lqe = S.qe; lrt = S.rt; lrw = S.rw;
		myread = S.r[cc]; myint = S.in[cc];
		g7 = (S.r[cc] > 0); g6 = (S.in[cc] > 0);
		/* a writer whose lease has ended holds nothing: its w goes (the
		 * caller's own too, as left over: no clean-up, nobody told) */
		if
		:: S.w != NONE && S.wl <= 1 -> S.w = NONE; S.wl = 0
		:: else
		fi;
		/* holding nothing: a reader field of the caller's is left over */
		if
		:: S.r[cc] > 0 ->
			S.r[cc] = 0;
			ln = ln - 1;
			S.n = (ln > 0 -> ln : 0);
			if
			:: ln == 0 -> S.rm = 0; cleaned = 1
			:: else
			fi;
			myread = 0; g7 = 0
		:: else
		fi;
#ifndef OLD_LEFTOVER_WRITER
		/* "-" too: a writer field of the caller's is left over (F3 fixed):
		 * it goes as its release would (f stays; the hash lives for keep) */
		if
		:: S.w == cc -> S.w = NONE; S.wl = 0; cleaned = 1
		:: else
		fi;
#endif
		if
		:: mm == R ->
			if
			:: S.w != NONE && S.w != cc -> acq_busy(S, S.wl)
			:: else ->
				waiting = (lqe >= 2);
				first = NONE;
#ifndef MUT_NO_QUEUE
				if
				:: waiting && S.w == NONE && lrt <= 1 && myread <= 1 ->
					acq_head(S);
					if
					:: first != NONE -> acq_busy(S, fe)
					:: else -> waiting = 0
					fi
				:: else
				fi;
#else
				waiting = 0;
#endif
				if
				:: first == NONE ->
#ifndef OLD_NO_GRANT_WAKE
					/* F2-failover (fixed in acquire.lua): a read granted
					 * after the "-" clean-up let go of the caller's
					 * left-over writer field tells the readers who waited
					 * for that writer, as its lost release would have */
					if
					:: cleaned && lrw >= 2 ->
						i = 0;
						do
						:: i < N ->
							if
							:: pc[i] == SLEEP && md[i] == R && i != cc -> msg[i] = 1
							:: else
							fi;
							i++
						:: else -> break
						od
					:: else
					fi;
#endif
					if
					:: lrw > 0 && S.w == NONE && !waiting -> lrw = 0; S.rw = 0
					:: else
					fi;
					if
					:: !g7 ->
						ln++;
						S.n = ln;
						if
						:: ln == 1 || TV(LEASE) < lrm -> S.rm = TV(LEASE)
						:: else
						fi
					:: else
					fi;
					S.r[cc] = TV(LEASE);
					commit_z(S, lqe, lrt, lrw);
					res = 1; tokr = S.f
				:: else
				fi
			fi
		:: else ->
			/* the write lock */
			first = NONE; fe = 0; more = 0;
			if
			:: lqe >= 2 && S.w != cc -> acq_head(S)
			:: else
			fi;
			behind = (first != NONE && first != cc);
			if
			:: S.w != NONE && S.w != cc ->
				ub = (behind && fe < S.wl -> fe : S.wl); acq_busy(S, ub)
			:: S.w != NONE && S.w == cc ->
				/* the writer again: same token */
				S.wl = TV(LEASE);
				commit_z(S, lqe, lrt, lrw);
				res = 1; tokr = S.f
			:: S.w == NONE && lrt >= 2 ->
				ub = (behind && fe < lrt -> fe : lrt); acq_busy(S, ub)
			:: else ->
				acq_others(S);
				if
				:: cnt > 0 -> ub = (behind && fe < until -> fe : until); acq_busy(S, ub)
				:: cnt <= 0 && behind -> acq_busy(S, fe)
				:: cnt <= 0 && !behind ->
					S.w = cc; S.f = NEWTOK; S.wl = TV(LEASE);
					if
					:: g6 ->
						zrem(S, cc);
						S.in[cc] = 0;
						if
						:: (first == cc && !more) || (first != cc && S.qn == 0) ->
							lqe = 0; S.qe = 0
						:: else
						fi
					:: else
					fi;
					commit_z(S, lqe, lrt, lrw);
					res = 1; tokr = NEWTOK
				fi
			fi
		fi
	fi
}

/* acquire.lua: first the order of the owner's requests (ARGV[3], seq rq):
 * one not newer than s:<owner> is stale and changes nothing; any other
 * runs, and its seq becomes s:<owner> whatever it answers. */
inline acquire(S)
{
	stale = 0;
	/* mutants: protocol 2 (MUT_PROTO2) had no order; MUT_NO_SEQ_ACQUIRE
	 * forgets the check here (its seq is still recorded) */
#if !defined(MUT_PROTO2) && !defined(MUT_NO_SEQ_ACQUIRE)
	if
	:: S.s[cc] != 0 && rq <= S.s[cc] -> stale = 1
	:: else
	fi;
#endif
	if
	:: stale -> res = STALE; hint = 0; tokr = 0
	:: else -> acq_body(S); S.s[cc] = rq
	fi
}

/* ------------------------------------------------------------------ */
/* renew.lua for cc with seq rq (the owner's counter when it was sent):  */
/* res 1 still held, 0 lost, STALE a newer request of the owner's ran    */
/* (checked, never recorded)                                             */

inline renew_body(S)
{
	if
	:: S.w == cc && S.wl <= 1 -> res = 0	/* its lease ended: never revived */
	:: S.w == cc && S.wl >= 2 ->
		if
		:: S.r[cc] > 0 -> S.r[cc] = TV(LEASE)
		:: else
		fi;
		S.wl = TV(LEASE);
		res = 1
	:: S.w != cc && (S.r[cc] == 0 || S.w != NONE) -> res = 0
	:: S.w == NONE && S.r[cc] == 1 -> res = 0
	:: S.w == NONE && S.r[cc] >= 2 -> S.r[cc] = TV(LEASE); res = 1
	fi
}

inline renew(S)
{
	stale = 0;
	/* mutants: protocol 2 checked nothing; MUT_NO_SEQ_RENEW forgets the
	 * order (not the "no record: 0") */
#if !defined(MUT_PROTO2) && !defined(MUT_NO_SEQ_RENEW)
	if
	:: S.s[cc] > rq -> stale = 1
	:: else
	fi;
#endif
	if
	:: stale -> res = STALE
#ifndef MUT_PROTO2
	:: !stale && S.s[cc] == 0 -> res = 0	/* no record: it holds nothing here */
	:: !stale && S.s[cc] != 0 -> renew_body(S)
#else
	:: !stale -> renew_body(S)
#endif
	fi
}

/* ------------------------------------------------------------------ */
/* release.lua for cc, keep "" (kq 0) or "q" (kq 1): held = 1 or 0     */
/* Publishes (on the master only: pub 1) to the clients it wakes.      */

inline rel_head(S)
{
	first = NONE;
	do
	:: S.qn == 0 ->
		if
		:: lqe > 0 -> lqe = 0; S.qe = 0
		:: else
		fi;
		break
	:: else ->
		q0 = S.q[0];
		if
		:: S.in[q0] >= 2 -> first = q0; break
		:: else -> zrem(S, q0); S.in[q0] = 0
		fi
	od;
	skip
}

inline rel_live(S)
{
	if
	:: ln == 0 || lrm >= 2 -> cnt = ln
	:: else ->
		ln = 0; lrm = 0;
		i = 0;
		do
		:: i < N ->
			if
			:: S.r[i] == 1 -> S.r[i] = 0
			:: S.r[i] >= 2 ->
				ln++;
				if
				:: lrm == 0 || S.r[i] < lrm -> lrm = S.r[i]
				:: else
				fi
			:: else
			fi;
			i++
		:: else -> break
		od;
		S.n = (ln > 0 -> ln : 0);
		S.rm = (ln > 0 -> lrm : 0);
		cnt = ln
	fi
}

inline rel_body(S, kq, pub)
{
	held = 0;
	if
#ifndef MUT_RELEASE_ANY
	:: kq == 0 && S.z == 0 && S.w == cc && S.r[cc] == 0 ->
		/* w names the caller, even past its lease's end: nobody came
		 * since (any call after the end would have removed w) */
#else
	/* mutant: the writer's release does not check who the writer is */
	:: kq == 0 && S.z == 0 && S.w != NONE && S.r[cc] == 0 ->
#endif
		S.w = NONE; S.wl = 0;	/* the TTL raised to keep, never lowered */
		held = 1
	:: kq == 0 && S.z == 0 && S.r[cc] >= 2 && S.w == NONE ->
		/* a reader whose lease has not ended (else the general path) */
		held = 1;
		if
		:: S.n > 1 -> S.r[cc] = 0; S.n--
		:: S.n <= 1 -> S.r[cc] = 0; S.n = 0; S.rm = 0	/* the hash stays for keep */
		fi
	:: else ->
		/* the general path */
		ln = S.n; lrm = S.rm; lqe = S.qe; lrt = S.rt; lrw = S.rw;
		r0 = (S.r[cc] > 0);
		changed = 0; left_reader = 0;
		/* another owner's writer whose lease has ended holds nothing: its
		 * w goes (who waits may now go); the caller's own stays to be
		 * released below (answered 1) */
		if
		:: S.w != NONE && S.w != cc && S.wl <= 1 -> S.w = NONE; S.wl = 0; changed = 1
		:: else
		fi;
		if
		:: S.in[cc] > 0 -> zrem(S, cc); S.in[cc] = 0; changed = 1
		:: else
		fi;
		readers_wait = (lrw >= 2);
		if
		:: kq == 1 -> held = 1
		:: else ->
			if
#ifndef MUT_RELEASE_ANY
			:: S.w == cc ->
#else
			:: S.w != NONE ->
#endif
				held = 1;
				S.w = NONE; S.wl = 0;
				changed = 1;
				if
				:: readers_wait -> lrt = TV(TURN); lrw = 0; S.rt = lrt; S.rw = 0
				:: else
				fi
			:: else
			fi;
			if
			:: r0 ->
				if
				:: S.r[cc] >= 2 -> held = 1
				:: else
				fi;
				S.r[cc] = 0;
				ln = ln - 1;
				changed = 1; left_reader = 1;
				S.n = (ln > 0 -> ln : 0);
				S.rm = (ln > 0 -> lrm : 0)
			:: else
			fi
		fi;
		if
		:: changed && S.w == NONE ->
			first = NONE;
			if
			:: lqe >= 2 -> rel_head(S)
			:: else
			fi;
			if
			:: first != NONE || readers_wait || (left_reader && lrt >= 2) -> rel_live(S)
			:: else -> cnt = ln
			fi;
			if
			:: left_reader && lrt >= 2 && cnt == 0 -> lrt = 0; S.rt = 0
			:: else
			fi;
			rgo = 0; go = NONE;
			if
			:: readers_wait && (lrt >= 2 || first == NONE) -> rgo = 1; go = first
			:: else ->
				if
				:: first != NONE && lrt <= 1 && cnt == 0 -> go = first
				:: else
				fi
			fi;
			if
			:: first == NONE && lrw > 0 -> lrw = 0; S.rw = 0
			:: else
			fi;
#ifndef MUT_NO_PUBLISH
			if
			:: pub ->
				i = 0;
				do
				:: i < N ->
					if
					:: pc[i] == SLEEP && ((rgo && md[i] == R) || (go == i && md[i] == W)) ->
						msg[i] = 1
					:: else
					fi;
					i++
				:: else -> break
				od
			:: else
			fi
#endif
		:: else
		fi;
		/* free or not, the hash stays (for keep when free): the last
		 * token and the owners' s: fields */
		commit_z(S, lqe, lrt, lrw)
	fi
}

/* release.lua: the seq check as in acquire.lua; a release that runs
 * records its seq even where the owner held nothing, making the hash if
 * there was none (v and s:<owner>, TTL keep). */
inline release(S, kq, pub)
{
	stale = 0;
	/* mutants: MUT_PROTO2, MUT_NO_SEQ_RELEASE as in acquire */
#if !defined(MUT_PROTO2) && !defined(MUT_NO_SEQ_RELEASE)
	if
	:: S.s[cc] != 0 && rq <= S.s[cc] -> stale = 1
	:: else
	fi;
#endif
	if
	:: stale -> held = 0
	:: else -> rel_body(S, kq, pub); S.ex = 1; S.s[cc] = rq
	fi
}

/* ------------------------------------------------------------------ */
/* Tokens: ranks among those still referenced                          */

hidden byte nf1, nf2, nlr, ntop, nr, k;

inline normalize()
{
	nr = 0; nf1 = 0; nf2 = 0; nlr = 0; ntop = 0;
	k = 1;
	do
	:: k <= NEWTOK ->
		if
#if FAILOVERS > 0
		:: st.f == k || snap.f == k || lastret == k || top == k ->
#else
		:: st.f == k || lastret == k || top == k ->
#endif
			nr++;
			if :: st.f == k -> nf1 = nr :: else fi;
#if FAILOVERS > 0
			if :: snap.f == k -> nf2 = nr :: else fi;
#endif
			if :: lastret == k -> nlr = nr :: else fi;
			if :: top == k -> ntop = nr :: else fi
		:: else
		fi;
		k++
	:: else -> break
	od;
	st.f = nf1; lastret = nlr; top = ntop;
#if FAILOVERS > 0
	snap.f = nf2
#endif
}

/* Anything left in the hash */
#define HAS3(S, I) (I < N && (S.r[I] > 0 || S.in[I] > 0 || S.s[I] > 0))
#define HAS(S) (S.w != NONE || S.f > 0 || S.n > 0 || S.rm > 0 || S.qe > 0 || S.rt > 0 || \
	S.rw > 0 || S.z > 0 || HAS3(S, 0) || HAS3(S, 1) || HAS3(S, 2) || HAS3(S, 3))

/* Seqs, per owner: only their order matters, and only while a request of
 * the owner's is in flight. Then they are kept as ranks among those
 * referenced (the counter, the record on the master and on the replica,
 * the request in flight). Otherwise every request to come is newer than
 * any record: the counter is 1, lost (read by a late request only) 0, and
 * a record only tells renew.lua that the owner may hold something. Every
 * call that writes a w or r: field writes the record, and the record
 * goes only with the hash, so where the owner has a w or r: field the
 * record is there: it is kept as 1 exactly then, as 0 otherwise. (A hash
 * whose fields are all gone, or that is not there, are the same to every
 * script: ex says whether anything is left.) */
hidden byte c3, nq, ns1, ns2, nl;
#if FAILOVERS > 0
#define SNAPS(c) snap.s[c]
#else
#define SNAPS(c) 0
#endif

inline normseq()
{
	c3 = 0;
	do
	:: c3 < N && LATEC != c3 ->
		sq[c3] = 1;
		st.s[c3] = (st.w == c3 || st.r[c3] > 0 -> 1 : 0);
#if FAILOVERS > 0
		snap.s[c3] = (snap.w == c3 || snap.r[c3] > 0 -> 1 : 0);
#endif
		lost[c3] = 0;
		c3++
	:: c3 < N && LATEC == c3 ->
		nr = 0; nq = 0; ns1 = 0; ns2 = 0; nl = 0;
		k = 1;
		do
		:: k <= SEQMAX ->
			if
			:: sq[c3] == k || st.s[c3] == k || SNAPS(c3) == k || LATES == k ->
				nr++;
				if :: sq[c3] == k -> nq = nr :: else fi;
				if :: st.s[c3] == k -> ns1 = nr :: else fi;
				if :: SNAPS(c3) == k -> ns2 = nr :: else fi;
				if :: LATES == k -> nl = nr :: else fi
			:: else
			fi;
			k++
		:: else -> break
		od;
		sq[c3] = nq; st.s[c3] = ns1;
#if FAILOVERS > 0
		snap.s[c3] = ns2;
#endif
#if LATE > 0
		late_s = nl;
#endif
		c3++
	:: else -> break
	od;
	st.ex = HAS(st)
#if FAILOVERS > 0
	; snap.ex = HAS(snap)
#endif
}

/* After an acquire on the master: a new token is issued (TIME). */
inline issue()
{
	if
	:: tokr == NEWTOK ->
#ifndef MUT_NOTIME
		top++;
		st.f = top;
#else
		/* mutant: the token is f + 1, without Redis's clock: just above
		 * the f this master had (absent: 0); ranks above it move up */
		if :: lastret > oldf -> lastret++ :: else fi;
#if FAILOVERS > 0
		if :: snap.f > oldf -> snap.f++ :: else fi;
#endif
		if :: top > oldf -> top++ :: else -> top = oldf + 1 fi;
		st.f = oldf + 1;
#endif
		tokr = st.f
	:: else
	fi
}

/* ------------------------------------------------------------------ */
/* Properties                                                          */

hidden byte nw, nrd;

inline check_exclusion()
{
	skip;
#ifndef NO_P1
	nw = 0; nrd = 0;
	i = 0;
	do
	:: i < N ->
		if
		:: pc[i] == HOLD && bl[i] > 0 && md[i] == W -> nw++
		:: pc[i] == HOLD && bl[i] > 0 && md[i] == R -> nrd++
		:: else
		fi;
		i++
	:: else -> break
	od;
	assert(nw <= 1 && (nw == 0 || nrd == 0))	/* P1 */
#endif
}

/* The known divergence (issue 28): a waiting writer whose lapsed intent
 * field outlived the queue key refreshes its intent without rejoining the
 * queue (acquire.lua: ZADD only when i:<owner> is absent), so no release
 * wakes it.  With EXPECT_STALE_INTENT, P3 is not asserted for a writer
 * whose intent is there but who is not in the queue; remove the flag (in
 * spin.sh) when acquire.lua rejoins the queue. */
#ifdef EXPECT_STALE_INTENT
#define STALE_INTENT(C) (md[C] == W && st.in[C] > 0 && !INQ(C))
#define INQ(C) ((st.qn > 0 && st.q[0] == C) || (st.qn > 1 && st.q[1] == C) || (st.qn > 2 && st.q[2 % N] == C))
#else
#define STALE_INTENT(C) 0
#endif

/* P3: would a try by a sleeping waiter c2 be granted now? */
inline check_wakeups()
{
	skip;
#ifndef NO_P3
	savecc = cc; savemm = mm; saverq = rq;
	c2 = 0;
	do
	:: c2 < N ->
		if
		:: pc[c2] == SLEEP && !msg[c2] && !taint[c2] && sl[c2] > 0 && !STALE_INTENT(c2) ->
			copy_state(sc, st);
			cc = c2; mm = md[c2]; mk = MARK; rq = sq[c2] + 1;
			acquire(sc);
			assert(res == 0)		/* P3: free for it, and asleep */
		:: else
		fi;
		c2++
	:: else -> break
	od;
	cc = savecc; mm = savemm; rq = saverq
#endif
}

/* P4: a client that holds nothing and owes nothing has no hold in Redis
 * (a live one: a w whose lease has ended holds nothing) */
#define NOHOLD(C) ((st.w != C || st.wl < 2) && st.r[C] < 2)

inline check_idle()
{
	skip;
#ifndef NO_P4
	i = 0;
	do
	:: i < N ->
		if
		:: phantom[i] && NOHOLD(i) -> phantom[i] = 0
		:: else
		fi;
		if
		:: pc[i] != HOLD && !owed[i] && !phantom[i] ->
			assert(NOHOLD(i))	/* P4 */
		:: else
		fi;
		i++
	:: else -> break
	od
#endif
}

/* The state after each step, for trails: a column per client */
#define X2(a) a[0], a[1]
#define X3(a) a[0], a[1], a[2 % N]
inline dump()
{
#if N > 2
	printf("    hash: ex=%d w=%d(%d) f=%d r=%d,%d,%d n=%d rm=%d i=%d,%d,%d s:=%d,%d,%d qe=%d rt=%d rw=%d z=%d queue=%d:%d,%d ttl %d\n",
		st.ex, st.w, st.wl, st.f, X3(st.r), st.n, st.rm, X3(st.in), X3(st.s),
		st.qe, st.rt, st.rw, st.z, st.qn, st.q[0], st.q[1], st.qt);
	printf("    clients: pc=%d,%d,%d md=%d,%d,%d belief=%d,%d,%d sleep=%d,%d,%d msg=%d,%d,%d owed=%d,%d,%d tokens top=%d lastret=%d\n",
		X3(pc), X3(md), X3(bl), X3(sl), X3(msg), X3(owed), top, lastret);
	printf("    seqs: counter=%d,%d,%d lost=%d,%d,%d phantom=%d,%d,%d in flight: c%d kind %d seq %d\n",
		X3(sq), X3(lost), X3(phantom), LATEC, LATEK, LATES)
#else
	printf("    hash: ex=%d w=%d(%d) f=%d r=%d,%d n=%d rm=%d i=%d,%d s:=%d,%d qe=%d rt=%d rw=%d z=%d queue=%d:%d,%d ttl %d\n",
		st.ex, st.w, st.wl, st.f, X2(st.r), st.n, st.rm, X2(st.in), X2(st.s),
		st.qe, st.rt, st.rw, st.z, st.qn, st.q[0], st.q[1], st.qt);
	printf("    clients: pc=%d,%d md=%d,%d belief=%d,%d sleep=%d,%d msg=%d,%d owed=%d,%d tokens top=%d lastret=%d\n",
		X2(pc), X2(md), X2(bl), X2(sl), X2(msg), X2(owed), top, lastret);
	printf("    seqs: counter=%d,%d lost=%d,%d phantom=%d,%d in flight: c%d kind %d seq %d\n",
		X2(sq), X2(lost), X2(phantom), LATEC, LATEK, LATES)
#endif
}

inline checks()
{
	dump();
	check_exclusion();
	check_wakeups();
	check_idle();
	normseq()
}

/* ------------------------------------------------------------------ */
/* The client's side of an answered acquisition                        */

inline answered_acquire()
{
	if
	:: res == 1 ->
		pc[cc] = HOLD; bl[cc] = LEASE; msg[cc] = 0; taint[cc] = 0; gnow = 1;
		if
		:: mm == W ->
#ifndef NO_P2
			assert(tokr > lastret);		/* P2 */
#endif
			lastret = (tokr > lastret -> tokr : lastret)
		:: else
		fi;
		normalize()
	:: else ->
		pc[cc] = SLEEP;
		sl[cc] = (hint < CAP -> hint : CAP);
		msg[cc] = 0;
		taint[cc] = STALE_INTENT(cc)	/* a fresh hint: a fresh sleep */
	fi
}

#if FAILOVERS > 0 && defined(WAIT_REPLICAS)
#define ACKED() copy_state(snap, st)
#else
#define ACKED() skip
#endif

/* The owner's newest request ran: Redis has its record again; an
 * acquisition ("-") or a release (not "q") dropped whatever a late request
 * left there. */
inline own_ran(dropped)
{
	if
	:: !stale && rq == sq[cc] ->
		lost[cc] = 0;
		if :: dropped -> phantom[cc] = 0 :: else fi
	:: else
	fi
}

inline acquire_master()
{
	oldf = st.f;
	acquire(st);
	issue();
	own_ran(1)
}

inline release_master(kq)
{
	release(st, kq, 1);
	own_ran(1 - kq)
}

/* A new acquire or release of cc's: the next seq of its counter */
inline newreq()
{
	sq[cc]++;
	rq = sq[cc]
}

/* Delivery of a request late, by any amount, on any connection: it runs
 * at some later step (the world's), after any of the owner's later
 * requests. Duplicated: a request that ran (and was answered) is also
 * still in flight, to run again later. One at a time, LATE in all. */
#if LATE > 0
#define LATE_OK (lates < LATE && late_c == NONE)
#define GO_LATE(k) lates++; late_c = cc; late_k = k; late_s = rq
#endif
#if LATE > 0 && defined(DUPS)
#define DUP_OK LATE_OK
#else
#define DUP_OK 0
#endif

inline try_acquire()
{
	/* as the client: mode mm chosen, mark MARK; each try a new request */
	mk = MARK;
	newreq();
	if
	:: d_step { acquire_master(); assert(!stale) /* P5 */ }; answered_acquire() ; printf("c%d acquire %d: granted=%d hint %d\n", cc, mm, res, hint)
#if LATE > 0
	:: DUP_OK -> d_step { acquire_master(); assert(!stale) /* P5 */ }; answered_acquire();
		printf("c%d acquire %d: granted=%d hint %d; a copy is still in flight\n", cc, mm, res, hint);
		GO_LATE(mm)
#endif
	:: drops < DROPS -> drops++; printf("c%d acquire %d: connection dropped, ran\n", cc, mm);
		/* ran, the answer lost: the release of what it may have granted
		 * is owed */
		d_step { acquire_master(); assert(!stale) /* P5 */; normalize() };
		pc[cc] = IDLE; owed[cc] = 1
	:: drops < DROPS -> drops++; printf("c%d acquire %d: connection dropped, did not run\n", cc, mm);
		/* did not run */
		pc[cc] = IDLE; owed[cc] = 1
#if LATE > 0
	:: LATE_OK -> printf("c%d acquire %d: cut off, still in flight\n", cc, mm);
		/* runs later: to the client, a dropped connection */
		GO_LATE(mm);
		pc[cc] = IDLE; owed[cc] = 1
#endif
	fi
}

inline client_step(C)
{
	if
	:: pc[C] == IDLE && owed[C] ->
		/* settle the owed release before acquiring again (each try a
		 * new request) */
		cc = C;
		newreq();
		if
		:: d_step { release_master(0); assert(!stale) /* P5 */ }; owed[C] = 0; printf("c%d owed release: settled\n", C);
			assert(st.w != C && st.r[C] < 2)	/* P4 */
#if LATE > 0
		:: DUP_OK -> d_step { release_master(0); assert(!stale) /* P5 */ }; owed[C] = 0;
			printf("c%d owed release: settled; a copy is still in flight\n", C);
			assert(st.w != C && st.r[C] < 2);	/* P4 */
			GO_LATE(3)
#endif
		:: drops < DROPS -> drops++; d_step { release_master(0) } ; printf("c%d owed release: dropped again, ran\n", C)
		:: drops < DROPS -> drops++ ; printf("c%d owed release: dropped again, did not run\n", C)
#if LATE > 0
		:: LATE_OK -> printf("c%d owed release: cut off, still in flight\n", C); GO_LATE(3)
#endif
		fi
#if ACQUIRES < 255
	:: pc[C] == IDLE && (!owed[C] || MUT_NO_SETTLE_ON) && nacq[C] < ACQUIRES ->
		nacq[C]++;
#else
	:: pc[C] == IDLE && (!owed[C] || MUT_NO_SETTLE_ON) ->
#endif
		cc = C;
		if :: mm = R :: mm = W fi;
		md[C] = mm; printf("c%d wants %d\n", C, mm);
		try_acquire()
	:: pc[C] == SLEEP && (msg[C] || sl[C] == 0) ->
		/* woken, or the sleep ran out: try again */
		cc = C; mm = md[C];
		try_acquire()
	:: pc[C] == SLEEP ->
		/* the wait runs out: a writer withdraws its intent (keep "q"),
		 * sent without waiting for the answer */
		cc = C;
		if
		:: md[C] == W -> newreq(); d_step { release_master(1) } ; printf("c%d gives up: withdraws its intent\n", C)
#if LATE > 0
		:: md[C] == W && DUP_OK -> newreq(); d_step { release_master(1) };
			printf("c%d gives up: withdraws its intent; a copy is still in flight\n", C);
			GO_LATE(4)
#endif
		:: md[C] == W && drops < DROPS -> newreq(); drops++ ; printf("c%d gives up: the withdrawal is lost\n", C)
#if LATE > 0
		:: md[C] == W && LATE_OK -> newreq(); printf("c%d gives up: the withdrawal is still in flight\n", C);
			GO_LATE(4)
#endif
		:: md[C] == R -> printf("c%d gives up\n", C)
		fi;
		pc[C] = IDLE; msg[C] = 0; taint[C] = 0; sl[C] = 0
	:: pc[C] == HOLD && bl[C] > 0 ->
		/* renewal: with the counter as it is (checked, not recorded) */
		cc = C;
		rq = sq[C];
		if
		:: d_step { renew(st); assert(!stale) /* P5 */ }; printf("c%d renew: %d\n", C, res);
			if
			:: res == 1 -> bl[C] = LEASE
			:: else -> bl[C] = 0		/* lost */
			fi;
			ACKED()
#if LATE > 0
		:: DUP_OK -> d_step { renew(st); assert(!stale) /* P5 */ }; printf("c%d renew: %d; a copy is still in flight\n", C, res);
			if
			:: res == 1 -> bl[C] = LEASE
			:: else -> bl[C] = 0		/* lost */
			fi;
			GO_LATE(5)
#endif
#if FAILOVERS > 0 && defined(WAIT_REPLICAS) && !defined(RENEWALS_ACKED)
		/* not acknowledged by the replica: kept (the master has it), logged */
		:: d_step { renew(st) }; printf("c%d renew (not acked): %d\n", C, res);
			if
			:: res == 1 -> bl[C] = LEASE
			:: else -> bl[C] = 0
			fi
#endif
		:: drops < DROPS -> drops++; d_step { renew(st) } ; printf("c%d renew: dropped, ran\n", C)
		:: drops < DROPS -> drops++ ; printf("c%d renew: dropped, did not run\n", C)
#if LATE > 0
		:: LATE_OK -> printf("c%d renew: cut off, still in flight\n", C); GO_LATE(5)
#endif
		fi
	:: pc[C] == HOLD ->
		/* release */
		cc = C;
		newreq();
		if
		:: d_step { release_master(0); assert(!stale) /* P5 */ }; printf("c%d release: %d\n", C, held);
			pc[C] = IDLE; bl[C] = 0;
			assert(st.w != C && st.r[C] < 2)	/* P4: released, it is free */
#if LATE > 0
		:: DUP_OK -> d_step { release_master(0); assert(!stale) /* P5 */ }; printf("c%d release: %d; a copy is still in flight\n", C, held);
			pc[C] = IDLE; bl[C] = 0;
			assert(st.w != C && st.r[C] < 2);	/* P4: released, it is free */
			GO_LATE(3)
#endif
		:: drops < DROPS -> drops++; d_step { release_master(0) }; printf("c%d release: dropped, ran\n", C);
			pc[C] = IDLE; bl[C] = 0; owed[C] = 1
		:: drops < DROPS -> drops++; printf("c%d release: dropped, did not run\n", C);
			pc[C] = IDLE; bl[C] = 0; owed[C] = 1
#if LATE > 0
		:: LATE_OK -> printf("c%d release: cut off, still in flight\n", C); GO_LATE(3);
			pc[C] = IDLE; bl[C] = 0; owed[C] = 1
#endif
		fi
	fi
}


/* WAIT_REPLICAS: a grant counts once the replica has it; one it did not
 * acknowledge in time is undone (release keep "") and not used. */
inline grant_acked()
{
#if FAILOVERS > 0 && defined(WAIT_REPLICAS)
	if
	:: gnow -> copy_state(snap, st)
	:: gnow ->
		newreq();
		d_step { release_master(0) };
		pc[cc] = IDLE; bl[cc] = 0
	:: else
	fi;
#endif
	gnow = 0
}

inline dec1(v)
{
	if
	:: v > 0 -> v--
	:: else
	fi
}

/* Records Redis lost (an expiry, a restart, a failover): noted, per
 * owner, against the ones before the event */
inline save_s()
{
	i = 0;
	do
	:: i < N -> olds[i] = st.s[i]; i++
	:: else -> break
	od;
	skip
}

inline note_lost()
{
	i = 0;
	do
	:: i < N ->
		if
		:: st.s[i] < olds[i] -> lost[i] = 1
		:: else
		fi;
		i++
	:: else -> break
	od;
	skip
}

inline tick()
{
	save_s();
	tick_state(st);
	note_lost();
#if FAILOVERS > 0
	tick_state(snap);
#endif
	i = 0;
	do
	:: i < N ->
		dec1(bl[i]); dec1(sl[i]);
		i++
	:: else -> break
	od;
	skip
}

/* Nothing in the hash is live and no writer holds (none, or one whose
 * lease has ended): keep may run out. */
#define NOLIVE(S, I) (I >= N || (S.r[I] < 2 && S.in[I] < 2))
/* keep (600 s) may run out while a request is in flight; with NO_PHANTOMS
 * every request arrives within keep (F5) */
#if LATE > 0 && defined(NO_PHANTOMS)
#define KEEP_MAY_END (late_c == NONE)
#else
#define KEEP_MAY_END 1
#endif
#define HASH_DEAD(S) (S.ex && (S.w == NONE || S.wl < 2) && S.qe < 2 && S.rt < 2 && S.rw < 2 && \
	NOLIVE(S, 0) && NOLIVE(S, 1) && NOLIVE(S, 2) && NOLIVE(S, 3))

inline taint_sleepers()
{
	i = 0;
	do
	:: i < N -> if :: pc[i] == SLEEP -> taint[i] = 1 :: else fi; i++
	:: else -> break
	od;
	skip
}

#if N > 2
#define DUE(C) (pc[C] == SLEEP && (sl[C] == 0 || msg[C]))
#else
#define DUE(C) (C < N && pc[C] == SLEEP && (sl[C] == 0 || msg[C]))
#endif
#define STEP(C) :: atomic { client_step(C); grant_acked(); d_step { checks() } }

#if LATE > 0
/* The request in flight runs. (Hidden variables: pan does not restore
 * what a d_step writes to them when it backtracks. Those read across
 * steps (cc, mm, mk, rq) are written outside d_steps, or restored at the
 * end of the d_step; the others are read only within the d_step that
 * writes them.) */
inline late_begin()
{
	/* its owner's record was lost since it was sent */
	ph = lost[cc]
}

inline late_end()
{
#ifndef NO_PHANTOMS
	if
	:: ph && !stale && late_k <= 2 -> phantom[cc] = 1
	:: else
	fi;
#endif
	if
	:: stale -> printf("    stale: nothing changed\n")
	:: else
	fi;
	late_c = NONE; late_s = 0
}
#endif

active proctype world()
{
	d_step {
		st.w = NONE;
#if FAILOVERS > 0
		snap.w = NONE;
#endif
		top = 0; lastret = 0
	};
	do
	STEP(0)
	STEP(1)
#if N > 2
	STEP(2)
#endif
#if N > 3
	STEP(3)
#endif
	:: atomic {
		/* time passes; a waiter whose sleep is over or who has a message
		 * acts first (it is woken by its latch within milliseconds) */
		(!DUE(0) && !DUE(1) && !DUE(2)) ->
		d_step { printf("tick\n"); tick(); checks() } }
	:: atomic {
		HASH_DEAD(st) && KEEP_MAY_END -> d_step { printf("the hash expires (keep)\n"); save_s(); clear_hash(st); note_lost(); checks() } }
#if FAILOVERS > 0
	:: atomic {
		/* the replica catches up with the master */
		d_step { printf("the replica syncs\n"); copy_state(snap, st); snap.f = st.f; checks() } }
	:: atomic {
		failovers < FAILOVERS -> failovers++; printf("FAILOVER to the replica\n");
		/* the replica, promoted, lacks the writes since its last sync */
		d_step { save_s(); copy_state(st, snap); st.f = snap.f; note_lost(); taint_sleepers(); checks() } }
#endif
#if RESTARTS > 0
	:: atomic {
		restarts < RESTARTS -> restarts++; printf("RESTART, data set lost\n");
		d_step { save_s(); clear_hash(st); clear_queue(st); note_lost();
#if FAILOVERS > 0
			clear_hash(snap); clear_queue(snap);
#endif
			normalize(); taint_sleepers(); checks() } }
#endif
#if EVICTIONS > 0
	:: atomic {
		evictions < EVICTIONS -> evictions++; printf("EVICTION\n");
		if
		:: d_step { save_s(); clear_hash(st); note_lost(); normalize() }
		:: d_step { clear_queue(st) }
		fi;
		d_step { taint_sleepers(); checks() } }
#endif
#if PRUNES > 0 && LATE > 0
	:: atomic {
		/* acquire.lua's pruning: the record of an owner that has no other
		 * field goes (a new owner in a hash grown to 48 fields or more).
		 * Only that of an owner with a request in flight matters: any
		 * other's next request is newer than any record. */
		prunes < PRUNES && late_c != NONE && st.s[late_c] > 0 && st.w != late_c &&
		st.r[late_c] == 0 && st.in[late_c] == 0 ->
		prunes++; printf("PRUNE: the record of c%d goes\n", late_c);
		d_step { st.s[late_c] = 0; lost[late_c] = 1; checks() } }
#endif
#if LOSTMSG > 0
	:: atomic {
		lostmsgs < LOSTMSG && ((pc[0] == SLEEP && msg[0]) || (pc[1] == SLEEP && msg[1]) || (N > 2 && pc[2 % N] == SLEEP && msg[2 % N])) ->
		if
		:: pc[0] == SLEEP && msg[0] -> msg[0] = 0; taint[0] = 1
		:: pc[1] == SLEEP && msg[1] -> msg[1] = 0; taint[1] = 1
#if N > 2
		:: pc[2] == SLEEP && msg[2] -> msg[2] = 0; taint[2] = 1
#endif
		fi;
		lostmsgs++; printf("a wake-up message is lost\n");
		d_step { checks() } }
#endif
#if LATE > 0
	:: atomic {
		/* the request in flight runs now */
		late_c != NONE -> printf("the late request of c%d runs now (kind %d, seq %d)\n", late_c, late_k, late_s);
		cc = late_c; rq = late_s;
		if
		:: late_k == 3 -> d_step { late_begin(); release_master(0); late_end() }
		:: late_k == 4 -> d_step { late_begin(); release_master(1); late_end() }
		:: late_k == 5 -> d_step { late_begin(); renew(st); late_end() }
		:: late_k <= 2 -> mm = late_k; mk = MARK;
			d_step { late_begin(); acquire_master(); normalize(); late_end() }
		fi;
		d_step { checks() } }
#endif
	od;
	skip
}
