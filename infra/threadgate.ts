import { Annotations, ArnFormat, Duration, Stack } from 'aws-cdk-lib';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { BATCH_INDEX_NAME } from '../functions/records/batch-index.js';
import { CANCEL_ITEM_ATTRIBUTES, CANCEL_KEY_PREFIX } from '../functions/records/cancellations.js';
import { resolveConfig, type TableEncryptionChoice, type ThreadgateConfig } from './config.js';
import { CapAdjuster } from './constructs/cap-adjuster.js';
import { JobQueues } from './constructs/job-queues.js';
import { Monitoring } from './constructs/monitoring.js';
import { acknowledgeNagFindings } from './constructs/nag-acknowledgements.js';
import { OutcomeStream } from './constructs/outcome-stream.js';
import { OutcomesTable } from './constructs/outcomes-table.js';
import { SlotLedgerTable } from './constructs/slot-ledger-table.js';
import { SolveTimesTable } from './constructs/solve-times-table.js';
import { addStackOutputs } from './constructs/stack-outputs.js';
import { Worker } from './constructs/worker.js';
import type { ThreadgateProps } from './props.js';

export type { PerCaptchaTypeMs, ThreadgateProps } from './props.js';

/**
 * threadgate as one construct: the jobs queue and its DLQ → the worker (concurrency capped at
 * the plan's threads minus a reserve) → CaptchaAI and the target form, the outcomes table, the
 * cap adjuster on a one-minute rule, the slot ledger (which also holds the pipeline state), alarms,
 * a dashboard and (by default) the outcomes queue.
 *
 * ```ts
 * const gate = new Threadgate(this, 'Gate', { allowedHosts: ['forms.example.com'] });
 * gate.grantSendJobs(jobRole);
 * ```
 */
export class Threadgate extends Construct {
  /** The settings after validation and defaults. */
  readonly config: ThreadgateConfig;
  /** Upstream jobs send one message per record here. */
  readonly jobsQueue: sqs.Queue;
  /** Messages that failed `maxReceiveCount` times, and stop-class records with their reason. */
  readonly deadLetterQueue: sqs.Queue;
  /** One outcome row per record_key (retained when the stack is deleted). */
  readonly outcomesTable: dynamodb.Table;
  /** One message per final outcome; undefined when `outcomeStream` is false. */
  readonly outcomesQueue: sqs.Queue | undefined;
  /** The worker function. */
  readonly worker: lambda.IFunction;
  /** The parts, for wiring beyond the grants below. */
  readonly parts: {
    /** The jobs queue and its DLQ (`queue`, `dlq`). */
    readonly queues: JobQueues;
    /** The outcomes table (`table`) and its batch index. */
    readonly outcomes: OutcomesTable;
    /** The worker function (`fn`) and its jobs-queue mapping (`mapping`). */
    readonly worker: Worker;
    /** The cap adjuster function (`fn`) and its one-minute rule (`rule`). */
    readonly adjuster: CapAdjuster;
    /** The alarms and the dashboard. */
    readonly monitoring: Monitoring;
    /** The outcomes queue, its publisher (`fn`) and failure queue (`failures`); none with `outcomeStream: false`. */
    readonly outcomeStream: OutcomeStream | undefined;
    /** The shared solve times of the learned poll schedule (none with `pollSchedule: 'static'`). */
    readonly solveTimes: SolveTimesTable | undefined;
    /**
     * The slot ledger (`table`): lanes held per invocation, so the cap holds after a crash; and the
     * state item, the pipeline state the worker pauses and `threadgate resume` clears, with the lane shape.
     */
    readonly ledger: SlotLedgerTable;
  };

  constructor(scope: Construct, id: string, props: ThreadgateProps = {}) {
    super(scope, id);
    const { name, stackOutputs = true, ...settings } = props;
    const config = resolveConfig({ ...settings, stackName: name ?? Stack.of(this).stackName });
    this.config = config;

    if (config.allowedHosts.length === 0) {
      Annotations.of(this).addWarningV2(
        'threadgate:allowedHosts',
        'allowedHosts is empty: the worker refuses to run until it names the target hosts (e.g. -c allowedHosts=host1,*.example.com)',
      );
    }

    const encryption = tableEncryptionOf(config.tableEncryption);
    const outcomes = new OutcomesTable(this, 'Outcomes', { stream: config.outcomeStream, encryption });
    const outcomeStream = config.outcomeStream
      ? new OutcomeStream(this, 'OutcomeStream', { config, table: outcomes.table })
      : undefined;
    const queues = new JobQueues(this, 'Jobs', {
      visibilityTimeout: Duration.seconds(config.visibilityTimeoutSeconds),
      maxReceiveCount: config.maxReceiveCount,
    });
    // The learned poll schedule's environments share their solve times; a static one needs none.
    const solveTimes =
      config.pollSchedule === 'learned' ? new SolveTimesTable(this, 'SolveTimes', { encryption }) : undefined;
    const ledger = new SlotLedgerTable(this, 'SlotLedger', { encryption });
    const { queue, dlq } = queues;
    const parts = { config, queue, ledger };
    const worker = new Worker(this, 'Worker', { ...parts, dlq, table: outcomes.table, solveTimes });
    const adjuster = new CapAdjuster(this, 'CapAdjuster', { ...parts, worker });
    const monitoring = new Monitoring(this, 'Monitoring', {
      stackName: config.stackName,
      queue: queues.queue,
      dlq: queues.dlq,
      worker: worker.fn,
      adjuster: adjuster.fn,
      oldestMessageAlarmSeconds: config.oldestMessageAlarmSeconds,
      alarmTopicArn: config.alarmTopicArn,
      lanes: config.lanes,
      outcomeStream: outcomeStream && { publisher: outcomeStream.fn, failures: outcomeStream.failures },
    });
    const tables = { outcomes, solveTimes, ledger };
    this.parts = { queues, ...tables, worker, adjuster, monitoring, outcomeStream };
    this.jobsQueue = queues.queue;
    this.deadLetterQueue = queues.dlq;
    this.outcomesTable = outcomes.table;
    this.outcomesQueue = outcomeStream?.queue;
    this.worker = worker.fn;

    if (stackOutputs) addStackOutputs(this, this);
    acknowledgeNagFindings({
      functions: [
        worker.bundled.fn,
        adjuster.bundled.fn,
        ...(outcomeStream ? [outcomeStream.bundled.fn] : []),
      ],
      mappingPolicies: [worker.mappingPolicy, adjuster.mappingPolicy],
      handOffQueues: outcomeStream ? [outcomeStream.queue] : [],
      streamReaderRoles: outcomeStream ? [outcomeStream.bundled.role] : [],
    });
  }

  /** Send job messages to the jobs queue: sqs:SendMessage (SendMessage and SendMessageBatch), GetQueueAttributes, GetQueueUrl. */
  grantSendJobs(grantee: iam.IGrantable): iam.Grant {
    return this.jobsQueue.grantSendMessages(grantee);
  }

  /** Read outcome rows: by key, by batch (the batch index) and by scan (`threadgate outcomes`, `wait`). */
  grantReadOutcomes(grantee: iam.IGrantable): iam.Grant {
    // The batch index by name, not `index/*` (cdk-nag reports that as a wildcard in the grantee's policy).
    return iam.Grant.addToPrincipal({
      grantee,
      actions: [
        'dynamodb:GetItem',
        'dynamodb:BatchGetItem',
        'dynamodb:Query',
        'dynamodb:Scan',
        'dynamodb:DescribeTable',
      ],
      resourceArns: [this.outcomesTable.tableArn, `${this.outcomesTable.tableArn}/index/${BATCH_INDEX_NAME}`],
    });
  }

  /**
   * Everything a producer using the Python package (`threadgate_producer`) calls: `send` (the
   * jobs queue: SendMessage, GetQueueAttributes, GetQueueUrl), `stack_outputs`
   * (cloudformation:DescribeStacks on this stack), `wait`, `batch_outcomes` and `key_outcomes`
   * (the outcome reads of {@link grantReadOutcomes}) and the pipeline state `wait` reads with
   * `state_table` (dynamodb:GetItem on the slot ledger's table, only the state item's partition
   * and only its `state`: IAM conditions on dynamodb:LeadingKeys and dynamodb:Attributes).
   */
  grantProduce(grantee: iam.IGrantable): iam.Grant {
    return [
      this.grantReadOutcomes(grantee),
      this.grantDescribeStack(grantee),
      this.parts.ledger.grantStateRead(grantee, ['state']),
    ].reduce((a, b) => a.combine(b), this.grantSendJobs(grantee));
  }

  /** Receive and delete messages of the outcomes queue. Throws when `outcomeStream` is false. */
  grantConsumeOutcomeStream(grantee: iam.IGrantable): iam.Grant {
    if (!this.outcomesQueue) {
      throw new Error(
        'grantConsumeOutcomeStream: this Threadgate has no outcomes queue (outcomeStream: false)',
      );
    }
    return this.outcomesQueue.grantConsumeMessages(grantee);
  }

  /**
   * Cancel batches (`threadgate cancel`, the Python package's `cancel()`): `dynamodb:PutItem` and
   * `dynamodb:GetItem` on the outcomes table, only on the cancel items of batches whose id starts
   * with `batchIdPrefix` (an IAM condition on `dynamodb:LeadingKeys`), and only the cancel item's
   * own attributes (`dynamodb:Attributes`), so a producer's role can cancel its own batches and
   * touch nothing else: no outcome row, no `status` or `batch_id` on a cancel item (which would
   * put it in a batch's index), no pause, no DLQ.
   * Valid range: any string; `''` is every batch.
   * @default '' (every batch)
   */
  grantCancelBatches(grantee: iam.IGrantable, batchIdPrefix = ''): iam.Grant {
    return iam.Grant.addToPrincipal({
      grantee,
      actions: ['dynamodb:PutItem', 'dynamodb:GetItem'],
      resourceArns: [this.outcomesTable.tableArn],
      conditions: {
        'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': [`${CANCEL_KEY_PREFIX}${batchIdPrefix}*`] },
        // Attribute-level access as AWS documents it: the attributes named, and no Select or
        // ReturnValues that would read or return others.
        'ForAllValues:StringEquals': { 'dynamodb:Attributes': [...CANCEL_ITEM_ATTRIBUTES] },
        StringEqualsIfExists: { 'dynamodb:Select': 'SPECIFIC_ATTRIBUTES', 'dynamodb:ReturnValues': 'NONE' },
      },
    });
  }

  /**
   * What every operator command of the CLI calls — `threadgate status`, `enqueue`, `wait`,
   * `outcomes`, `pause`, `resume`, `cancel`, `redrive` and `secret set` (test/unit/infra/operate-grant.test.ts
   * checks each against this policy): the stack's outputs, the queues' attributes, sending to the
   * jobs queue, the DLQ's messages and their move back, the worker's configuration, the one
   * jobs-queue mapping, the pipeline state and the lane shape (the state item in the slot ledger's
   * table: GetItem of both and UpdateItem of the state, only that item's partition and
   * attributes), the outcome rows, batch cancels, and the API-key secret: read (status and resume
   * ask CaptchaAI for the plan's threads with it) and written by `secret set` (CreateSecret,
   * PutSecretValue on that one secret name).
   */
  grantOperate(grantee: iam.IGrantable): iam.Grant {
    const stack = Stack.of(this);
    const { parts } = this;
    const statements: { actions: string[]; resourceArns: string[] }[] = [
      {
        actions: ['lambda:GetFunctionConfiguration'],
        resourceArns: [parts.worker.fn.functionArn, parts.adjuster.fn.functionArn],
      },
      {
        // status reads the cap in force from the worker's reserved concurrency.
        actions: ['lambda:GetFunctionConcurrency'],
        resourceArns: [parts.worker.fn.functionArn],
      },
      {
        actions: ['lambda:GetEventSourceMapping', 'lambda:UpdateEventSourceMapping'],
        resourceArns: [
          stack.formatArn({
            service: 'lambda',
            resource: 'event-source-mapping',
            resourceName: parts.worker.mapping.eventSourceMappingId,
            arnFormat: ArnFormat.COLON_RESOURCE_NAME,
          }),
        ],
      },
      {
        actions: ['sqs:StartMessageMoveTask', 'sqs:ListMessageMoveTasks', 'sqs:CancelMessageMoveTask'],
        resourceArns: [this.deadLetterQueue.queueArn],
      },
    ];
    const grant = statements
      .map((s) => iam.Grant.addToPrincipal({ grantee, ...s }))
      .reduce((a, b) => a.combine(b), this.grantDescribeStack(grantee));
    const failures = parts.outcomeStream?.failures;
    return [
      this.jobsQueue.grant(grantee, 'sqs:GetQueueAttributes', 'sqs:GetQueueUrl', 'sqs:SendMessage'),
      ...(failures ? [failures.grant(grantee, 'sqs:GetQueueAttributes')] : []),
      this.deadLetterQueue.grantConsumeMessages(grantee),
      parts.ledger.grantStateRead(grantee, ['state', 'shape']), // status reads the shape too
      parts.ledger.grantStateWrite(grantee),
      this.grantReadOutcomes(grantee),
      this.grantCancelBatches(grantee),
      iam.Grant.addToPrincipal({
        grantee,
        // `threadgate secret set` creates the secret, or rotates the key (a new version).
        actions: [
          'secretsmanager:GetSecretValue',
          'secretsmanager:DescribeSecret',
          'secretsmanager:CreateSecret',
          'secretsmanager:PutSecretValue',
        ],
        resourceArns: [
          stack.formatArn({
            service: 'secretsmanager',
            resource: 'secret',
            resourceName: `${this.config.secretName}-??????`,
            arnFormat: ArnFormat.COLON_RESOURCE_NAME,
          }),
        ],
      }),
    ].reduce((a, b) => a.combine(b), grant);
  }

  /** Read this stack's outputs: cloudformation:DescribeStacks on the enclosing stack's own ARN (its id, no wildcard). */
  private grantDescribeStack(grantee: iam.IGrantable): iam.Grant {
    return iam.Grant.addToPrincipal({
      grantee,
      actions: ['cloudformation:DescribeStacks'],
      resourceArns: [Stack.of(this).stackId],
    });
  }
}

/** The tables' encryption for the `tableEncryption` setting. */
function tableEncryptionOf(choice: TableEncryptionChoice): dynamodb.TableEncryption {
  return choice === 'aws-owned' ? dynamodb.TableEncryption.DEFAULT : dynamodb.TableEncryption.AWS_MANAGED;
}
