import { Duration } from 'aws-cdk-lib';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { readCapAdjusterConfig } from '../../functions/pipeline/cap.js';
import type { ThreadgateConfig } from '../config.js';
import { BundledFunction } from './bundled-function.js';
import type { SlotLedgerTable } from './slot-ledger-table.js';
import { METRICS_NAMESPACE, type Worker } from './worker.js';

/** EventBridge's shortest schedule; the cap follows the plan within one period. */
export const ADJUSTER_SCHEDULE = events.Schedule.rate(Duration.minutes(1));

export interface CapAdjusterProps {
  readonly config: ThreadgateConfig;
  readonly worker: Worker;
  readonly queue: sqs.IQueue;
  /** The slot ledger: the adjuster writes the cap there, frees expired leases, and reads and writes the state item. */
  readonly ledger: SlotLedgerTable;
}

/**
 * Every minute: read CaptchaAI's threadsinfo, set cap = clamp(threads − reserve, minCap, maxCap)
 * (a clamp by maxCap is logged and counted) on the worker's reserved concurrency and its mapping's
 * MaximumConcurrency (only when a value changes), and never enable a paused mapping. An
 * EventBridge rule, not an EventBridge Scheduler schedule, because moto (the local stack) cannot
 * deploy the latter.
 */
export class CapAdjuster extends Construct {
  readonly fn: lambda.IFunction;
  readonly functionName: string;
  readonly role: iam.IRole;
  readonly rule: events.Rule;
  readonly bundled: BundledFunction;
  /** Get/Update on this stack's jobs-queue mapping only (a separate policy; see Worker.grantMappingControl). */
  readonly mappingPolicy: iam.Policy;

  constructor(scope: Construct, id: string, props: CapAdjusterProps) {
    super(scope, id);
    const { config, worker } = props;
    this.functionName = `${config.stackName}-cap-adjuster`;

    const environment: Record<string, string> = {
      WORKER_FUNCTION_NAME: worker.functionName,
      QUEUE_ARN: props.queue.queueArn,
      CAPTCHAAI_URL: config.captchaaiUrl,
      CAPTCHAAI_SECRET_NAME: config.secretName,
      TIME_SCALE: String(config.timeScale),
      RESERVE: String(config.reserve),
      MIN_CAP: String(config.minCap),
      MAX_CAP: String(config.maxCap),
      ...(config.lanes > 1
        ? {
            LANES: String(config.lanes),
            // The first shape, the one the stack deployed, stands until the adjuster publishes one.
            INITIAL_CAP: String(config.initialCap),
            WORKER_TIMEOUT_SECONDS: String(config.workerTimeoutSeconds),
          }
        : {}),
      LEDGER_TABLE: props.ledger.table.tableName,
      POWERTOOLS_SERVICE_NAME: config.stackName,
      POWERTOOLS_METRICS_NAMESPACE: METRICS_NAMESPACE,
    };
    // Deploy-time validation with the adjuster's own parser: what it would refuse at start fails synth.
    readCapAdjusterConfig(environment);

    this.bundled = new BundledFunction(this, 'Adjuster', {
      functionName: this.functionName,
      entry: 'functions/cap-adjuster.ts',
      description: 'threadgate cap adjuster: keeps the worker concurrency at plan threads minus the reserve',
      // threadsinfo (its HTTP timeout scales with TIME_SCALE) plus a few Lambda and DynamoDB calls.
      timeout: Duration.seconds(60),
      logRetentionDays: config.logRetentionDays,
      logLevel: config.logLevel,
      environment,
    });
    this.fn = this.bundled.fn;
    this.role = this.bundled.role;

    this.rule = new events.Rule(this, 'Schedule', {
      ruleName: `${config.stackName}-cap-adjuster-every-minute`,
      description: 'Runs the threadgate cap adjuster once a minute',
      schedule: ADJUSTER_SCHEDULE,
      // A missed tick is replaced by the next one; retries would only pile up runs.
      targets: [new targets.LambdaFunction(this.fn, { retryAttempts: 0, maxEventAge: Duration.minutes(1) })],
    });

    // The worker's concurrency and nothing else's.
    iam.Grant.addToPrincipal({
      grantee: this.role,
      actions: [
        'lambda:GetFunctionConcurrency',
        'lambda:PutFunctionConcurrency',
        'lambda:DeleteFunctionConcurrency',
      ],
      resourceArns: [worker.fn.functionArn],
    });
    // The cap and the leases, and the state item: its pause and the lane shape it publishes.
    props.ledger.grantLeases(this.role);
    secretsmanager.Secret.fromSecretNameV2(this, 'ApiKey', config.secretName).grantRead(this.role);
    this.mappingPolicy = worker.grantMappingControl(this, 'ResizeWorkerMapping', this.role);
  }
}
