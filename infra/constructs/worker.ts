import { ArnFormat, Duration, Stack } from 'aws-cdk-lib';
import type * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import * as sources from 'aws-cdk-lib/aws-lambda-event-sources';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { DEFAULTS } from '../../functions/common/settings.js';
import { mappingMaximumFor } from '../../functions/pipeline/cap-policy.js';
import { laneShape } from '../../functions/pipeline/lanes.js';
import { readWorkerConfig } from '../../functions/worker/config.js';
import type { ThreadgateConfig } from '../config.js';
import { BundledFunction } from './bundled-function.js';
import type { SlotLedgerTable } from './slot-ledger-table.js';
import type { SolveTimesTable } from './solve-times-table.js';

/** Powertools metrics namespace shared by the worker and the cap adjuster. */
export const METRICS_NAMESPACE = DEFAULTS.metricsNamespace;

export interface WorkerProps {
  readonly config: ThreadgateConfig;
  readonly queue: sqs.IQueue;
  readonly dlq: sqs.IQueue;
  readonly table: dynamodb.ITable;
  /** Where environments share solve times (the learned poll schedule); none: each learns alone. */
  readonly solveTimes?: SolveTimesTable;
  /** Where every invocation takes its lanes (functions/pipeline/ledger.ts), and the state item. */
  readonly ledger: SlotLedgerTable;
}

/**
 * The worker: one invocation per job message (batch size 1, so one invocation is at most one
 * solve), reserved concurrency = cap as the hard ceiling, and the mapping's MaximumConcurrency
 * = cap so the poller never takes more batches than the cap (no throttling, honest receive counts).
 */
export class Worker extends Construct {
  readonly fn: lambda.IFunction;
  readonly functionName: string;
  readonly role: iam.IRole;
  readonly mapping: sources.SqsEventSource;
  readonly bundled: BundledFunction;
  /** Get/Update on this stack's jobs-queue mapping only (a separate policy; see grantMappingControl). */
  readonly mappingPolicy: iam.Policy;

  constructor(scope: Construct, id: string, props: WorkerProps) {
    super(scope, id);
    const { config } = props;
    this.functionName = `${config.stackName}-worker`;
    const firstShape = laneShape(config.initialCap, config.lanes);

    const environment: Record<string, string> = {
      TABLE_NAME: props.table.tableName,
      QUEUE_URL: props.queue.queueUrl,
      QUEUE_ARN: props.queue.queueArn,
      DLQ_URL: props.dlq.queueUrl,
      CAPTCHAAI_URL: config.captchaaiUrl,
      CAPTCHAAI_SECRET_NAME: config.secretName,
      TIME_SCALE: String(config.timeScale),
      ALLOWED_HOSTS: config.allowedHosts.join(','),
      ...(config.dnsServers.length > 0 ? { DNS_SERVERS: config.dnsServers.join(',') } : {}),
      LEASE_SECONDS: String(config.leaseSeconds),
      QUEUE_VISIBILITY_SECONDS: String(config.visibilityTimeoutSeconds),
      CHAIN_SECONDS: String(config.chainSeconds),
      ...(config.lanes > 1 ? { LANES: String(config.lanes) } : {}),
      TRANSIENT_RECEIVE_LIMIT: String(config.transientReceiveLimit),
      TARGET_TIMEOUT_MS: String(config.targetTimeoutMs),
      COOLDOWN_MS: String(config.cooldownMs),
      CAPTCHAAI_POLL_INTERVAL_MS: JSON.stringify(config.pollIntervalMs),
      CAPTCHAAI_FIRST_POLL_MS: JSON.stringify(config.firstPollMs),
      CAPTCHAAI_POLL_BUDGET: String(config.pollBudget),
      CAPTCHAAI_POLL_SCHEDULE: config.pollSchedule,
      CAPTCHAAI_POLL_MEAN_BUDGET: String(config.pollMeanBudget),
      ...(props.solveTimes ? { SOLVE_TIMES_TABLE: props.solveTimes.table.tableName } : {}),
      LEDGER_TABLE: props.ledger.table.tableName,
      INITIAL_CAP: String(config.initialCap),
      ...(config.outcomeRetentionDays > 0
        ? { OUTCOME_RETENTION_DAYS: String(config.outcomeRetentionDays) }
        : {}),
      ...(config.expect ? { FORM_EXPECT: JSON.stringify(config.expect) } : {}),
      // The stack name as the service dimension keeps two stacks' metrics apart.
      POWERTOOLS_SERVICE_NAME: config.stackName,
      POWERTOOLS_METRICS_NAMESPACE: METRICS_NAMESPACE,
    };
    // Deploy-time validation with the worker's own parser: a value the worker would refuse at start
    // fails synth instead. An empty allowlist stays a synth warning (the worker names ALLOWED_HOSTS).
    if (config.allowedHosts.length > 0) {
      readWorkerConfig({ ...environment, AWS_LAMBDA_FUNCTION_NAME: this.functionName });
    }

    this.bundled = new BundledFunction(this, 'Worker', {
      functionName: this.functionName,
      entry: 'functions/worker.ts',
      description: 'threadgate worker: solves one job through CaptchaAI and posts the form',
      timeout: Duration.seconds(config.workerTimeoutSeconds),
      logRetentionDays: config.logRetentionDays,
      logLevel: config.logLevel,
      // r of the first shape: the cap itself with one lane (functions/pipeline/lanes.ts).
      reservedConcurrentExecutions: firstShape.r,
      // The default rests on the peak RSS of one environment measured as Lambda runs it, a Node
      // process under the runtime's heap flags (docs/benchmark-notes.md "Worker memory").
      memorySize: config.workerMemoryMb,
      // Parsing the 2.4 MB source map at load raises the environment's peak RSS by about 8 MB
      // (docs/benchmark-notes.md "Worker memory"), paid by every slot every second; the worker's
      // errors are logged by name and message, and a stack can be mapped with the bundle's map.
      runtimeSourceMaps: false,
      environment,
    });
    this.fn = this.bundled.fn;
    this.role = this.bundled.role;

    this.mapping = new sources.SqsEventSource(props.queue, {
      batchSize: 1,
      reportBatchItemFailures: true,
      // Reserved concurrency = r holds it, so an r of 1 (a cap of 1) needs no mapping maximum.
      maxConcurrency: mappingMaximumFor(firstShape.r, true),
      enabled: true,
    });
    this.bundled.fn.addEventSource(this.mapping);

    // Stop-class records go to the DLQ with their reason, written by the worker itself.
    props.dlq.grantSendMessages(this.role);
    // Claims and outcomes: conditional updates (which create the row) and a read of an existing row.
    iam.Grant.addToPrincipal({
      grantee: this.role,
      actions: ['dynamodb:GetItem', 'dynamodb:UpdateItem'],
      resourceArns: [props.table.tableArn],
    });
    props.solveTimes?.grantExchange(this.role);
    // The leases, and the state item: its reads (state and shape) and the pause's write.
    props.ledger.grantLeases(this.role);
    secretsmanager.Secret.fromSecretNameV2(this, 'ApiKey', config.secretName).grantRead(this.role);
    this.mappingPolicy = this.grantMappingControl(this, 'PauseOwnMapping', this.role);
  }

  /**
   * Lets `role` find, read and update (disable; the adjuster also resizes) ONE event source
   * mapping, this worker's. This must be a separate policy, not the role's default policy: the
   * function depends on its role's default policy, and the mapping depends on the function, so a
   * default-policy statement naming the mapping would be a dependency cycle.
   * ListEventSourceMappings supports no resource-level permission, hence its `*`.
   */
  grantMappingControl(scope: Construct, id: string, role: iam.IRole): iam.Policy {
    const mappingArn = Stack.of(scope).formatArn({
      service: 'lambda',
      resource: 'event-source-mapping',
      resourceName: this.mapping.eventSourceMappingId,
      arnFormat: ArnFormat.COLON_RESOURCE_NAME,
    });
    return new iam.Policy(scope, id, {
      roles: [role],
      statements: [
        new iam.PolicyStatement({
          sid: 'ThisMappingOnly',
          actions: ['lambda:GetEventSourceMapping', 'lambda:UpdateEventSourceMapping'],
          resources: [mappingArn],
        }),
        new iam.PolicyStatement({
          sid: 'FindMapping',
          actions: ['lambda:ListEventSourceMappings'],
          resources: ['*'],
        }),
      ],
    });
  }
}
