import type { IncomingMessage, ServerResponse } from 'node:http';
import { eventLog, type Logged } from '../event-log.js';
import { checkSchedule, type FaultDraw, type FaultSchedule, faultDraw } from '../fault-draw.js';

/**
 * What happens on the stand-in's wire that the code under test cannot see: the stand-in's own
 * log of it, and in.php answers lost after their task was created.
 *
 * The wire log (`GET /events?since=SEQ`) holds every in.php with the task it created and what its
 * answer was (or how the answer was lost), every res.php `get` of a known task, and every task's
 * end, each with the count of tasks holding threads right after it. From it a checker sees,
 * without asking the code under test: the threads held at every instant, in.php calls per
 * record, and whether a record submitted while an earlier task of its own still held a thread.
 *
 * A lost answer: the stand-in has made the task, which holds one of the plan's threads until it
 * ends like any other, and then the answer never reaches the client the way it should — a
 * gateway's 502 page, a dropped connection, or the real answer after the client's HTTP timeout.
 * A real service's edge does this now and then, and it is the case in which a client that
 * submits again holds two threads for one record. Each kind is drawn by its own FaultSchedule
 * (every Nth in.php that created a task, or a seeded rate, optionally for some records); the
 * first kind that hits wins.
 */

export type CaptchaEvent =
  | {
      kind: 'in.php';
      /** The record: the pageurl's last path segment (forms live at /form/<record key>). */
      record: string;
      /** The task created, when one was. */
      taskId?: string;
      /** The error answered instead of a task (ERROR_ZERO_BALANCE, …). */
      error?: string;
      /** How the answer was lost after the task was created (local/standins/captchaai/faults.ts). */
      lost?: LostAnswerKind;
      inFlight: number;
    }
  | { kind: 'res.php'; record: string; taskId: string; answer: string; inFlight: number }
  | { kind: 'task-end'; record: string; taskId: string; state: 'solved' | 'unsolvable'; inFlight: number };

/** The ways an in.php answer is lost after its task was created. */
export type LostAnswerKind = 'html502' | 'drop' | 'late';

export type CaptchaWireLog = ReturnType<typeof captchaWireLog>;

export function captchaWireLog() {
  return eventLog<CaptchaEvent>();
}

/** The record a task's pageurl belongs to (its last path segment), '' for none (image tasks). */
export function recordOfPageurl(pageurl: string): string {
  try {
    return new URL(pageurl).pathname.split('/').filter(Boolean).pop() ?? '';
  } catch {
    return '';
  }
}

export type LoggedCaptchaEvent = Logged<CaptchaEvent>;

export interface LostAnswerFaults {
  /** The answer is a 502 HTML page from a gateway. */
  html502?: FaultSchedule | null;
  /** The connection is closed without an answer. */
  drop?: FaultSchedule | null;
  /** The real answer, after `lateMs` (past the client's HTTP timeout). */
  late?: FaultSchedule | null;
  /**
   * Delay of a late answer, before the time scale, and never below LATE_FLOOR_MS real.
   * @default 60000 (twice the client's HTTP timeout)
   */
  lateMs?: number;
}

/**
 * A late answer comes at least this late in real time: the worker's HTTP timeout to CaptchaAI is
 * never below MIN_CAPTCHAAI_HTTP_TIMEOUT_MS (2 s) whatever the time scale (functions/worker/config.ts),
 * and a late answer must come after it.
 */
export const LATE_FLOOR_MS = 6_000;

export const LOST_ANSWER_KINDS = ['html502', 'drop', 'late'] as const satisfies readonly LostAnswerKind[];

const GATEWAY_502 =
  '<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head><body><h1>Bad Gateway</h1>' +
  '<p>The upstream server did not answer in time.</p></body></html>\n';

export function checkLostAnswerFaults(f: unknown): LostAnswerFaults {
  if (typeof f !== 'object' || f === null || Array.isArray(f))
    throw new RangeError('lostAnswers must be an object');
  for (const [name, value] of Object.entries(f)) {
    if (name === 'lateMs') {
      if (!(typeof value === 'number' && value >= 0)) throw new RangeError('lostAnswers.lateMs must be >= 0');
    } else if ((LOST_ANSWER_KINDS as readonly string[]).includes(name)) {
      if (value !== null && value !== undefined) checkSchedule(`lostAnswers.${name}`, value);
    } else {
      throw new RangeError(`unknown lost answer "${name}" (one of ${LOST_ANSWER_KINDS.join(', ')}, lateMs)`);
    }
  }
  return f as LostAnswerFaults;
}

export interface LostAnswers {
  /** Replaces the kinds named in `f` (null switches one off). */
  set(f: LostAnswerFaults): void;
  /** For an in.php that created a task for `record`: how its answer is lost, if it is. Counts it. */
  draw(record: string): LostAnswerKind | undefined;
  /** Answers lost so far, by kind. */
  counts(): Record<LostAnswerKind, number>;
  /** Loses the answer: a 502 page, a closed connection, or `answer()` after the late delay. */
  deliver(kind: LostAnswerKind, req: IncomingMessage, res: ServerResponse, answer: () => void): Promise<void>;
}

/** `delay` waits real milliseconds (the stand-in's timers, cleared on close). */
export function lostAnswers(
  timeScale: number,
  delay: (ms: number) => Promise<void>,
  initial: LostAnswerFaults = {},
): LostAnswers {
  const draws: Partial<Record<LostAnswerKind, FaultDraw>> = {};
  const counts: Record<LostAnswerKind, number> = { html502: 0, drop: 0, late: 0 };
  let lateMs = 60_000;
  const handle: LostAnswers = {
    set(f) {
      checkLostAnswerFaults(f);
      for (const kind of LOST_ANSWER_KINDS) {
        const schedule = f[kind];
        if (schedule === null) delete draws[kind];
        else if (schedule !== undefined) draws[kind] = faultDraw(schedule);
      }
      if (f.lateMs !== undefined) lateMs = f.lateMs;
    },
    draw(record) {
      for (const kind of LOST_ANSWER_KINDS) {
        if (draws[kind]?.hit(record)) {
          counts[kind] += 1;
          return kind;
        }
      }
      return undefined;
    },
    counts: () => ({ ...counts }),
    async deliver(kind, req, res, answer) {
      if (kind === 'drop') {
        req.socket.destroy();
        return;
      }
      if (kind === 'html502') {
        res.writeHead(502, { 'content-type': 'text/html', 'content-length': Buffer.byteLength(GATEWAY_502) });
        res.end(GATEWAY_502);
        return;
      }
      await delay(Math.max(lateMs * timeScale, LATE_FLOOR_MS));
      if (!req.socket.destroyed) answer();
    },
  };
  handle.set(initial);
  return handle;
}
