import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { awsUsage, resetAwsUsage } from '../local/emulator/usage.js';
import type { LocalStack } from '../local/stack/local-stack.js';
import { workerMapping } from '../local/stack/observation.js';
import { expectedOutcomes } from '../local/stack/records.js';
import { everyRecordFinished, feedQueue, progressOf, summarize as summarizeRun } from '../local/stack/run.js';
import type { FunctionRun } from './bill/bill.js';
import { logUsage } from './bill/log-usage.js';
import { EmulatorProbe } from './probe.js';
import type { BuildInput } from './report/types.js';
import type { ChartPoint } from './svg.js';
import { parseFunctionLog, parseInvocations, parseLearnedSchedules } from './worker-log.js';

/**
 * The benchmark's capped run: the records fed through the deployed pipeline while the
 * stand-in's threads in flight, the worker invocations in flight and the cap are sampled and the
 * emulator is probed, until every record has finished (or the pipeline paused, or time ran out);
 * then the counters and the worker's log that the report is built from.
 */

/** What the capped run needs of the benchmark's settings (bench/run.ts benchSettings). */
export interface CappedRunSettings {
  cap: number;
  records: number;
  timeScale: number;
  sampleMs: number;
  maxQueued: number;
  log: (line: string) => void;
  /** Throws once the benchmark is interrupted. */
  checkAborted: () => void;
}

/** The records to feed and the mean solve and poll wait their mix predicts (bench/run.ts benchRecords). */
export interface CappedRunRecords {
  /** The job messages, as sent. */
  bodies: string[];
  modelledMeanMs: number;
  predictedPollMs: number;
}

type Measured = Pick<
  BuildInput,
  | 'runStartedAt'
  | 'series'
  | 'busy'
  | 'invocations'
  | 'loggedInvocations'
  | 'probe'
  | 'probeRounds'
  | 'standin'
  | 'runSummary'
  | 'sqs'
  | 'workerInvocations'
  | 'memory'
  | 'timeouts'
  | 'learnedSchedules'
  | 'usage'
  | 'functionRuns'
>;

/** Each function log's size now, so that only the run's lines are read later. */
function logOffsets(logDir: string): Map<string, number> {
  const offsets = new Map<string, number>();
  for (const file of readdirSync(logDir)) {
    if (file.endsWith('.log') && file !== 'runtime.log') offsets.set(file, statSync(join(logDir, file)).size);
  }
  return offsets;
}

/**
 * Every function's invocations, billed milliseconds and log usage over the run (from the
 * offsets taken at its start). The worker's duration is priced from its invocations (time scale
 * 1) elsewhere; the others' are as measured (nothing in them is time-scaled).
 */
function functionRuns(logDir: string, before: Map<string, number>): Record<string, FunctionRun> {
  const runs: Record<string, FunctionRun> = {};
  for (const file of readdirSync(logDir)) {
    if (!file.endsWith('.log') || file === 'runtime.log') continue;
    const text = readFileSync(join(logDir, file))
      .subarray(before.get(file) ?? 0)
      .toString('utf8');
    // Per invocation, as Lambda bills: one duration however many records (and lanes) it carried.
    const invocations = parseInvocations(text);
    runs[file.slice(0, -'.log'.length)] = {
      invocations: invocations.length,
      billedMs: invocations.reduce((a, inv) => a + Math.ceil(Math.max(0, inv.durationMs ?? 0)), 0),
      log: logUsage(text),
    };
  }
  return runs;
}

/** Samples the stand-in's and the runtime's counts every `sampleMs` from `runT0`. */
function startSampler(stack: LocalStack, cap: number, sampleMs: number, runT0: number) {
  const series: ChartPoint[] = [];
  const busy: { t: number; ms: number }[] = [];
  const timer = setInterval(() => {
    const s = stack.captcha.stats();
    busy.push({ t: (performance.now() - runT0) / 1000, ms: s.busyThreadMs });
    const mapping = workerMapping(stack);
    const fn = stack.runtime?.stats().functions[stack.outputs.WorkerFunctionName];
    series.push({
      t: (performance.now() - runT0) / 1000,
      inFlight: s.inFlight,
      invocations: fn?.inFlight ?? 0,
      cap: mapping ? (mapping.enabled ? mapping.limit : 0) : cap,
      planThreads: s.threads,
    });
  }, sampleMs);
  return { series, busy, timer };
}

interface Feed {
  sendCalls: number;
  lastSent: number;
  error: unknown;
}

/** Waits until every record has finished, the pipeline paused itself or `timeoutMs` passed. */
async function waitForRun(
  stack: LocalStack,
  o: CappedRunSettings,
  run: { runT0: number; runStartedAt: number; timeoutMs: number; feed: Feed; probe: EmulatorProbe },
  expected: ReturnType<typeof expectedOutcomes>,
): Promise<void> {
  const { log, records } = o;
  let lastLog = 0;
  let lastCheck = 0;
  let done = 0;
  let finished = false;
  for (;;) {
    await sleep(250);
    const elapsed = performance.now() - run.runT0;
    // "Every record finished" as the local stack defines it (a table Scan, so every 5 s, not
    // every tick: the emulator's load is part of what the benchmark measures; the run's end is
    // the last answer, so a later check does not change a figure).
    if (elapsed - lastCheck >= 5000) {
      lastCheck = elapsed;
      const progress = await progressOf(stack, expected, run.runStartedAt, run.feed.lastSent);
      done = progress.done;
      finished = everyRecordFinished(progress);
    }
    if (elapsed - lastLog >= 5000) {
      lastLog = elapsed;
      const s = stack.captcha.stats();
      log(
        `bench: capped run ${(elapsed / 1000).toFixed(0)} s: ${done}/${records} done, ${run.feed.lastSent} sent, ` +
          `${s.inFlight} in flight (max ${s.maxInFlight}), invocations at most ${workerMapping(stack)?.limit ?? '?'}, ZERO_BALANCE ${s.zeroBalance}`,
      );
    }
    if (run.feed.error) throw run.feed.error;
    o.checkAborted();
    if (finished) break;
    if (run.probe.paused) {
      log('bench: the pipeline paused itself; stopping the capped run');
      break;
    }
    if (elapsed > run.timeoutMs) {
      log(`bench: capped run timed out after ${(elapsed / 1000).toFixed(0)} s`);
      break;
    }
  }
}

export async function cappedRun(
  stack: LocalStack,
  o: CappedRunSettings,
  work: CappedRunRecords,
  timeoutOption: number | undefined,
): Promise<{ measured: Measured; cappedS: number }> {
  const { cap, records, timeScale } = o;
  const workerName = stack.outputs.WorkerFunctionName;
  stack.captcha.resetStats();
  const deletedBefore = workerMapping(stack)?.deleted ?? 0;
  const receivedBefore = workerMapping(stack)?.received ?? 0;
  const invocationsBefore = stack.runtime?.stats().functions[workerName]?.invocations ?? 0;
  // The bill counts from here: the emulator's request counts and the functions' log lines.
  if (stack.moto) await resetAwsUsage(stack.moto.endpoint);
  const logsBefore = logOffsets(stack.logDir);
  const runStartedAt = Date.now();
  const runT0 = performance.now();
  const sampler = startSampler(stack, cap, o.sampleMs, runT0);
  const probe = new EmulatorProbe(stack, runT0);
  probe.start();
  const feed: Feed = { sendCalls: 0, lastSent: 0, error: undefined };
  const feeding = feedQueue(stack, stack.outputs.QueueUrl, work.bodies, {
    maxQueued: o.maxQueued,
    // The emulator's load is part of what is measured, and a producer does not poll its queue's
    // depth five times a second; the queue holds 2 × cap, more than a second of work.
    pollMs: 1000,
    onSent: (n) => {
      feed.sendCalls += 1;
      feed.lastSent = n;
    },
  }).catch((err: unknown) => {
    feed.error = err;
  });
  const expectedMs = ((records * (work.modelledMeanMs + work.predictedPollMs) * timeScale) / cap) * 1.2;
  const timeoutMs = timeoutOption ?? 3 * expectedMs + 120_000;
  const expected = expectedOutcomes(work.bodies);
  await waitForRun(stack, o, { runT0, runStartedAt, timeoutMs, feed, probe }, expected);
  clearInterval(sampler.timer);
  await probe.stop();
  await feeding;
  const cappedS = (performance.now() - runT0) / 1000;
  const standinStats = stack.captcha.stats();
  const progress = await progressOf(stack, expected, runStartedAt, feed.lastSent);
  const runSummary = await summarizeRun(stack, progress, runStartedAt);
  const mappingAfter = workerMapping(stack);
  const fnStats = stack.runtime?.stats().functions[workerName];
  // The runtime writes function logs through a stream; give the last lines a moment.
  await sleep(500);
  const usage = stack.moto ? (await awsUsage(stack.moto.endpoint)).calls : [];
  const logText = readFileSync(join(stack.logDir, `${workerName}.log`), 'utf8');
  const inRun = (i: { startedAt?: number }) => (i.startedAt ?? 0) >= runStartedAt - 1000;
  const invocations = parseFunctionLog(logText).filter(inRun);
  const loggedInvocations = parseInvocations(logText).filter(inRun);
  const measured: Measured = {
    runStartedAt,
    series: sampler.series,
    busy: sampler.busy,
    invocations,
    loggedInvocations,
    probe: probe.samples,
    probeRounds: probe.rounds,
    standin: {
      maxInFlight: standinStats.maxInFlight,
      zeroBalance: standinStats.zeroBalance,
      threads: standinStats.threads,
      submits: standinStats.submits,
      polls: standinStats.polls,
      solved: standinStats.solved,
      rateLimited: (standinStats.errors.ERROR_TOO_MUCH_REQUESTS ?? 0) + (standinStats.errors.HTTP_429 ?? 0),
    },
    runSummary,
    sqs: {
      sendCalls: feed.sendCalls,
      received: (mappingAfter?.received ?? 0) - receivedBefore,
      deleted: (mappingAfter?.deleted ?? 0) - deletedBefore,
    },
    workerInvocations: (fnStats?.invocations ?? 0) - invocationsBefore,
    memory: fnStats?.memory ?? { environments: [], processPeakRss: 0 },
    timeouts: fnStats?.timeouts ?? 0,
    learnedSchedules: parseLearnedSchedules(logText).filter((l) => l.at >= runStartedAt - 1000),
    usage,
    functionRuns: functionRuns(stack.logDir, logsBefore),
  };
  return { measured, cappedS };
}
