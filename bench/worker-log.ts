/**
 * Reads the local runtime's function log (`<logDir>/<function>.log`): one line per entry,
 * `<ISO time> <environment id> <text>`, where the text is the runtime's own
 * `START RequestId: …` / `END RequestId: … Duration: N ms` / `ERROR …` line or a line the
 * function printed (the worker's Powertools JSON). Joins them per invocation by request id.
 */

export interface OutcomeLine {
  status: string;
  recordKey?: string;
  captchaType?: string;
  /** Epoch ms of the line. */
  at: number;
  /** The worker's per-record timings (functions/worker.ts RecordTiming), wall-clock ms. */
  totalMs?: number;
  claimMs?: number;
  /** Target HTTP outside the solve: the POST, and any part of the page load that outlasted the solve. */
  targetMs?: number;
  /** The page load, which runs while CaptchaAI solves. */
  pageMs?: number;
  solveMs?: number;
  /** res.php calls of the solve. */
  polls?: number;
  finishMs?: number;
}

export interface Invocation {
  requestId: string;
  environment: string;
  /**
   * The first invocation of its execution environment: it creates the SDK clients, reads the
   * secret and opens connections; in an environment that was not prewarmed it also loads the code.
   */
  firstInEnvironment: boolean;
  startedAt?: number;
  endedAt?: number;
  durationMs?: number;
  /** The runtime's ERROR line (e.g. `Sandbox.Timedout: …`). */
  error?: string;
  outcome?: OutcomeLine;
}

/**
 * An invocation as the log has it, before a chain is split into one entry per record: what Lambda
 * bills (one duration, however many records and lanes it carried, idle tail included).
 */
export interface LoggedInvocation extends Omit<Invocation, 'outcome'> {
  outcomes: OutcomeLine[];
}
type RawInvocation = LoggedInvocation;

const PREFIX = /^(\S+) (\S+) (.*)$/;
const START = /^START RequestId: (\S+)/;
const END = /^END RequestId: (\S+) Duration: (\d+(?:\.\d+)?) ms/;

function num(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isFinite(v) ? v : undefined;
}

/**
 * Invocations in order of their START line, one entry per record; lines of other shapes are
 * ignored. An invocation that worked a chain of records (functions/worker/chain.ts) becomes one
 * entry per record: entry k runs from record k − 1's outcome line (the invocation's start for the
 * first) to record k's (the invocation's end for the last), so the entries' durations add up to
 * the invocation's and each record carries its own timings. In a chain a record's POST runs beside
 * the next record's solve, so the split is approximate per record, exact in sum.
 */
export function parseFunctionLog(text: string): Invocation[] {
  return parseInvocations(text).flatMap(perRecord);
}

/** Invocations in order of their START line, each with all its records' outcome lines (see parseFunctionLog). */
export function parseInvocations(text: string): LoggedInvocation[] {
  const byId = new Map<string, RawInvocation>();
  // The runtime's ERROR line names no request id; it belongs to the environment's open invocation.
  const openByEnv = new Map<string, string>();
  const get = (requestId: string, environment: string) => {
    let inv = byId.get(requestId);
    if (!inv) {
      inv = { requestId, environment, firstInEnvironment: false, outcomes: [] };
      byId.set(requestId, inv);
    }
    return inv;
  };
  for (const line of text.split('\n')) {
    const m = PREFIX.exec(line);
    if (!m) continue;
    const at = Date.parse(m[1] as string);
    const env = m[2] as string;
    const rest = m[3] as string;
    const start = START.exec(rest);
    if (start) {
      get(start[1] as string, env).startedAt = at;
      openByEnv.set(env, start[1] as string);
      continue;
    }
    const end = END.exec(rest);
    if (end) {
      const inv = get(end[1] as string, env);
      inv.endedAt = at;
      inv.durationMs = Number(end[2]);
      if (openByEnv.get(env) === end[1]) openByEnv.delete(env);
      continue;
    }
    if (rest.startsWith('ERROR ')) {
      const open = openByEnv.get(env);
      if (open) get(open, env).error = rest.slice(6);
      continue;
    }
    if (!rest.startsWith('{')) continue;
    let json: Record<string, unknown>;
    try {
      json = JSON.parse(rest) as Record<string, unknown>;
    } catch {
      continue;
    }
    if (json.message !== 'outcome' || typeof json.function_request_id !== 'string') continue;
    const stamp = typeof json.timestamp === 'string' ? Date.parse(json.timestamp) : Number.NaN;
    get(json.function_request_id, env).outcomes.push({
      status: String(json.status),
      recordKey: typeof json.recordKey === 'string' ? json.recordKey : undefined,
      captchaType: typeof json.captchaType === 'string' ? json.captchaType : undefined,
      at: Number.isFinite(stamp) ? stamp : at,
      totalMs: num(json.total_ms),
      claimMs: num(json.claim_ms),
      targetMs: num(json.target_ms),
      pageMs: num(json.page_ms),
      solveMs: num(json.solve_ms),
      polls: num(json.polls),
      finishMs: num(json.finish_ms),
    });
  }
  const ordered = [...byId.values()].sort((a, b) => (a.startedAt ?? 0) - (b.startedAt ?? 0));
  const seen = new Set<string>();
  for (const inv of ordered) {
    inv.firstInEnvironment = inv.startedAt !== undefined && !seen.has(inv.environment);
    if (inv.startedAt !== undefined) seen.add(inv.environment);
  }
  return ordered;
}

/** One entry per record of an invocation (see parseFunctionLog). */
function perRecord(raw: RawInvocation): Invocation[] {
  const { outcomes, ...inv } = raw;
  if (outcomes.length <= 1) return [{ ...inv, ...(outcomes[0] ? { outcome: outcomes[0] } : {}) }];
  const sorted = [...outcomes].sort((a, b) => a.at - b.at);
  return sorted.map((outcome, k) => {
    const from = k === 0 ? inv.startedAt : sorted[k - 1]?.at;
    const to = k === sorted.length - 1 ? inv.endedAt : outcome.at;
    const durationMs =
      from !== undefined && to !== undefined && inv.durationMs !== undefined
        ? Math.max(0, to - from)
        : undefined;
    return {
      ...inv,
      requestId: `${inv.requestId}#${k}`,
      firstInEnvironment: inv.firstInEnvironment && k === 0,
      startedAt: from,
      endedAt: to,
      durationMs,
      ...(k === sorted.length - 1 ? {} : { error: undefined }),
      outcome,
    };
  });
}

/**
 * Time an invocation spent outside the solve and the target's HTTP: its duration minus the
 * worker's solve_ms and target_ms. Undefined without both the END line and the timings.
 */
export function overheadMs(inv: Invocation): number | undefined {
  const o = inv.outcome;
  if (inv.durationMs === undefined || o?.solveMs === undefined || o.targetMs === undefined) return undefined;
  return Math.max(0, inv.durationMs - o.solveMs - o.targetMs);
}

/**
 * The invocation's duration at time scale 1. Only CaptchaAI's waits are scaled (the client
 * multiplies them); the rest (AWS calls, target HTTP, start-up) runs in real time. So the solve
 * part is divided by the scale and the rest kept. Without timings (a timed-out or failed
 * invocation) the whole duration is treated as scaled, which overstates it.
 */
export function unscaledDurationMs(inv: Invocation, timeScale: number): number | undefined {
  if (inv.durationMs === undefined) return undefined;
  const solve = inv.outcome?.solveMs;
  if (solve === undefined) return inv.durationMs / timeScale;
  return inv.durationMs - solve + solve / timeScale;
}

/**
 * What one invocation bills at time scale 1: its duration once, whatever it carried. Only
 * CaptchaAI's waits are scaled, and with `lanes` L its lanes waited side by side, so the scaled
 * part of its wall time is about its records' solve time shared among the lanes that worked
 * (min(L, records)); that part is divided by the scale, the rest kept. With one lane this is the
 * sum of unscaledDurationMs over its records; at time scale 1 it is the duration as measured,
 * idle lanes and the tail after the last record included. Without timings (a timed-out or failed
 * invocation) the whole duration is treated as scaled, which overstates it.
 */
export function unscaledInvocationMs(
  inv: LoggedInvocation,
  timeScale: number,
  lanes = 1,
): number | undefined {
  if (inv.durationMs === undefined) return undefined;
  const solves = inv.outcomes.map((o) => o.solveMs).filter((v): v is number => v !== undefined);
  if (solves.length === 0) return inv.durationMs / timeScale;
  const lanesUsed = Math.max(1, Math.min(lanes, inv.outcomes.length));
  const scaled = Math.min(inv.durationMs, solves.reduce((a, b) => a + b, 0) / lanesUsed);
  return inv.durationMs - scaled + scaled / timeScale;
}

/** Records an invocation submitted (its billed duration is shared among them). */
export function submittedIn(inv: LoggedInvocation): number {
  return inv.outcomes.filter((o) => o.status === 'submitted').length;
}

/** A `poll schedule learned` line of the worker (functions/worker.ts), unscaled ms. */
export interface LearnedScheduleLine {
  environment: string;
  at: number;
  captchaType: string;
  observations: number;
  /** Of them, answers other environments shared. */
  sharedObservations: number;
  pollsMs: number[];
  expectedCalls: number;
  expectedWaitMs: number;
}

/** Every learned schedule the worker logged, in log order. */
export function parseLearnedSchedules(text: string): LearnedScheduleLine[] {
  const out: LearnedScheduleLine[] = [];
  for (const line of text.split('\n')) {
    const m = PREFIX.exec(line);
    if (!m || !(m[3] as string).startsWith('{')) continue;
    let json: Record<string, unknown>;
    try {
      json = JSON.parse(m[3] as string) as Record<string, unknown>;
    } catch {
      continue;
    }
    if (json.message !== 'poll schedule learned' || !Array.isArray(json.pollsMs)) continue;
    out.push({
      environment: m[2] as string,
      at: Date.parse(m[1] as string),
      captchaType: String(json.captchaType),
      observations: num(json.observations) ?? 0,
      sharedObservations: num(json.sharedObservations) ?? 0,
      pollsMs: json.pollsMs.filter((v): v is number => typeof v === 'number'),
      expectedCalls: num(json.expectedCalls) ?? Number.NaN,
      expectedWaitMs: num(json.expectedWaitMs) ?? Number.NaN,
    });
  }
  return out;
}
