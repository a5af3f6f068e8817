import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { GetFunctionConfigurationCommand } from '@aws-sdk/client-lambda';
import { type RedriveResult, redrive } from '../../cli/commands/redrive.js';
import { awsContext } from '../../cli/stack.js';
import { DEFAULTS } from '../../functions/common/settings.js';
import { computeCap, readCap } from '../../functions/pipeline/cap-policy.js';
import { isFinalStatus } from '../../functions/records/store.js';
import { REPO_ROOT } from '../../local/emulator/deploy.js';
import { type LocalStack, type LocalStackOptions, startLocalStack } from '../../local/stack/local-stack.js';
import { type OutcomeRow, queueDepth, readOutcomes } from '../../local/stack/observation.js';
import { expectedOutcomes } from '../../local/stack/records.js';
import { everyRecordFinished, progressOf } from '../../local/stack/run.js';

/**
 * Shared pieces of the end-to-end suites: one deployed stack per test file (moto + the real
 * CDK app + the local runtime + both stand-ins), or, with THREADGATE_E2E_TARGET=localstack, the
 * same app deployed to a running LocalStack, which runs the functions (docs/local-stack.md
 * "LocalStack"). The tests observe the system only through AWS APIs and the stand-ins; where a
 * target cannot show something, ./target.ts chooses what they assert instead.
 *
 * Every file deploys with the same settings so the synthesized assembly is shared (cached).
 */
// 0.01: CaptchaAI's 120 s client deadline becomes 1.2 s and solves take 0.05-0.6 s. On a
// starved two-core machine a record may end POLL_TIMEOUT; the tests count final outcomes.
export const E2E = { threads: 8, reserve: 2, timeScale: 0.01 } as const;
/** The cap the local stack's adjuster sets for the E2E plan (localSettings leaves minCap and maxCap at their defaults). */
export const CAP = computeCap(E2E.threads, {
  reserve: E2E.reserve,
  minCap: DEFAULTS.minCap,
  maxCap: DEFAULTS.maxCap,
});

/**
 * `runtime: false`: no local runtime in this process (the test runs one, e.g. local/runtime/child-process.ts).
 * `targetDelays` only changes the target stand-in, so the deployment (and its cached synth) stays shared.
 */
export function startE2eStack(
  name: string,
  options: Pick<LocalStackOptions, 'runtime' | 'targetDelays'> = {},
): Promise<LocalStack> {
  return startLocalStack({
    ...E2E,
    ...options,
    logDir: join(REPO_ROOT, '.local-stack', 'e2e', `${name}-${randomBytes(3).toString('hex')}`),
  });
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
  const wanted = new Set(keys);
  const rows = new Map<string, OutcomeRow>();
  for (const row of await readOutcomes(stack)) if (wanted.has(row.record_key)) rows.set(row.record_key, row);
  return rows;
}

export function isFinal(row: OutcomeRow | undefined): boolean {
  return row !== undefined && isFinalStatus(row.status);
}

/** Every record of `bodies` finished, by the local stack's one definition (local/stack/run.ts). */
export async function allFinished(stack: LocalStack, bodies: string[]): Promise<boolean> {
  return everyRecordFinished(await progressOf(stack, expectedOutcomes(bodies), Date.now(), bodies.length));
}

export async function finalCount(stack: LocalStack, keys: Iterable<string>): Promise<number> {
  return [...(await outcomesOf(stack, keys)).values()].filter(isFinal).length;
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
