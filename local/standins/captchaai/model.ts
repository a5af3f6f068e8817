import { randomInt } from 'node:crypto';
import { scaledTokenLifetimeMs } from '../../../functions/captchaai/timings.js';
import type { CaptchaType } from '../../../functions/captchaai/types.js';
import { isRecord, keyFingerprint, makeToken, normalizeUrl } from './http.js';
import type { Timers } from './timers.js';
import type { StandinStats } from './types.js';
import { captchaWireLog, recordOfPageurl } from './wire.js';

/**
 * The emulated CaptchaAI account, apart from the wire (like a moto `models` module): the plan
 * (threads, key, active), the tasks (each holding one thread from creation until it is solved or
 * found unsolvable), the tokens they issue (single-use, with a lifetime) and the counters behind
 * the stats. It knows nothing of HTTP; api.ts answers requests from it.
 */

export interface Task {
  id: string;
  type: CaptchaType;
  sitekey: string;
  pageurl: string;
  state: 'pending' | 'solved' | 'unsolvable';
  token?: string;
  holdsThread: boolean;
  timer?: NodeJS.Timeout;
  finishedAt?: number;
}

/** What in.php asked for, once parsed (http.ts parseTask). */
export type TaskRequest = Pick<Task, 'type' | 'sitekey' | 'pageurl'>;

interface IssuedToken {
  sitekey: string;
  pageurl: string;
  expiresAt: number;
  used: boolean;
}

export type VerifyResult = { success: true } | { success: false; error: string };

export interface ModelOptions {
  threads: number;
  apiKey: string;
  timeScale: number;
  tokenLifetimeFloorMs: number;
}

function freshCounters(inFlight: number) {
  return {
    maxInFlight: inFlight,
    submits: 0,
    submitsByPageurl: {} as Record<string, number>,
    submitTimesByPageurl: new Map<string, number[]>(),
    submitsByType: {} as Record<string, number>,
    polls: 0,
    errors: {} as Record<string, number>,
    zeroBalance: 0,
    solved: 0,
    requestsByKey: {} as Record<string, number>,
  };
}

export class StandinModel {
  threads: number;
  apiKey: string;
  keyRevoked = false;
  planActive = true;
  /** Tasks holding a thread now. */
  inFlight = 0;
  counters = freshCounters(0);
  /** What happened on the wire, in order (wire.ts; kept across resetStats). */
  readonly wire = captchaWireLog();
  private readonly tasks = new Map<string, Task>();
  private readonly tokens = new Map<string, IssuedToken>();
  private nextTaskId = 70_000_000_000 + randomInt(1_000_000_000);
  /** Busy thread-time: `busy.ms` up to `busy.at`, plus inFlight × the time since. */
  private readonly busy = { ms: 0, at: Date.now() };

  constructor(
    private readonly o: ModelOptions,
    private readonly timers: Timers,
  ) {
    this.threads = o.threads;
    this.apiKey = o.apiKey;
  }

  busyNow(): number {
    const now = Date.now();
    this.busy.ms += this.inFlight * (now - this.busy.at);
    this.busy.at = now;
    return this.busy.ms;
  }

  resetCounters(): void {
    this.busyNow();
    this.busy.ms = 0;
    this.counters = freshCounters(this.inFlight);
  }

  countError(code: string): void {
    const c = this.counters;
    c.errors[code] = (c.errors[code] ?? 0) + 1;
    if (code === 'ERROR_ZERO_BALANCE') c.zeroBalance += 1;
  }

  countKey(key: string): void {
    const print = keyFingerprint(key);
    this.counters.requestsByKey[print] = (this.counters.requestsByKey[print] ?? 0) + 1;
  }

  /** Counts an in.php request, whatever its answer will be. */
  countSubmit(pageurl: string | null, type: CaptchaType | undefined): void {
    const c = this.counters;
    c.submits += 1;
    if (pageurl) {
      c.submitsByPageurl[pageurl] = (c.submitsByPageurl[pageurl] ?? 0) + 1;
      const times = c.submitTimesByPageurl.get(pageurl);
      if (times) times.push(Date.now());
      else c.submitTimesByPageurl.set(pageurl, [Date.now()]);
    }
    if (type) c.submitsByType[type] = (c.submitsByType[type] ?? 0) + 1;
  }

  /** The error CaptchaAI answers for this key, or undefined when it is the valid one. */
  keyError(key: string): string | undefined {
    if (key === this.apiKey) return this.keyRevoked ? 'ERROR_KEY_DOES_NOT_EXIST' : undefined;
    return key.length === 32 ? 'ERROR_KEY_DOES_NOT_EXIST' : 'ERROR_WRONG_USER_KEY';
  }

  /** Whether a new task may take a thread (else in.php answers ERROR_ZERO_BALANCE). */
  hasFreeThread(): boolean {
    return this.planActive && this.inFlight < this.threads;
  }

  /** Creates a pending task holding one thread; the caller schedules its end (`endAfter`). */
  createTask(r: TaskRequest): Task {
    const id = String(this.nextTaskId++);
    const task: Task = { id, ...r, state: 'pending', holdsThread: true };
    this.tasks.set(id, task);
    this.busyNow();
    this.inFlight += 1;
    this.counters.maxInFlight = Math.max(this.counters.maxInFlight, this.inFlight);
    return task;
  }

  /** Ends the task as `state` after `ms` (real milliseconds, already scaled). */
  endAfter(task: Task, ms: number, state: 'solved' | 'unsolvable'): void {
    task.timer = this.timers.later(ms, () => this.finish(task, state));
  }

  task(id: string): Task | undefined {
    return this.tasks.get(id);
  }

  private release(task: Task): void {
    if (!task.holdsThread) return;
    task.holdsThread = false;
    this.busyNow();
    this.inFlight -= 1;
  }

  private finish(task: Task, state: 'solved' | 'unsolvable'): void {
    task.state = state;
    task.finishedAt = Date.now();
    this.release(task);
    const record = recordOfPageurl(task.pageurl);
    this.wire.push({ kind: 'task-end', record, taskId: task.id, state, inFlight: this.inFlight });
    if (state === 'unsolvable') return;
    const token = makeToken(task.type);
    task.token = token;
    this.counters.solved += 1;
    if (task.type !== 'image') {
      const lifetimeMs = scaledTokenLifetimeMs(task.type, this.o.timeScale, this.o.tokenLifetimeFloorMs);
      this.tokens.set(token, {
        sitekey: task.sitekey,
        pageurl: normalizeUrl(task.pageurl),
        expiresAt: Date.now() + lifetimeMs,
        used: false,
      });
    }
  }

  /** A target site's check of a token (`POST /verify`). */
  verify(body: unknown): VerifyResult {
    const b = isRecord(body) ? body : {};
    const token = typeof b.token === 'string' ? b.token : '';
    const issued = this.tokens.get(token);
    if (!issued) return { success: false, error: 'TOKEN_UNKNOWN' };
    if (issued.used) return { success: false, error: 'TOKEN_USED' };
    // Verifiable once, like reCAPTCHA's siteverify: even a failed check consumes the token.
    issued.used = true;
    if (Date.now() > issued.expiresAt) return { success: false, error: 'TOKEN_EXPIRED' };
    if (b.sitekey !== issued.sitekey) return { success: false, error: 'SITEKEY_MISMATCH' };
    if (typeof b.pageurl !== 'string' || normalizeUrl(b.pageurl) !== issued.pageurl) {
      return { success: false, error: 'PAGEURL_MISMATCH' };
    }
    return { success: true };
  }

  prune(): void {
    // Keep memory bounded in long benchmarks; answers stay readable for 10 minutes.
    if (this.tasks.size + this.tokens.size < 50_000) return;
    const cutoff = Date.now() - 600_000;
    for (const [id, t] of this.tasks) {
      if (t.finishedAt !== undefined && t.finishedAt < cutoff) this.tasks.delete(id);
    }
    for (const [token, t] of this.tokens) if (t.expiresAt < cutoff) this.tokens.delete(token);
  }

  stats(): Omit<StandinStats, 'lostAnswers'> {
    const c = this.counters;
    return {
      threads: this.threads,
      inFlight: this.inFlight,
      maxInFlight: c.maxInFlight,
      submits: c.submits,
      submitsByPageurl: { ...c.submitsByPageurl },
      submitsByType: { ...c.submitsByType },
      polls: c.polls,
      errors: { ...c.errors },
      zeroBalance: c.zeroBalance,
      solved: c.solved,
      busyThreadMs: this.busyNow(),
      keyRevoked: this.keyRevoked,
      planActive: this.planActive,
      requestsByKey: { ...c.requestsByKey },
    };
  }

  submitTimes(pageurl: string): number[] {
    return [...(this.counters.submitTimesByPageurl.get(pageurl) ?? [])];
  }
}
