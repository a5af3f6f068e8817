import { randomBytes } from 'node:crypto';
import { appendFileSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { GetFunctionConfigurationCommand } from '@aws-sdk/client-lambda';
import { PurgeQueueCommand } from '@aws-sdk/client-sqs';
import { type RedriveResult, redrive } from '../../cli/commands/redrive.js';
import { awsContext } from '../../cli/stack.js';
import { DEFAULTS } from '../../functions/common/settings.js';
import { capCeiling, computeCap, readCap } from '../../functions/pipeline/cap-policy.js';
import { isFinalStatus } from '../../functions/records/store.js';
import { REPO_ROOT } from '../../local/emulator/deploy.js';
import { clearAwsFaults } from '../../local/emulator/fault-client.js';
import { type LocalStack, type LocalStackOptions, startLocalStack } from '../../local/stack/local-stack.js';
import { type OutcomeRow, queueDepth, readOutcomesOf, STATUS_FIELDS } from '../../local/stack/observation.js';
import { expectedOutcomes } from '../../local/stack/records.js';
import { everyRecordFinished, progressOf } from '../../local/stack/run.js';
import { NO_FAULTS } from '../../local/standins/captchaai/http.js';

/**
 * Shared pieces of the end-to-end suites: one deployed stack per test file (moto + the real
 * CDK app + the local runtime + both stand-ins), or, with THREADGATE_E2E_TARGET=localstack, the
 * same app deployed to a running LocalStack, which runs the functions (docs/local-stack.md
 * "LocalStack"). The tests observe the system only through AWS APIs and the stand-ins; where a
 * target cannot show something, ./target.ts chooses what they assert instead.
 *
 * Every file deploys with the same settings so the synthesized assembly is shared (cached); the
 * memory guard alone deploys another plan (2 threads, no reserve: two environments).
 *
 * Sharing one deployed stack between files: `sharedE2eStack(name)` instead of
 * `startE2eStack(name)` (one line; `afterAll(() => stack?.stop())` stays as it is, and then only
 * hands the stack back). The files that call it run first and one after another in each vitest
 * worker (vitest.config.ts: the e2e project is not isolated, and test/e2e/sequencer.ts orders
 * them), so a worker deploys one stack for all of them instead of one per file. Each file gets
 * the stack as a fresh one starts: no stand-in or emulator fault, 8 plan threads and the deployed
 * cap, key and pipeline as deployed, nothing running, empty queues and zeroed stand-in counters.
 * What a fresh stack has and a shared one has not: an empty outcomes table, empty stand-in event
 * logs and log files of this file alone. So a file that shares one reads rows and events of its
 * own record keys (uniquePrefix), and counters after its own resetStats(). A file that needs
 * other settings (`runtime: false`, `targetDelays`) or changes what a handover cannot restore
 * (the API key) keeps its own startE2eStack.
 */
// 0.01: CaptchaAI's 120 s client deadline becomes 1.2 s and solves take 0.05-0.6 s. On a
// starved two-core machine a record may end POLL_TIMEOUT; the tests count final outcomes.
export const E2E = { threads: 8, reserve: 2, timeScale: 0.01 } as const;
/** The cap the local stack's adjuster sets for the E2E plan (localSettings leaves minCap and maxCap at their defaults, one lane). */
export const CAP = computeCap(E2E.threads, {
  reserve: E2E.reserve,
  minCap: DEFAULTS.minCap,
  maxCap: capCeiling(1),
});

/**
 * `runtime: false`: no local runtime in this process (the test runs one, e.g. local/runtime/child-process.ts).
 * `targetDelays` only changes the target stand-in, so the deployment (and its cached synth) stays shared.
 * `threads` and `reserve` change the deployed cap, and so the settings: a synth of its own (the
 * memory guard's two environments).
 */
export function startE2eStack(
  name: string,
  options: Pick<
    LocalStackOptions,
    'runtime' | 'targetDelays' | 'threads' | 'reserve' | 'settings' | 'timeScale'
  > = {},
): Promise<LocalStack> {
  return startLocalStack({
    ...E2E,
    ...options,
    logDir: join(REPO_ROOT, '.local-stack', 'e2e', `${name}-${randomBytes(3).toString('hex')}`),
  });
}

/** How long a shared stack outlives its last file in a worker before it stops (the next file takes it over). */
const SHARED_IDLE_MS = 20_000;

interface SharedStack {
  stack: Promise<LocalStack>;
  users: number;
  idle: NodeJS.Timeout | undefined;
}
let shared: SharedStack | undefined;

/**
 * The deployed stack this vitest worker shares between e2e files (see the header), handed over in
 * the state a fresh stack starts in. Its `stop()` hands it back; the stack stops
 * {@link SHARED_IDLE_MS} after the last file handed it back, or with the worker (moto's server ends
 * when its stdin, or its connection to the suite's zygote, closes; the stand-ins and the runtime
 * live in the worker's process).
 */
export async function sharedE2eStack(name: string): Promise<LocalStack> {
  const first = shared === undefined;
  if (!shared) shared = { stack: startE2eStack('shared'), users: 0, idle: undefined };
  const entry = shared;
  clearTimeout(entry.idle);
  entry.users += 1;
  let stack: LocalStack;
  try {
    stack = await entry.stack;
  } catch (err) {
    if (shared === entry) shared = undefined;
    throw err;
  }
  if (!first) await handOver(stack);
  // Which file had the stack when: its log files hold every sharing file's lines.
  appendFileSync(join(stack.logDir, 'files.log'), `${new Date().toISOString()} ${name}\n`);
  let released = false;
  return {
    ...stack,
    stop: async () => {
      if (released) return;
      released = true;
      entry.users -= 1;
      if (entry.users > 0) return;
      entry.idle = setTimeout(() => {
        if (shared === entry) shared = undefined;
        void stack.stop();
      }, SHARED_IDLE_MS);
      entry.idle.unref();
    },
  };
}

/**
 * Brings a shared stack back to the state a fresh one starts in, as far as a test can see it
 * (header): the earlier file's faults cleared, its work ended, its queues emptied, the counters zeroed.
 */
async function handOver(stack: LocalStack): Promise<void> {
  stack.captcha.setFaults(NO_FAULTS);
  stack.captcha.setLostAnswers({ html502: null, drop: null, late: null });
  stack.captcha.setKeyRevoked(false);
  stack.captcha.setThreads(E2E.threads);
  stack.site.setFaults({ dropAfterPost: null });
  // The emulator's fault rules exist on moto only (local/emulator/faults.py).
  if (stack.moto) await clearAwsFaults(stack.moto.endpoint);
  if ((await stack.control.readState()).paused) await stack.control.resume('e2e-handover', 'next test file');
  await waitFor('the deployed cap', async () => (await deployedCap(stack)) === CAP);
  // What the earlier file left queued or held is dropped; its invocations and tasks end; what
  // they put back is dropped too.
  await purgeQueues(stack);
  await waitFor('the earlier file to finish its work', () => {
    const worker = stack.runtime?.stats().functions[stack.outputs.WorkerFunctionName];
    return (worker?.inFlight ?? 0) === 0 && stack.captcha.stats().inFlight === 0;
  });
  await purgeQueues(stack);
  stack.captcha.resetStats();
  stack.site.resetStats();
}

async function purgeQueues(stack: LocalStack): Promise<void> {
  const { QueueUrl, DlqUrl, OutcomesQueueUrl, OutcomeFailuresQueueUrl } = stack.outputs;
  for (const url of [QueueUrl, DlqUrl, OutcomesQueueUrl, OutcomeFailuresQueueUrl]) {
    if (url) await stack.sqs.send(new PurgeQueueCommand({ QueueUrl: url }));
  }
}

/** The stand-in's tokens (local/standins/captchaai/http.ts makeToken): none may reach a log. */
export const TOKEN_PATTERN = /0\.[\w-]{100,}|03A[\w-]{100,}/;

/** Every file under `dir`, concatenated (log checks). */
export function logText(dir: string): string {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => readFileSync(join(entry.parentPath, entry.name), 'utf8'))
    .join('\n');
}

/** A record-key prefix no other test (or earlier LocalStack run) uses. */
export function uniquePrefix(name: string): string {
  return `${name}-${randomBytes(3).toString('hex')}`;
}

export async function waitFor(
  what: string,
  check: () => boolean | Promise<boolean>,
  { timeoutMs = 120_000, intervalMs = 250 } = {},
): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}

/** Outcome rows of the given keys. */
export async function outcomesOf(
  stack: LocalStack,
  keys: Iterable<string>,
): Promise<Map<string, OutcomeRow>> {
  return readOutcomesOf(stack, keys);
}

export function isFinal(row: OutcomeRow | undefined): boolean {
  return row !== undefined && isFinalStatus(row.status);
}

/** Every record of `bodies` finished, by the local stack's one definition (local/stack/run.ts). */
export async function allFinished(stack: LocalStack, bodies: string[]): Promise<boolean> {
  return everyRecordFinished(await progressOf(stack, expectedOutcomes(bodies), Date.now(), bodies.length));
}

export async function finalCount(stack: LocalStack, keys: Iterable<string>): Promise<number> {
  return [...(await readOutcomesOf(stack, keys, STATUS_FIELDS)).values()].filter(isFinal).length;
}

/** DLQ messages in the DLQ now (visible or being read). */
export async function dlqCount(stack: LocalStack): Promise<number> {
  const d = await queueDepth(stack, stack.outputs.DlqUrl);
  return d.visible + d.inFlight;
}

/**
 * Moves every DLQ message back to the jobs queue with the CLI's own redrive (`threadgate
 * redrive`: StartMessageMoveTask where SQS has it and INVALID_JOB may move, else receive →
 * send → delete keeping the message attributes), with SDK clients for this stack's endpoint.
 */
export async function redriveWithCli(stack: LocalStack): Promise<RedriveResult> {
  const aws = await awsContext({
    region: stack.awsEnv.AWS_REGION,
    endpointUrl: stack.awsEnv.AWS_ENDPOINT_URL,
    credentials: {
      accessKeyId: stack.awsEnv.AWS_ACCESS_KEY_ID ?? 'testing',
      secretAccessKey: stack.awsEnv.AWS_SECRET_ACCESS_KEY ?? 'testing',
    },
  });
  return redrive(
    aws,
    {
      dlqUrl: stack.outputs.DlqUrl,
      queueUrl: stack.outputs.QueueUrl,
      queueArn: stack.outputs.QueueArn,
      max: undefined,
    },
    { note: () => undefined },
  );
}

/** The cap in force now, read back from the deployed mapping and reserved concurrency (no limit: Infinity). */
export async function deployedCap(stack: LocalStack): Promise<number> {
  const reading = await readCap({
    lambda: stack.lambda,
    control: stack.control,
    workerFunctionName: stack.outputs.WorkerFunctionName,
  });
  return reading.cap ?? Number.POSITIVE_INFINITY;
}

/**
 * Waits until the worker invocations that started under an older, higher cap have ended, so
 * at most `cap` can be running: read from the local runtime, or (LocalStack) one worker
 * timeout, the longest any invocation can last.
 */
export async function drainTo(stack: LocalStack, cap: number): Promise<void> {
  const runtime = stack.runtime;
  if (runtime) {
    await waitFor(`worker invocations to drain to ${cap}`, () => {
      const worker = runtime.stats().functions[stack.outputs.WorkerFunctionName];
      return (worker?.inFlight ?? 0) <= cap;
    });
    return;
  }
  const conf = await stack.lambda.send(
    new GetFunctionConfigurationCommand({ FunctionName: stack.outputs.WorkerFunctionName }),
  );
  await new Promise((resolve) => setTimeout(resolve, (conf.Timeout ?? 60) * 1000));
}
