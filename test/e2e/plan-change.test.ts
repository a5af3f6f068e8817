import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'vitest';
import { CAPTCHA_TYPES } from '../../functions/captchaai/types.js';
import { DRAIN_CLOCK_MARGIN_MS, laneShape, type PublishedShape } from '../../functions/pipeline/lanes.js';
import { addAwsFaults } from '../../local/emulator/fault-client.js';
import { LOCAL_MIN_RULE_PERIOD_MS, type LocalStack } from '../../local/stack/local-stack.js';
import { generatedRecords } from '../../local/stack/records.js';
import { feedQueue } from '../../local/stack/run.js';
import type { LoggedCaptchaEvent } from '../../local/standins/captchaai/wire.js';
import { allFinished, deployedCap, dlqCount, isFinal, outcomesOf, uniquePrefix, waitFor } from './harness.js';
import { keysOf, LanesStack, PLAN } from './lanes-stack.js';

/**
 * The cap through a plan change while tasks outlive it (the slot ledger, docs/design.md "The slot
 * ledger" and "Lanes"). At the suite's time scale of 0.01 a task ends long before the adjuster's
 * next run, so nothing that a knob change leaves running is still at CaptchaAI when the next
 * invocation starts; here the time scale is 0.1 (the adjuster runs every 6 s) and the tasks that
 * matter are held by the stand-in until the worker's deadline plus its cool-down say they must be
 * done (18 s here, neverFinish; the lane holds its slot as long), three adjuster periods, the rest
 * take 3–4 s. Counted at the stand-ins: tasks holding threads at every instant (the CaptchaAI
 * stand-in's count after each change, as local/chaos/check.ts reads it), at most one POST a record
 * at the target, every record ended, nothing in the DLQ.
 *
 * The grow: cap 17 → 18 at lanes 8 is 2 × 8 → 3 × 6. The adjuster first publishes L 6 under r 2
 * and raises r one run later; lanes 6 and 7 of the two older invocations end only once their
 * tasks have. Without the ledger the third invocation took its 6 lanes beside the 16 held: the
 * stand-in's plan of 20 was full at 20 and refused 3 more in.php (checked).
 *
 * The shrink: cap 12 → 6 at lanes 4 is 3 × 4 → 2 × 3, with the three invocations older than the
 * fall drained to 2 lanes. What the design promises through it: nothing running is recalled (a
 * task at CaptchaAI runs to its end, and a lane above the lanes now allowed ends only once its
 * record has); from the fall on an invocation takes lanes only where the ledger, counting every
 * lane still held, leaves room under the new cap, so in flight never rises above the lanes the
 * fall found held, and once the tasks sent before the fall have ended, in flight is at most the new
 * cap. Not promised: no in.php above 6 from the fall on (an older invocation's allowed lane takes
 * its next record while the others' tasks still run). The cold start: the stack starts at cap 8
 * (2 × 4, two environments warmed), the plan grows to cap 12 with nothing queued, so the third
 * slot stays empty and no environment is free; records sent just before the adjuster's next run,
 * which lowers the cap to 6, make the mapping start a third invocation in a new environment,
 * inside the drain's margin; its warm-up is slow (the key's read answered after 4 s at the
 * emulator), as when the drain counted an invocation's start after its warm-up and took it for
 * a new one. Without the ledger (checked): 4 in.php refused beside the 8 held tasks (the cold
 * invocation's 2 drained lanes, each tried twice), and at most 6 after them; with the drain's
 * start also taken after the warm-up, as before the ledger: 12 refused, and 7 after them.
 */
const TIME_SCALE = 0.1;
/** The adjuster's rule, rate(1 minute), at this time scale (the local stack's floor aside). */
const ADJUSTER_PERIOD_MS = Math.max(LOCAL_MIN_RULE_PERIOD_MS, 60_000 * TIME_SCALE);
/** Tasks that are not held: 3–4 s (unscaled 30–40 s), long enough to overlap, short enough to end the run soon. */
const QUICK = Object.fromEntries(CAPTCHA_TYPES.map((t) => [t, { minMs: 30_000, maxMs: 40_000 }]));
const capOf = (threads: number) => threads - PLAN.reserve;
/** A stack of its own and a run of about a minute; the two run side by side. */
const LONG = { timeout: 900_000 };

describe('the cap through a plan change while tasks outlive it (time scale 0.1)', () => {
  it.concurrent(
    'grow 17 → 18, 2 × 8 → 3 × 6, while lanes 6 and 7 hold tasks: never above 18',
    LONG,
    async ({ expect }) => {
      await onStack('grow', { lanes: 8, threads: 19 }, async (grow, stack) => {
        // Prepare: 26 records; the first 16 taken are held, one per lane of the two invocations
        const [before, after] = [laneShape(capOf(19), 8), laneShape(capOf(20), 8)];
        expect([before, after]).toEqual([
          { cap: 17, r: 2, L: 8 },
          { cap: 18, r: 3, L: 6 },
        ]);
        const bodies = generatedRecords(stack.site.url, stack.site.sitekey, 26, uniquePrefix('grow'));
        const keys = keysOf(bodies);
        stack.captcha.setFaults({ neverFinish: 1 });
        stack.captcha.resetStats();
        // Fed just after an adjuster run: the lanes are busy before the next one sees the plan.
        await sleep((await nextAdjusterRun(stack)) + 500 - Date.now());
        await feedQueue(stack, stack.outputs.QueueUrl, bodies, { maxQueued: bodies.length });
        await waitUpTo(60_000, () => stack.captcha.stats().inFlight >= before.r * before.L);
        stack.captcha.setFaults({ neverFinish: 0 });
        stack.captcha.setLatency(QUICK);
        // Act: the plan grows to 20 threads; watch the adjuster's two steps (bounded: four runs)
        const changedAt = Date.now();
        stack.captcha.setThreads(20);
        const steps: PublishedShape[] = [];
        const noteShape = async () => {
          const shape = await grow.publishedShape();
          if (shape && steps.at(-1)?.since !== shape.since) steps.push(shape);
        };
        let roseAt = Number.POSITIVE_INFINITY;
        await waitUpTo(4 * ADJUSTER_PERIOD_MS, async () => {
          await noteShape();
          if ((await deployedCap(stack)) < after.r) return false;
          roseAt = Date.now();
          return true;
        });
        await noteShape();
        await waitFor('every record', () => allFinished(stack, bodies), {
          timeoutMs: 300_000,
          intervalMs: 1_000,
        });
        // Assess: the smaller L was published under r 2 before r rose
        expect(steps.map(({ cap, r, L }) => ({ cap, r, L }))).toEqual([
          { cap: 17, r: 2, L: 8 },
          { cap: 18, r: 2, L: 6 },
          { cap: 18, r: 3, L: 6 },
        ]);
        // Every lane of the two older invocations, 6 and 7 among them, still held its task when r
        // rose, and the third invocation's tasks started beside them.
        const events = stack.captcha.events(0).entries;
        const held = tasksSentBefore(events, changedAt);
        const heldUntil = Math.min(...held.map((t) => t.endedAt));
        expect(held).toHaveLength(before.r * before.L);
        expect(heldUntil).toBeGreaterThan(roseAt);
        const beside = events.filter((e) => isTask(e) && e.t > roseAt && e.t < heldUntil);
        expect(beside.length).toBeGreaterThan(0);
        // In flight never above the new cap; no in.php refused for want of a thread (the stand-in's
        // plan of 20 would have refused what went beyond it).
        expect(inFlightFrom(events, 0)).toBeLessThanOrEqual(after.cap);
        expect(stack.captcha.stats().maxInFlight).toBeLessThanOrEqual(after.cap);
        expect(stack.captcha.stats().zeroBalance).toBe(0);
        expect(await endings(grow, keys)).toEqual(ENDED);
      });
    },
  );

  it.concurrent(
    'shrink 12 → 6 with a cold start at the fall: no rise past what was held, then at most 6',
    LONG,
    async ({ expect }) => {
      await onStack('shrink', { lanes: 4, threads: 10 }, async (shrink, stack) => {
        // Prepare: cap 8 (2 × 4); 8 records held, one per lane of the two warm environments
        expect(laneShape(capOf(10), 4)).toEqual({ cap: 8, r: 2, L: 4 });
        const first = generatedRecords(stack.site.url, stack.site.sitekey, 8, uniquePrefix('shrink-held'));
        const later = generatedRecords(stack.site.url, stack.site.sitekey, 12, uniquePrefix('shrink-later'));
        const bodies = [...first, ...later];
        const keys = keysOf(bodies);
        stack.captcha.setFaults({ neverFinish: 1 });
        stack.captcha.resetStats();
        await feedQueue(stack, stack.outputs.QueueUrl, first, { maxQueued: first.length });
        await waitUpTo(60_000, () => stack.captcha.stats().inFlight >= first.length);
        stack.captcha.setFaults({ neverFinish: 0 });
        stack.captcha.setLatency(QUICK);
        // The plan grows to 14 threads, cap 12 (3 × 4): nothing is queued, so the third slot stays
        // empty, and both environments are busy.
        stack.captcha.setThreads(14);
        await waitUpTo(4 * ADJUSTER_PERIOD_MS, async () => (await shrink.publishedShape())?.cap === 12);
        const grown = await shrink.publishedShape();
        // Act: the plan shrinks to 8 threads, cap 6, for the adjuster's next run. Just before it,
        // records arrive: the mapping starts the third invocation, cold.
        stack.captcha.setThreads(8);
        await addAwsFaults(stack.moto?.endpoint ?? '', [
          { operation: 'GetSecretValue', service: 'secretsmanager', delay_ms: 4_000, times: 1 },
        ]);
        await sleep((await nextAdjusterRun(stack)) - COLD_START_LEAD_MS - Date.now());
        const sentAt = Date.now();
        await feedQueue(stack, stack.outputs.QueueUrl, later, { maxQueued: later.length });
        await waitUpTo(4 * ADJUSTER_PERIOD_MS, async () => (await shrink.publishedShape())?.cap === 6);
        const shrunk = await shrink.publishedShape();
        await waitFor('every record', () => allFinished(stack, bodies), {
          timeoutMs: 300_000,
          intervalMs: 1_000,
        });
        // Assess: the fall, with its drain for the three older invocations
        expect(grown).toMatchObject({ cap: 12, r: 3, L: 4 });
        expect(shrunk).toMatchObject({ cap: 6, r: 2, L: 3, drain: { L: 2, fromR: 3 } });
        const fallAt = shrunk?.since ?? 0;
        // The cold start: a new environment, when the two there were both ran an invocation,
        // started within the drain's margin of the fall.
        const worker = stack.outputs.WorkerFunctionName;
        const started = starts(stack, worker);
        const warm = new Set(started.filter((s) => s.t < sentAt).map((s) => s.env));
        const cold = started.find((s) => s.t >= sentAt && !warm.has(s.env));
        expect(warm.size).toBe(2);
        expect(busyAt(stack, worker, sentAt)).toBe(2);
        expect(cold).toBeDefined();
        expect(Math.abs((cold?.t ?? 0) - fallAt)).toBeLessThan(DRAIN_CLOCK_MARGIN_MS);
        // The fall found every lane of the two older invocations holding its task. Nothing was
        // recalled, and nothing was asked beside them: no in.php from the fall until the first of
        // them ended, refused ones counted (the stand-in's plan of 8 is full: it refuses, with
        // ERROR_ZERO_BALANCE, what in flight cannot show).
        const events = stack.captcha.events(0).entries;
        const held = tasksSentBefore(events, fallAt);
        const firstEnd = Math.min(...held.map((t) => t.endedAt));
        expect(held).toHaveLength(8);
        expect(events.filter((e) => e.kind === 'in.php' && e.t >= fallAt && e.t < firstEnd)).toEqual([]);
        expect(stack.captcha.stats().zeroBalance).toBe(0);
        // Once they all ended: at most the new cap, at every instant.
        const drainedAt = Math.max(...held.map((t) => t.endedAt));
        expect(inFlightFrom(events, drainedAt)).toBeLessThanOrEqual(6);
        // The records sent at the fall were worked (the lanes allowed after it took them).
        const { inPhp } = shrink.wireCounts(keys);
        expect(keysOf(later).filter((k) => (inPhp.get(k) ?? 0) === 0)).toEqual([]);
        expect(await endings(shrink, keys)).toEqual(ENDED);
      });
    },
  );
});

/**
 * How long before the adjuster's next run the cold start's records are sent. The mapping starts
 * the invocation 20-200 ms after the send, and the run reads the fall's clock and lowers the
 * knobs 70-130 ms after it starts (seen), so the invocation starts about half a second before
 * the knobs fall, early enough for a busy machine, and its environment's init runs across the fall.
 */
const COLD_START_LEAD_MS = 700;

/** A lanes stack of its own at this time scale, for `body`; stopped whatever happens. */
async function onStack(
  name: string,
  o: { lanes: number; threads: number },
  body: (lanes: LanesStack, stack: LocalStack) => Promise<void>,
): Promise<void> {
  const lanes = await LanesStack.start(name, { ...o, timeScale: TIME_SCALE });
  try {
    await body(lanes, lanes.stack);
  } finally {
    await lanes.stop();
  }
}

/** How the records of `keys` ended: those without a final row, those POSTed more than once, the DLQ's depth. */
async function endings(lanes: LanesStack, keys: string[]) {
  const rows = await outcomesOf(lanes.stack, keys);
  const { posts } = lanes.wireCounts(keys);
  return {
    notFinal: keys.filter((k) => !isFinal(rows.get(k))),
    postedTwice: keys.filter((k) => (posts.get(k) ?? 0) > 1),
    dlq: await dlqCount(lanes.stack),
  };
}

/** Every record ended with its final row, none POSTed twice, nothing in the DLQ. */
const ENDED = { notFinal: [], postedTwice: [], dlq: 0 };

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

/** Waits until `check` holds or `ms` have passed: what the test asserts afterwards holds either way. */
async function waitUpTo(ms: number, check: () => boolean | Promise<boolean>): Promise<void> {
  const end = Date.now() + ms;
  while (Date.now() < end && !(await check())) await sleep(100);
}

/**
 * When the cap adjuster runs next (epoch ms): its rule fires every period, so one period after a
 * run the local runtime logged, waited for (at most two periods) when none is logged yet.
 */
async function nextAdjusterRun(stack: LocalStack): Promise<number> {
  let runs: number[] = [];
  await waitUpTo(2 * ADJUSTER_PERIOD_MS, () => {
    runs = starts(stack, stack.outputs.AdjusterFunctionName).map((s) => s.t);
    return runs.length > 0;
  });
  const last = runs.at(-1) ?? Date.now();
  return last + Math.max(1, Math.ceil((Date.now() - last) / ADJUSTER_PERIOD_MS)) * ADJUSTER_PERIOD_MS;
}

/** An in.php that made a task. */
const isTask = (e: LoggedCaptchaEvent) => e.kind === 'in.php' && e.taskId !== undefined;

/** Tasks whose in.php arrived before `t`, with when each ended (Infinity: still holding its thread). */
function tasksSentBefore(events: LoggedCaptchaEvent[], t: number): { taskId: string; endedAt: number }[] {
  const ends = new Map<string, number>();
  for (const e of events) if (e.kind === 'task-end') ends.set(e.taskId, e.t);
  return events.flatMap((e) =>
    e.kind === 'in.php' && e.taskId !== undefined && e.t < t
      ? [{ taskId: e.taskId, endedAt: ends.get(e.taskId) ?? Number.POSITIVE_INFINITY }]
      : [],
  );
}

/** The most tasks holding threads at once from `t` on, as the stand-in counted after each change. */
function inFlightFrom(events: LoggedCaptchaEvent[], t: number): number {
  const before = events.filter((e) => e.t < t).at(-1)?.inFlight ?? 0;
  return Math.max(before, ...events.filter((e) => e.t >= t).map((e) => e.inFlight));
}

/** A function's invocation starts and ends, by environment, from the local runtime's log of it. */
function invocations(
  stack: LocalStack,
  functionName: string,
): { t: number; env: string; kind: 'START' | 'END' }[] {
  let text = '';
  try {
    text = readFileSync(join(stack.logDir, `${functionName}.log`), 'utf8');
  } catch {
    // Not invoked yet.
  }
  return [...text.matchAll(/^(\S+) (\S+) (START|END) RequestId/gm)].map((m) => ({
    t: Date.parse(m[1] ?? ''),
    env: m[2] ?? '',
    kind: m[3] as 'START' | 'END',
  }));
}

function starts(stack: LocalStack, functionName: string): { t: number; env: string }[] {
  return invocations(stack, functionName).filter((e) => e.kind === 'START');
}

/** Environments running an invocation of `functionName` at `t`. */
function busyAt(stack: LocalStack, functionName: string, t: number): number {
  const running = new Map<string, number>();
  for (const e of invocations(stack, functionName).filter((x) => x.t < t))
    running.set(e.env, (running.get(e.env) ?? 0) + (e.kind === 'START' ? 1 : -1));
  return [...running.values()].filter((n) => n > 0).length;
}
