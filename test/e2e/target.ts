import { type CapKnobs, mappingMaximumFor, readCap } from '../../functions/pipeline/cap-policy.js';
import type { LocalStack } from '../../local/stack/local-stack.js';

/**
 * What the end-to-end suite can assert on each target (THREADGATE_E2E_TARGET), chosen in one
 * place so the choice itself is unit-tested (test/unit/fixtures/e2e-target.test.ts) and docs/local-stack.md's
 * table says the same.
 *
 * - `moto` (default): the CDK app on moto's server, its functions run by the local runtime,
 *   which follows the deployed mapping's MaximumConcurrency and the reserved concurrency with
 *   up to `cap` concurrent invocations, and fires the one-minute rule time-scaled.
 * - `localstack`: LocalStack 4.14.0 runs the functions. What it does differently, from its
 *   source at tag v4.14.0 (localstack-core/localstack/services/):
 *   - lambda_/event_source_mapping/esm_worker.py + pollers/sqs_poller.py: ONE poller thread per
 *     mapping that invokes synchronously (senders/lambda_sender.py, RequestResponse), so at most
 *     one worker invocation runs; ScalingConfig.MaximumConcurrency is stored, never applied.
 *     In flight ≤ cap holds trivially, and a shrink or growth of in flight cannot be observed.
 *   - lambda_/resource_providers/aws_lambda_function.py: create() drops
 *     ReservedConcurrentExecutions; only the adjuster's PutFunctionConcurrency sets it.
 *   - events/scheduler.py: rules are checked about once a real minute (a 59.9 s loop), not
 *     time-scaled, so each adjuster period is up to a minute plus a container start.
 *   So there the shrink/grow test becomes a check that the adjuster's PutFunctionConcurrency
 *   and UpdateEventSourceMapping values land, and the cap test runs fewer records (they are
 *   worked one at a time there).
 */
export type E2eTarget = 'moto' | 'localstack';

export interface TargetExpectations {
  target: E2eTarget;
  /** How many records the cap test feeds. */
  capRecords: number;
  /**
   * After the plan shrinks and grows: `in-flight-follows` asserts in flight at CaptchaAI falls
   * to the new cap and rises above the old one; `knobs-land` asserts the reserved concurrency
   * and the mapping maximum the adjuster writes are read back.
   */
  capChange: 'in-flight-follows' | 'knobs-land';
  /** The most a test waits for the adjuster to act on a plan change. */
  adjusterWaitMs: number;
  /** How many worker invocations can run at once: the cap, or one (LocalStack's one poller). */
  concurrentInvocations: 'cap' | 'one';
}

const EXPECTATIONS: Record<E2eTarget, TargetExpectations> = {
  moto: {
    target: 'moto',
    capRecords: 200,
    capChange: 'in-flight-follows',
    // The local runtime fires the rule every 0.6 s at time scale 0.01.
    adjusterWaitMs: 120_000,
    concurrentInvocations: 'cap',
  },
  localstack: {
    target: 'localstack',
    capRecords: 60,
    capChange: 'knobs-land',
    // Up to 60 s to the next scheduler round, plus the adjuster's container start and its calls.
    adjusterWaitMs: 150_000,
    concurrentInvocations: 'one',
  },
};

/** THREADGATE_E2E_TARGET: unset or `moto`, or `localstack`; anything else is refused by name. */
export function e2eTarget(env: NodeJS.ProcessEnv = process.env): E2eTarget {
  const raw = env.THREADGATE_E2E_TARGET?.trim() ?? '';
  if (raw === '' || raw === 'moto') return 'moto';
  if (raw === 'localstack') return 'localstack';
  throw new Error(`THREADGATE_E2E_TARGET: must be "moto" (the default) or "localstack", got "${raw}"`);
}

export function expectationsFor(target: E2eTarget): TargetExpectations {
  return EXPECTATIONS[target];
}

/**
 * The reserved concurrency and mapping maximum the adjuster leaves for `cap` when the account
 * lets it reserve (LocalStack and moto do): the cap policy's own rule, not a copy of it.
 */
export function expectedKnobs(cap: number): {
  reservedConcurrency: number;
  mappingMaximum: number | undefined;
} {
  return { reservedConcurrency: cap, mappingMaximum: mappingMaximumFor(cap, true) };
}

/** The cap knobs as deployed now (the cap policy's readCap), and whether the mapping is enabled. */
export async function readKnobs(
  stack: Pick<LocalStack, 'lambda' | 'control' | 'outputs'>,
): Promise<CapKnobs & { enabled: boolean }> {
  const reading = await readCap({
    lambda: stack.lambda,
    control: stack.control,
    workerFunctionName: stack.outputs.WorkerFunctionName,
  });
  return { ...reading.knobs, enabled: reading.mapping.enabled };
}
