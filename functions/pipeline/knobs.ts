import {
  DeleteFunctionConcurrencyCommand,
  type LambdaClient,
  PutFunctionConcurrencyCommand,
  UpdateEventSourceMappingCommand,
} from '@aws-sdk/client-lambda';
import { type CapKnobs, MIN_MAPPING_MAX_CONCURRENCY, mappingMaximumFor } from './cap-policy.js';

/**
 * The worker's two concurrency knobs, reserved concurrency and the mapping's maximum, as the cap
 * adjuster's run (./cap.ts) writes them, and the Lambda errors those writes meet.
 */

/** What the knobs' writes need of the adjuster's deps. */
export interface KnobDeps {
  lambda: LambdaClient;
  workerFunctionName: string;
}

/** Writes the worker's two concurrency knobs toward `cap`, keeping what it wrote in `after`. */
export class KnobWriter {
  readonly after: CapKnobs;
  changed = false;
  /** PutFunctionConcurrency hit the account's unreserved minimum. */
  reservedFallback = false;

  constructor(
    private readonly deps: KnobDeps,
    private readonly logger: { warn(message: string, extra?: Record<string, unknown>): void },
    private readonly before: CapKnobs,
    private readonly mappingUuid: string,
    /** The value the knobs are written toward. */
    private cap: number,
  ) {
    this.after = { ...before };
  }

  /**
   * Lowering: the mapping first; raising: the reservation first, so reserved >= mapping maximum.
   * `target`: the value both knobs take, the cap (one lane) or r (lanes).
   */
  async apply(effectiveBefore: number | undefined, target = this.cap): Promise<void> {
    this.cap = target;
    if (effectiveBefore !== undefined && this.cap < effectiveBefore) {
      await this.setMapping();
      await this.setReserved();
      // Again, now that the reservation is known: a cap of 1 drops the maximum once reserved,
      // keeps the mapping minimum when the reservation failed.
      await this.setMapping();
    } else {
      await this.setReserved();
      await this.setMapping();
    }
  }

  private async setReserved(): Promise<void> {
    const { cap, deps, after } = this;
    if (this.before.reservedConcurrency === cap) return;
    try {
      await deps.lambda.send(
        new PutFunctionConcurrencyCommand({
          FunctionName: deps.workerFunctionName,
          ReservedConcurrentExecutions: cap,
        }),
      );
      after.reservedConcurrency = cap;
      this.changed = true;
    } catch (err) {
      if (!isUnreservedMinimumError(err)) throw err;
      this.reservedFallback = true;
      // A smaller reservation left in place would throttle below the mapping maximum and burn
      // receive counts, so drop it and let the mapping maximum alone hold the cap.
      if (this.before.reservedConcurrency !== undefined) {
        await deps.lambda.send(
          new DeleteFunctionConcurrencyCommand({ FunctionName: deps.workerFunctionName }),
        );
        after.reservedConcurrency = undefined;
        this.changed = true;
      }
      this.logger.warn(
        'cannot reserve concurrency for the worker (account unreserved minimum); the mapping maximum alone limits it',
        {
          cap,
          error: describeError(err),
          ...(cap < MIN_MAPPING_MAX_CONCURRENCY
            ? {
                note: `a cap of ${cap} cannot be held by the mapping alone; it allows ${MIN_MAPPING_MAX_CONCURRENCY}`,
              }
            : {}),
        },
      );
    }
  }

  private async setMapping(): Promise<void> {
    const { after } = this;
    // Without a reservation the mapping is the only limit, so it cannot be dropped for cap 1.
    const wanted = mappingMaximumFor(
      this.cap,
      !this.reservedFallback && after.reservedConcurrency !== undefined,
    );
    if (after.mappingMaximum === wanted) return;
    await this.deps.lambda.send(
      new UpdateEventSourceMappingCommand({
        UUID: this.mappingUuid,
        // Never Enabled: a paused pipeline stays paused. `{}` removes the maximum.
        ScalingConfig: wanted === undefined ? {} : { MaximumConcurrency: wanted },
      }),
    );
    after.mappingMaximum = wanted;
    this.changed = true;
  }
}

/** "…decreases account's UnreservedConcurrentExecution below its minimum value of [100]." */
export function isUnreservedMinimumError(err: unknown): boolean {
  const e = err as { name?: string; message?: string };
  return (
    (e.name === 'InvalidParameterValueException' || e.name === 'LimitExceededException') &&
    /UnreservedConcurrentExecution/i.test(e.message ?? '')
  );
}

/** An error as one line for a log: its name, its code when it has one, its message. */
export function describeError(err: unknown): string {
  if (err instanceof Error) {
    const code = (err as { code?: unknown }).code;
    return `${err.name}${typeof code === 'string' ? ` ${code}` : ''}: ${err.message}`;
  }
  return String(err);
}
