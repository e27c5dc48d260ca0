package main

// Exit statuses. A command run by exec passes its own status through, so a
// script can tell redlock's outcomes from the command's only when the command
// avoids these numbers.
const (
	exitOK = 0
	// exitUsage (EX_USAGE): bad flags or arguments, a bad master URL, no
	// masters given.
	exitUsage = 64
	// exitUnavailable (EX_UNAVAILABLE): too few masters answered to decide
	// (down, unreachable, refusing the password, or inside their restart gate).
	exitUnavailable = 69
	// exitNotObtained (EX_TEMPFAIL): the lock is held elsewhere (or --wait ran
	// out). The normal outcome on all but one host of a crontab; cron tries
	// again at the next run.
	exitNotObtained = 75
	// exitLost: the lock was lost while the command ran (it could not be
	// extended on a quorum in time); the command was stopped. Just past the
	// sysexits range (64–78), so it means nothing else to tools that read
	// those, and below the shell's 126+.
	exitLost = 79
	// exitCannotRun and exitNotFound: the command could not be started; the
	// numbers the shell, env and timeout use.
	exitCannotRun = 126
	exitNotFound  = 127
)

const exitStatuses = `Exit status:
  0-255  exec: the command's own status (128+N when signal N killed it)
  64     bad usage: flags, arguments, a master URL, no masters (EX_USAGE)
  69     too few masters answered: down, unreachable, wrong password, or inside
         their --restart-gate (EX_UNAVAILABLE)
  75     exec: not obtained, the lock is held elsewhere or --wait ran out (EX_TEMPFAIL)
  79     exec: lock lost while the command ran; the command was stopped
  126    exec: the command could not be run
  127    exec: the command was not found
`

const mastersHelp = `Masters: --masters URL,URL,... or $REDLOCK_MASTERS (the flag wins), one URL
per independent Redis master (not replicas; an odd number is best):
  redis://[user:password@]host:port[/db]   plain TCP
  rediss://[user:password@]host:port[/db]  TLS
  host:port                                the same as redis://host:port
  redis+sentinel://host:port?master_name=NAME[&addr=host:port...]
                                           a primary with replicas under Sentinel:
                                           the Sentinels, and the name they watch it
                                           by; its password as &password=...
  redis+cluster://[user:password@]host:port[?addr=host:port...]
                                           a Redis Cluster: one or more of its nodes
(rediss+sentinel:// and rediss+cluster:// for TLS.)
Percent-encode special characters in a password (@ as %40). Errors and reports
never show a password.
`

const mainUsage = `redlock takes one lock across N independent Redis masters (the Redlock
quorum algorithm) from the shell.

Usage:
  redlock exec [flags] NAME -- COMMAND [ARG...]  run COMMAND while holding lock NAME
  redlock status [flags] NAME                    show which masters hold lock NAME (and its permits)
  redlock chaos [flags]                          kill, pause, partition and restart masters it
                                                 starts itself while clients contend; report
                                                 overlaps and stale writes (exit 1: a verdict
                                                 other than expected)
  redlock help [COMMAND]                         show this help, or a command's
  redlock --version                              show the version: the module's, or
                                                 (devel) for a build from a clone

` + mastersHelp + `
` + exitStatuses

const execUsage = `Usage: redlock exec [flags] NAME -- COMMAND [ARG...]

Takes the lock NAME on a quorum of the masters, runs COMMAND while keeping the
lock extended, and releases the lock when COMMAND exits. Put the same line in
the crontab of every host, and the job runs on one host at a time:

  */10 * * * * redlock exec --masters r1:6379,r2:6379,r3:6379 report -- /usr/local/bin/report

Flags go before NAME; "--" ends them and separates NAME from COMMAND.

redlock holds the lock as an owner: --owner ID, else $REDLOCK_OWNER, else a
new UUID. COMMAND gets it in REDLOCK_OWNER, so a redlock exec of the same NAME
that COMMAND runs (a script that calls another) nests in the lock at once
instead of waiting for its own caller; another owner is refused as usual.
Only processes of one call chain should share an owner: do not export
REDLOCK_OWNER in a shell that starts independent jobs.

With --read or --write, NAME is a read-write lock (an RWMutex): --read holds
it beside other readers, --write alone; a waiting writer keeps new readers
out. Without either, NAME is the plain lock of that name, which never meets
the read-write lock NAME: a job that writes must say --write. --owner does not
apply to them (their holds do not nest).

COMMAND gets REDLOCK_KEY=NAME in its environment and, with --fencing,
REDLOCK_FENCE=TOKEN: a number that grows from one holder of NAME to the next,
for a resource to reject a stale holder's writes. It inherits the rest of
redlock's environment, REDLOCK_MASTERS (and any password in it) included, so
that it can run redlock itself (redlock status NAME, say); to keep it from
COMMAND, run "env -u REDLOCK_MASTERS COMMAND ..." as the command.

COMMAND runs in its own process group (so it cannot read from a terminal).
SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to redlock are
passed on to that group. When the lock is lost (it could not be extended on a
quorum before its validity ran out), the group gets SIGTERM, then SIGKILL
after --grace, and redlock exits with status 79.

Flags:
  --masters URLS   comma-separated master URLs (default $REDLOCK_MASTERS)
  --ttl DURATION   how long the lock lives without an extend; it is extended
                   every TTL/3 while COMMAND runs (default 30s)
  --wait DURATION  how long to wait for the lock; 0 makes one attempt
                   (default 0)
  --grace DURATION how long COMMAND has after SIGTERM, once the lock is lost,
                   before SIGKILL (default 10s)
  --read           hold the read-write lock NAME as one of its readers
  --write          hold the read-write lock NAME as its writer
  --fencing        take a fencing token and pass it in REDLOCK_FENCE (not
                   with --read)
  --verbose        log each acquire attempt, renewal and release, and each
                   master that failed, to stderr (without it, masters that
                   failed while the lock was held are one line on stderr)
  --owner ID       hold the lock as owner ID, passed on in REDLOCK_OWNER
                   (default $REDLOCK_OWNER, else a new UUID)
  --permits L      take one of L permits of the semaphore NAME instead of
                   the lock: at most L commands run at once (a permit does
                   not nest; every exec of NAME must give the same L, or
                   the one that differs exits 64 while permits are held)
  --restart-gate DURATION
                   count no vote from a master up for less than DURATION: a
                   master that restarted empty stays out until locks that
                   counted on it expired; at least the largest --ttl in use
                   (default $REDLOCK_RESTART_GATE, else 0: off)

` + mastersHelp + `
` + exitStatuses

const statusUsage = `Usage: redlock status [flags] NAME

Reports, for each master, whether it holds the key NAME, the value it holds
(one per holder; owner=ID,holds=N for a lock held by an owner, as redlock exec
holds it), its remaining time to live (PTTL), and the fencing counter
(fence:{NAME}, or NAME:fence when NAME has a hash tag {...}); then whether a quorum agrees on one holder. When the read-write lock NAME (redlock exec
--read, --write) has holders or claims, a second table shows, per master, its
live readers, its writer and its waiting writers' claims, and a line says
who holds it on a quorum. When masters hold permits of the semaphore NAME
(exec --permits), it also lists them: per master each slot's holder and time
left, then the permits a quorum holds. It only reads.

Exit status: 0 when a quorum of masters answered (the lock held or not), 69
when fewer did, 64 on bad usage.

Flags:
  --masters URLS      comma-separated master URLs (default $REDLOCK_MASTERS)
  --timeout DURATION  how long to wait for each master (default 1s)
  --json              print one JSON object instead of the table: name,
                      quorum, masters (master, value, pttl_ms, fence, error),
                      answered, holder, holders, held; for a read-write
                      lock also rw: readers, writer, writer_on, claims, and
                      per master rw_readers, rw_writer, rw_claims; with
                      permits held, permits (limit, held) and per master
                      permit_limit and permits

` + mastersHelp
