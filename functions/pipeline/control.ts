import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { LambdaClient } from '@aws-sdk/client-lambda';
import { awsWaitMs } from '../common/aws-clients.js';
import { ThreadgateError } from '../common/errors.js';
import { clientOf, type LazyClient } from '../common/lazy-client.js';
import { type PublishedShape, parseShape } from './lanes.js';
import { readStateItem, writeStateItem } from './state-item.js';

/**
 * Pausing and resuming the pipeline. A pause disables the worker's SQS event source mapping
 * (messages wait in the queue, their receive counts untouched) and records why in the state item
 * (./state-item.ts) that the worker, the cap adjuster and the CLI all read. Only an operator resumes.
 */
export interface PipelineState {
  paused: boolean;
  /** Human-readable reason, e.g. "CaptchaAI answered ERROR_WRONG_USER_KEY". */
  reason?: string;
  /** Error code that caused the pause, when an error did. */
  code?: string;
  /** ISO timestamp of the last change. */
  since?: string;
  /** Who changed it: `worker`, `cap-adjuster`, `operator`. */
  by?: string;
}

export interface PipelineControlDeps {
  /**
   * The client, or a factory that makes it on first use: the worker only pauses, so its client
   * (and @aws-sdk/client-lambda, imported by each call that needs it) is loaded by a pause alone.
   */
  lambda: LazyClient<LambdaClient>;
  dynamodb: DynamoDBClient;
  /** The slot ledger's table (LEDGER_TABLE), which holds the state item (./state-item.ts). */
  ledgerTable: string;
  /** The worker function whose mapping is paused. */
  workerFunctionName: string;
  /** The jobs queue ARN (the mapping's event source). */
  queueArn: string;
  /**
   * With lanes: the shape the stack deployed (./lanes.ts LaneSettings.firstShape), read until the
   * adjuster has published one. Unset: the stack runs one lane and no shape is read.
   */
  firstShape?: PublishedShape;
  /**
   * The mapping's UUID when it is known (the stack output MappingUuid): then no
   * ListEventSourceMappings call, which has no resource-level permission, is needed.
   */
  mappingUuid?: string;
  /** Clock, for tests. */
  now?: () => Date;
  /** Waits between ResourceInUse retries; tests pass a fast one. */
  sleep?: (ms: number) => Promise<void>;
  /** The worker's time scale: the waits between ResourceInUse retries follow it (awsWaitMs). @default 1 */
  timeScale?: number;
}

/**
 * The pause reason for a stop-class CaptchaAI answer, said once. The error's message usually
 * already reads "CaptchaAI answered CODE: why"; it is not wrapped in a second "CaptchaAI
 * answered …". `call` names the CaptchaAI call that got the answer (e.g. threadsinfo).
 */
export function stopReason(code: string, message: string, call?: string): string {
  const lead = `CaptchaAI answered ${code}`;
  const rest = message.startsWith(lead) ? message.slice(lead.length) : message ? `: ${message}` : '';
  return `${lead}${call ? ` to ${call}` : ''}${rest}`;
}

/**
 * Tries of one mapping update while it answers ResourceInUse (an earlier update still being
 * applied), waiting MAPPING_UPDATE_WAIT_MS times the try's number between them
 * (functions/worker/worst-case.ts counts them in the stop path).
 */
export const MAPPING_UPDATE_TRIES = 5;
export const MAPPING_UPDATE_WAIT_MS = 500;

export class PipelineControlError extends ThreadgateError {
  override name = 'PipelineControlError';
}

export interface MappingInfo {
  uuid: string;
  enabled: boolean;
  state: string;
  batchSize?: number;
  maximumConcurrency?: number;
}

export class PipelineControl {
  private mappingUuid: string | undefined;
  private readonly now: () => Date;
  private readonly sleep: (ms: number) => Promise<void>;

  constructor(private readonly deps: PipelineControlDeps) {
    this.mappingUuid = deps.mappingUuid || undefined;
    this.now = deps.now ?? (() => new Date());
    this.sleep = deps.sleep ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms)));
  }

  /** The UUID of the worker's mapping from the jobs queue, looked up once. */
  async findMappingUuid(): Promise<string> {
    if (this.mappingUuid) return this.mappingUuid;
    const { ListEventSourceMappingsCommand } = await import('@aws-sdk/client-lambda');
    const out = await (await clientOf(this.deps.lambda)).send(
      new ListEventSourceMappingsCommand({
        FunctionName: this.deps.workerFunctionName,
        EventSourceArn: this.deps.queueArn,
      }),
    );
    const uuid = out.EventSourceMappings?.find((m) => m.EventSourceArn === this.deps.queueArn)?.UUID;
    if (!uuid) {
      throw new PipelineControlError(
        `no event source mapping from ${this.deps.queueArn} to ${this.deps.workerFunctionName}; is the stack deployed?`,
      );
    }
    this.mappingUuid = uuid;
    return uuid;
  }

  async readMapping(): Promise<MappingInfo> {
    const uuid = await this.findMappingUuid();
    const { GetEventSourceMappingCommand } = await import('@aws-sdk/client-lambda');
    const m = await (await clientOf(this.deps.lambda)).send(new GetEventSourceMappingCommand({ UUID: uuid }));
    const state = m.State ?? 'Unknown';
    return {
      uuid,
      state,
      enabled: state === 'Enabled' || state === 'Enabling' || state === 'Updating',
      batchSize: m.BatchSize,
      maximumConcurrency: m.ScalingConfig?.MaximumConcurrency,
    };
  }

  /** The pipeline state (one strongly consistent GetItem); never written yet: running. */
  async readState(): Promise<PipelineState> {
    const item = await readStateItem(this.deps.dynamodb, this.deps.ledgerTable, ['state']);
    return parseState(item.state);
  }

  /**
   * The pipeline state and the lane shape in one GetItem, for the worker, which reads both before
   * its records. Without lanes: the state alone, as readState. An unreadable shape is `undefined`
   * (the worker then runs one lane); none published yet is the first shape.
   */
  async readStateAndShape(): Promise<{ state: PipelineState; shape: PublishedShape | undefined }> {
    if (!this.deps.firstShape) return { state: await this.readState(), shape: undefined };
    const item = await readStateItem(this.deps.dynamodb, this.deps.ledgerTable, ['state', 'shape']);
    return { state: parseState(item.state), shape: this.shapeOf(item.shape) };
  }

  /** The published lane shape (the first shape until the adjuster publishes one); undefined without lanes. */
  async readShape(): Promise<PublishedShape | undefined> {
    if (!this.deps.firstShape) return undefined;
    const item = await readStateItem(this.deps.dynamodb, this.deps.ledgerTable, ['shape']);
    return this.shapeOf(item.shape);
  }

  /** Publishes the lane shape (the adjuster only): the shape attribute alone, the state left as it is. */
  async writeShape(shape: PublishedShape): Promise<void> {
    await writeStateItem(this.deps.dynamodb, this.deps.ledgerTable, 'shape', JSON.stringify(shape));
  }

  /** Disable the mapping first (that is what stops new work), then record the reason. */
  async pause(reason: string, by: string, code?: string): Promise<PipelineState> {
    await this.setMappingEnabled(false);
    const state: PipelineState = { paused: true, reason, code, since: this.now().toISOString(), by };
    await this.writeState(state);
    return state;
  }

  /** Record the resume first, then enable the mapping, so a worker never sees an enabled mapping with a stale pause. */
  async resume(by: string, reason = 'resumed by operator'): Promise<PipelineState> {
    const state: PipelineState = { paused: false, reason, since: this.now().toISOString(), by };
    await this.writeState(state);
    await this.setMappingEnabled(true);
    return state;
  }

  /** The state attribute alone: a published shape is left as it is. */
  private async writeState(state: PipelineState): Promise<void> {
    await writeStateItem(this.deps.dynamodb, this.deps.ledgerTable, 'state', JSON.stringify(state));
  }

  /** The shape attribute's value: none written yet is the first shape; one that does not parse, undefined. */
  private shapeOf(json: string | undefined): PublishedShape | undefined {
    return json === undefined ? this.deps.firstShape : parseShape(json);
  }

  private async setMappingEnabled(enabled: boolean): Promise<void> {
    const uuid = await this.findMappingUuid();
    const { UpdateEventSourceMappingCommand } = await import('@aws-sdk/client-lambda');
    const lambda = await clientOf(this.deps.lambda);
    for (let attempt = 1; ; attempt++) {
      try {
        await lambda.send(new UpdateEventSourceMappingCommand({ UUID: uuid, Enabled: enabled }));
        return;
      } catch (err) {
        // The mapping answers ResourceInUse while an earlier update is still being applied.
        if ((err as { name?: string }).name === 'ResourceInUseException' && attempt < MAPPING_UPDATE_TRIES) {
          await this.sleep(mappingUpdateWaitMs(attempt, this.deps.timeScale));
          continue;
        }
        throw err;
      }
    }
  }
}

/** The state in the item's JSON; none written yet is a running pipeline. */
export function parseState(value: string | undefined): PipelineState {
  const parsed = JSON.parse(value ?? '{}') as Partial<PipelineState>;
  return { ...parsed, paused: parsed.paused === true };
}

/** Tries of the worker's pause (worker/effects.ts) before the record is given back (PAUSE_FAILED). */
export const PAUSE_TRIES = 3;
/** The first wait between two tries; each later wait doubles it. */
export const PAUSE_BACKOFF_MS = 1_000;

/** The wait after ResourceInUse on the mapping update's try number `attempt` (1-based) at a time scale. */
export function mappingUpdateWaitMs(attempt: number, timeScale = 1): number {
  return awsWaitMs(MAPPING_UPDATE_WAIT_MS * attempt, timeScale);
}

/** The wait after the pause's try number `attempt` (1-based) at a time scale. */
export function pauseBackoffMs(attempt: number, timeScale = 1): number {
  return awsWaitMs(PAUSE_BACKOFF_MS * 2 ** (attempt - 1), timeScale);
}

/** The waits between the pause's tries, added up (the worst case counts them). */
export function pauseBackoffTotalMs(timeScale = 1): number {
  let total = 0;
  for (let attempt = 1; attempt < PAUSE_TRIES; attempt++) total += pauseBackoffMs(attempt, timeScale);
  return total;
}
