import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { LambdaClient } from '@aws-sdk/client-lambda';
import { SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import type { Context, ScheduledEvent } from 'aws-lambda';
import { RotatingCaptchaAiClient } from './captchaai/rotating-client.js';
import { awsClientOptions } from './common/aws-clients.js';
import {
  type AdjustCapResult,
  adjustCap,
  type CapAdjusterConfig,
  readCapAdjusterConfig,
} from './pipeline/cap.js';
import { PipelineControl } from './pipeline/control.js';
import { SHAPE_SETTLE_MS } from './pipeline/lanes.js';
import { SlotLedger } from './pipeline/ledger.js';
import { ApiKeySource } from './pipeline/secret.js';

/**
 * The cap adjuster's Lambda handler, run once a minute by an EventBridge rule. It only wires
 * configuration, clients and telemetry; the work is `adjustCap` in pipeline/cap.ts.
 */
const logger = new Logger();
const metrics = new Metrics();
const lambda = new LambdaClient(awsClientOptions());
const dynamodb = new DynamoDBClient(awsClientOptions());
const secrets = new SecretsManagerClient(awsClientOptions());

let config: CapAdjusterConfig | undefined;
let control: PipelineControl | undefined;
/** The slot ledger (LEDGER_TABLE): the adjuster writes the cap there and frees dead leases. */
let ledger: SlotLedger | undefined;
let captchaai: RotatingCaptchaAiClient | undefined;

export const handler = async (
  event: Partial<ScheduledEvent> = {},
  context?: Context,
): Promise<AdjustCapResult> => {
  // Every log line of this run carries the request id, function name and cold start.
  if (context) logger.addContext(context);
  config ??= readCapAdjusterConfig(process.env);
  // Kept across runs so the mapping UUID is looked up once per instance.
  control ??= new PipelineControl({
    lambda,
    dynamodb,
    ledgerTable: config.ledgerTable,
    workerFunctionName: config.workerFunctionName,
    queueArn: config.queueArn,
    ...(config.firstShape ? { firstShape: config.firstShape } : {}),
  });
  ledger ??= new SlotLedger({ client: dynamodb, tableName: config.ledgerTable });
  // threadsinfo is one call with no waits: TIME_SCALE would only shrink its HTTP timeout, so
  // the adjuster runs at time scale 1 even on a time-scaled local stack.
  captchaai ??= new RotatingCaptchaAiClient(
    new ApiKeySource({ client: secrets, secretName: config.secretName }),
    { baseUrl: config.captchaaiUrl },
  );
  const client = captchaai;
  // A pause or resume since the last run drops the cached key (see RotatingCaptchaAiClient), so
  // the adjuster never asks threadsinfo with a key the operator has replaced.
  client.noteState(await control.readState());
  try {
    const result = await adjustCap({
      lambda,
      control,
      workerFunctionName: config.workerFunctionName,
      readThreads: () => client.threadsInfo(),
      settings: config,
      ledger,
      ...(config.lanes > 1
        ? {
            lanes: {
              lanes: config.lanes,
              workerTimeoutMs: config.workerTimeoutMs,
              settleMs: SHAPE_SETTLE_MS,
            },
          }
        : {}),
      metrics: { addMetric: (name, _unit, value) => metrics.addMetric(name, MetricUnit.Count, value) },
      logger: {
        info: (message, extra = {}) => logger.info(message, extra),
        warn: (message, extra = {}) => logger.warn(message, extra),
      },
    });
    await updateLedger(ledger);
    // A run that changes nothing is most runs (every minute, every 2 s on a time-scaled local
    // stack): debug, so the log shows what changed.
    if (result.outcome === 'unchanged')
      logger.debug('cap adjuster run', { ...result, scheduledAt: event.time });
    else logger.info('cap adjuster run', { ...result, scheduledAt: event.time });
    return result;
  } finally {
    metrics.publishStoredMetrics();
  }
};

/**
 * The lanes of leases whose owners died, freed once their tasks must be finished (a waiting
 * invocation frees them too; this does it when none waits). The cap went to the ledger first
 * thing in the run (adjustCap; every run: one write unit a minute). A failure is logged: the next
 * run tries again.
 */
async function updateLedger(ledger: SlotLedger): Promise<void> {
  try {
    const { freed } = await ledger.reclaimExpired();
    if (freed > 0) logger.info('reclaimed the lanes of expired leases', { lanesFreed: freed });
  } catch (err) {
    logger.warn('could not reclaim expired leases on the slot ledger', { errorName: (err as Error)?.name });
  }
}
