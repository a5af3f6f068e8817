import { isFinalStatus } from '../../functions/records/store.js';
import type { LoggedCaptchaEvent } from '../standins/captchaai/wire.js';
import type { Logged } from '../standins/event-log.js';
import type { TargetEvent } from '../standins/target.js';

/**
 * The chaos run's checker: the invariants of threadgate's two promises (the cap, one solve and
 * one POST per record) and "nothing lost", judged from the stand-ins' own logs of the wire and
 * what the emulator holds afterwards, never from the code under test. Pure, so it is unit-tested
 * on hand-made logs; local/chaos/run.ts feeds it a real run's.
 */
export interface ChaosEvidence {
  /** The records sent (each possibly more than once). */
  keys: string[];
  cap: number;
  /** The client's deadline per task and the cool-down after it, real ms (time-scaled). */
  deadlineMs: number;
  cooldownMs: number;
  /** The CaptchaAI stand-in's wire log (local/standins/captchaai/wire-log.ts). */
  captcha: LoggedCaptchaEvent[];
  /** The target stand-in's event log. */
  target: Logged<TargetEvent>[];
  /** Outcome rows' status and reason by record key. */
  rows: Map<string, { status: string; reason?: string }>;
  /** Record keys of the DLQ's messages. */
  dlqKeys: string[];
  /** Messages left in the jobs queue (visible + in flight). */
  queueLeft: number;
  /** Every log file of the run, concatenated. */
  logText: string;
  /** Strings that must appear in no log, e.g. the API key. */
  secrets: string[];
  /** The stand-in's token shape (local/standins/captchaai/http.ts makeToken): no match may be in a log either. */
  tokenPattern?: RegExp;
  /** A batch cancelled mid-run: its records, when the cancel returned (epoch ms) and the workers' bound (ms). */
  cancel?: { keys: ReadonlySet<string>; at: number; boundMs: number };
}

/**
 * Slack on the deadline check: the stand-in stamps in.php when it arrives, the worker starts its
 * deadline when it sends, so two stamps of one gap differ by the network's jitter.
 */
export const DEADLINE_SLACK_MS = 50;

/**
 * Slack on the cancel's bound: the worker asks the cancel, then sends in.php (or writes the
 * posting marker and POSTs); the stand-in stamps the request when it arrives, which on a loaded
 * machine can be a few hundred ms later. A worker acting on "not cancelled" long after the bound
 * (the failure this catches) is seconds to minutes late.
 */
export const CANCEL_SLACK_MS = 1_000;

export interface ChaosFigures {
  records: number;
  /** Most tasks holding threads at once, as the stand-in counted after each change. */
  maxThreadsHeld: number;
  cap: number;
  inPhpTotal: number;
  /** Records by their number of in.php calls: {"1": 990, "2": 10}. */
  inPhpPerRecord: Record<string, number>;
  /** Records by their number of form POSTs that reached the target. */
  postsPerRecord: Record<string, number>;
  outcomes: Record<string, number>;
  /** failed rows by reason. */
  failedReasons: Record<string, number>;
  dlq: number;
  queueLeft: number;
  /** Lost in.php answers by kind, and POSTs whose answer the target dropped. */
  lostAnswers: Record<string, number>;
  /** res.php `get` calls per task, as the stand-in counted them. */
  resPhpPerTask: { tasks: number; mean: number; max: number };
  /** The cancelled batch: its records' outcomes, its in.php and POSTs after the cancel returned. */
  cancel?: { records: number; outcomes: Record<string, number>; inPhpAfter: number; postsAfter: number };
}

export interface ChaosVerdict {
  figures: ChaosFigures;
  /** One line per broken invariant, naming the records and what the stand-ins counted. */
  violations: string[];
}

function histogram(counts: Map<string, number>, keys: string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const key of keys) {
    const n = String(counts.get(key) ?? 0);
    out[n] = (out[n] ?? 0) + 1;
  }
  return out;
}

function bump(map: Map<string, number>, key: string, by = 1): void {
  map.set(key, (map.get(key) ?? 0) + by);
}

function few(keys: string[]): string {
  return keys.length > 8 ? `${keys.slice(0, 8).join(', ')} … (${keys.length})` : keys.join(', ');
}

/**
 * in.php per record, and the submits a record may not make: one while an earlier task of its own
 * held a thread, or one before its previous task's deadline had passed (plus the cool-down when
 * that task's answer was lost: the slot is held until such a task must be finished) unless that
 * task ended UNSOLVABLE (the one fresh resubmission).
 */
function submits(evidence: ChaosEvidence) {
  const inPhp = new Map<string, number>();
  const live = new Map<string, Set<string>>();
  // `read`: the worker was answered its end (the token, or UNSOLVABLE): the task holds no thread and
  // the worker knows it, so a new task may follow at once (after a release before the POST, say).
  const last = new Map<string, { taskId: string; t: number; lost: boolean; read: boolean }>();
  const overlaps: string[] = [];
  const early: string[] = [];
  const lost: Record<string, number> = {};
  for (const e of evidence.captcha) {
    if (e.kind === 'in.php') {
      bump(inPhp, e.record);
      const before = last.get(e.record);
      if (before && !before.read) {
        const wait = evidence.deadlineMs + (before.lost ? evidence.cooldownMs : 0);
        if (e.t - before.t < wait - DEADLINE_SLACK_MS)
          early.push(`${e.record} (${e.t - before.t} ms after task ${before.taskId}, ${wait} ms needed)`);
      }
      if (e.taskId === undefined) continue;
      const mine = live.get(e.record) ?? new Set<string>();
      if (mine.size > 0) overlaps.push(`${e.record} (task ${e.taskId} beside ${[...mine].join(', ')})`);
      mine.add(e.taskId);
      live.set(e.record, mine);
      if (e.lost !== undefined) lost[e.lost] = (lost[e.lost] ?? 0) + 1;
      last.set(e.record, { taskId: e.taskId, t: e.t, lost: e.lost !== undefined, read: false });
    } else if (e.kind === 'task-end') {
      live.get(e.record)?.delete(e.taskId);
      const before = last.get(e.record);
      if (before?.taskId === e.taskId && e.state === 'unsolvable') before.read = true;
    } else if (e.kind === 'res.php' && e.answer === 'OK') {
      const before = last.get(e.record);
      if (before?.taskId === e.taskId) before.read = true;
    }
  }
  return { inPhp, overlaps, early, lost };
}

function resPhpPerTask(events: LoggedCaptchaEvent[]): ChaosFigures['resPhpPerTask'] {
  const calls = new Map<string, number>();
  for (const e of events) if (e.kind === 'res.php') bump(calls, e.taskId);
  const counts = [...calls.values()];
  const total = counts.reduce((a, b) => a + b, 0);
  return {
    tasks: counts.length,
    mean: counts.length ? total / counts.length : 0,
    max: Math.max(0, ...counts),
  };
}

/**
 * The first moment the stand-in counted more tasks than the cap, and the tasks holding threads
 * then (record, task, ms since its in.php, its res.php calls): what an operator needs to tell
 * which path let the extra task in.
 */
export function firstOverCap(events: LoggedCaptchaEvent[], cap: number): string {
  const live = new Map<string, { record: string; t: number; polls: number }>();
  for (const e of events) {
    if (e.kind === 'in.php' && e.taskId !== undefined)
      live.set(e.taskId, { record: e.record, t: e.t, polls: 0 });
    else if (e.kind === 'res.php') {
      const task = live.get(e.taskId);
      if (task) task.polls += 1;
    } else if (e.kind === 'task-end') live.delete(e.taskId);
    if (e.inFlight > cap) {
      const tasks = [...live.entries()].map(
        ([id, task]) => `${task.record} (task ${id}, ${e.t - task.t} ms, ${task.polls} res.php)`,
      );
      return `first at ${new Date(e.t).toISOString()} on the ${e.kind} of ${e.record}; holding threads: ${tasks.join(', ')}`;
    }
  }
  return 'the moment is not in the log';
}

/**
 * The cancelled batch (docs/design.md invariant 8): no in.php of its records later than the bound
 * after the cancel returned, and no POST of a record whose answer (the res.php that gave the
 * token) came later than that; no record of another batch ends `cancelled`.
 */
function cancelChecks(evidence: ChaosEvidence, violations: string[]): ChaosFigures['cancel'] {
  const cancel = evidence.cancel;
  if (!cancel) return undefined;
  const late = cancel.at + cancel.boundMs + CANCEL_SLACK_MS;
  const inPhpLate: string[] = [];
  const answeredLate = new Set<string>();
  let inPhpAfter = 0;
  for (const e of evidence.captcha) {
    if (!cancel.keys.has(e.record) || e.t <= cancel.at) continue;
    if (e.kind === 'in.php') {
      inPhpAfter += 1;
      if (e.t > late) inPhpLate.push(`${e.record} (${e.t - cancel.at} ms after the cancel)`);
    } else if (e.kind === 'res.php' && e.answer === 'OK' && e.t > late) answeredLate.add(e.record);
  }
  let postsAfter = 0;
  const postedLate: string[] = [];
  for (const e of evidence.target) {
    if (e.kind !== 'post' || !cancel.keys.has(e.record) || e.t <= cancel.at) continue;
    postsAfter += 1;
    if (answeredLate.has(e.record)) postedLate.push(e.record);
  }
  if (inPhpLate.length)
    violations.push(`in.php of the cancelled batch after the cancel's bound: ${few(inPhpLate)}`);
  if (postedLate.length)
    violations.push(
      `a record of the cancelled batch answered after the cancel's bound was posted: ${few(postedLate)}`,
    );
  const outcomes: Record<string, number> = {};
  const wrong: string[] = [];
  for (const key of evidence.keys) {
    const status = evidence.rows.get(key)?.status ?? 'none';
    if (cancel.keys.has(key)) outcomes[status] = (outcomes[status] ?? 0) + 1;
    else if (status === 'cancelled') wrong.push(key);
  }
  if (wrong.length) violations.push(`records of another batch ended cancelled: ${few(wrong)}`);
  return { records: cancel.keys.size, outcomes, inPhpAfter, postsAfter };
}

export function checkChaos(evidence: ChaosEvidence): ChaosVerdict {
  const { keys, cap } = evidence;
  const violations: string[] = [];
  const maxThreadsHeld = evidence.captcha.reduce((m, e) => Math.max(m, e.inFlight), 0);
  if (maxThreadsHeld > cap)
    violations.push(
      `tasks holding threads reached ${maxThreadsHeld}, above the cap of ${cap}; ${firstOverCap(evidence.captcha, cap)}`,
    );

  const { inPhp, overlaps, early, lost } = submits(evidence);
  if (overlaps.length)
    violations.push(`a record submitted while its earlier task held a thread: ${few(overlaps)}`);
  if (early.length) violations.push(`a record submitted again before its task's deadline: ${few(early)}`);

  const posts = new Map<string, number>();
  for (const e of evidence.target) if (e.kind === 'post') bump(posts, e.record);
  const lostPosts = evidence.target.filter((e) => e.kind === 'post' && e.reason === 'DROPPED_AFTER_POST');
  if (lostPosts.length) lost.postDropped = lostPosts.length;
  const twice = keys.filter((k) => (posts.get(k) ?? 0) > 1);
  if (twice.length)
    violations.push(`more than one form POST: ${few(twice.map((k) => `${k} ×${posts.get(k)}`))}`);

  const outcomes: Record<string, number> = {};
  const failedReasons: Record<string, number> = {};
  const dlq = new Set(evidence.dlqKeys);
  const unended: string[] = [];
  for (const key of keys) {
    const row = evidence.rows.get(key);
    const status = row?.status ?? 'none';
    outcomes[status] = (outcomes[status] ?? 0) + 1;
    if (status === 'failed') failedReasons[row?.reason ?? '?'] = (failedReasons[row?.reason ?? '?'] ?? 0) + 1;
    if (!isFinalStatus(status) && !dlq.has(key)) unended.push(`${key} (${status})`);
  }
  if (unended.length) violations.push(`records that never ended: ${few(unended)}`);
  if (evidence.dlqKeys.length) violations.push(`DLQ not empty: ${few(evidence.dlqKeys)}`);
  if (evidence.queueLeft) violations.push(`jobs queue not empty: ${evidence.queueLeft} messages left`);
  const leaked = evidence.secrets.filter((s) => s.length >= 8 && evidence.logText.includes(s));
  if (leaked.length || evidence.tokenPattern?.test(evidence.logText))
    violations.push(`${leaked.length || 'a'} secret(s) (the key or a token) found in the logs`);
  const cancel = cancelChecks(evidence, violations);

  return {
    figures: {
      records: keys.length,
      maxThreadsHeld,
      cap,
      inPhpTotal: [...inPhp.values()].reduce((a, b) => a + b, 0),
      inPhpPerRecord: histogram(inPhp, keys),
      postsPerRecord: histogram(posts, keys),
      outcomes,
      failedReasons,
      dlq: evidence.dlqKeys.length,
      queueLeft: evidence.queueLeft,
      lostAnswers: lost,
      resPhpPerTask: resPhpPerTask(evidence.captcha),
      ...(cancel ? { cancel } : {}),
    },
    violations,
  };
}
