import { Annotations, ArnFormat, Duration, Stack } from 'aws-cdk-lib';
import type * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import type { CaptchaType } from '../functions/captchaai/types.js';
import { BATCH_INDEX_NAME } from '../functions/records/batch-index.js';
import { CANCEL_ITEM_ATTRIBUTES, CANCEL_KEY_PREFIX } from '../functions/records/cancellations.js';
import type { FormExpectation } from '../functions/records/form-verdict.js';
import { resolveConfig, type ThreadgateConfig } from './config.js';
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

/** A wait in ms for every CAPTCHA type, or per type (the types left out keep their default). */
export type PerCaptchaTypeMs = number | Partial<Record<CaptchaType, number>>;

/**
 * The settings of docs/configuration.md as typed props. Every one is optional, validated at
 * synth by the same rules as CDK context (infra/config.ts), with the same defaults.
 */
export interface ThreadgateProps {
  /**
   * Prefix of the function names (`<name>-worker`, …), the alarms and the dashboard, and the
   * metrics' `service` dimension.
   * Valid range: a letter, then letters, digits and hyphens, at most 50 characters.
   * @default the enclosing stack's name
   */
  readonly name?: string;
  /**
   * Target hosts the worker may contact: exact host or `*.suffix` (an optional `:port` is ignored).
   * The worker refuses to start while it is empty.
   * @default []
   */
  readonly allowedHosts?: readonly string[];
  /**
   * DNS servers (`ip` or `ip:port`) that resolve target hosts instead of Lambda's resolver, reachable from the internet (the functions run outside any VPC).
   * @default [] (the system resolver)
   */
  readonly dnsServers?: readonly string[];
  /**
   * Plan threads kept free for anything else using the same CaptchaAI key (cap = threads − reserve).
   * Valid range: 0–10000.
   * @default 1
   */
  readonly reserve?: number;
  /**
   * Cap deployed before the cap adjuster's first run (reserved concurrency and mapping maximum).
   * Valid range: 1–1000 × lanes, and within minCap..maxCap.
   * @default 4
   */
  readonly initialCap?: number;
  /**
   * The adjuster never sets a lower cap (a pause is not a cap of 0).
   * Valid range: 1–1000, and at most maxCap.
   * @default 1
   */
  readonly minCap?: number;
  /**
   * The adjuster never sets a higher cap; a plan above it leaves threads idle (logged, metric
   * `CapClampedByMax`, shown by `threadgate status`): set it only to clamp on purpose.
   * Valid range: 1–1000 × lanes (r ≤ 1000 invocations, the mapping's limit, of `lanes` lanes).
   * @default 1000 × lanes
   */
  readonly maxCap?: number;
  /**
   * CaptchaAI base URL.
   * Valid range: an absolute http(s) URL.
   * @default 'https://ocr.captchaai.com'
   */
  readonly captchaaiUrl?: string;
  /**
   * Name (not ARN) of the Secrets Manager secret holding the API key, created outside the stack.
   * Valid range: 1–512 characters of letters, digits and `/_+=.@-`.
   * @default 'threadgate/captchaai-api-key'
   */
  readonly secretName?: string;
  /**
   * Multiplies every CaptchaAI wait, deadline and HTTP timeout of the worker's client.
   * Valid range: 0.0001–10.
   * @default 1
   */
  readonly timeScale?: number;
  /**
   * Timeout of each HTTP call to the target form, in ms (real time).
   * Valid range: 100–120000.
   * @default 15000
   */
  readonly targetTimeoutMs?: number;
  /**
   * How long a record that hit the CaptchaAI deadline keeps its slot, in ms (real time).
   * Valid range: 0–600000.
   * @default 60000
   */
  readonly cooldownMs?: number;
  /**
   * Wait between two res.php polls of one task, in ms (× timeScale): one number for every type, or per type.
   * Valid range: 500–60000 for each type.
   * @default 3000 for reCAPTCHA, 2000 for Turnstile and image
   */
  readonly pollIntervalMs?: PerCaptchaTypeMs;
  /**
   * Wait from the submit to the first res.php poll, in ms (× timeScale): one number for every type, or per type.
   * Valid range: 0–120000 for each type.
   * @default 15000 for reCAPTCHA, 5000 for Turnstile and image
   */
  readonly firstPollMs?: PerCaptchaTypeMs;
  /**
   * Most res.php polls of one task on the static schedule, the last kept for the deadline.
   * Valid range: 2–19.
   * @default 17
   */
  readonly pollBudget?: number;
  /**
   * `learned` (polls placed from each environment's own solve times, per type) or `static`
   * (firstPollMs, pollIntervalMs and pollBudget, pinned).
   * @default 'learned'
   */
  readonly pollSchedule?: 'learned' | 'static';
  /**
   * Mean res.php calls per solve the learned schedule may spend.
   * Valid range: 1–19.
   * @default 12
   */
  readonly pollMeanBudget?: number;
  /**
   * How long after its start a worker invocation keeps taking the next message itself, one record
   * at a time, the next task submitted as soon as the previous answer is in hand (0: one record per
   * invocation). Added to the default timeout within Lambda's 900 s.
   * Valid range: 0–900.
   * @default 120 × timeScale
   */
  readonly chainSeconds?: number;
  /**
   * The most lanes (one-task loops) per worker invocation: r invocations of L lanes carry the cap
   * (r × L ≤ cap), the duration bill and quota fall by about L (docs/design.md "Lanes").
   * Valid range: 1–64.
   * @default 1
   */
  readonly lanes?: number;
  /**
   * Worker timeout in seconds; a value below the worst-case attempt is refused.
   * Valid range: 1–900, and at least the worst case of one record.
   * @default the worst case of one record (773 s) plus chainSeconds (893 s at the defaults), at least 10, at most 900
   */
  readonly workerTimeoutSeconds?: number;
  /**
   * Worker memory in MB; the default rests on peak RSS measured as Lambda runs it with 1, 8 and 16 lanes, extrapolated above 16.
   * Valid range: 128–10240.
   * @default 168 with one lane; 192 up to 8 lanes, 256 up to 16, then 8 more per lane
   */
  readonly workerMemoryMb?: number;
  /**
   * Receives before SQS moves a message to the DLQ.
   * Valid range: 5–1000.
   * @default 5
   */
  readonly maxReceiveCount?: number;
  /**
   * Receives after which the worker records a transient failure instead of retrying.
   * Valid range: 1–1000, and below maxReceiveCount.
   * @default 3
   */
  readonly transientReceiveLimit?: number;
  /**
   * How long a record's in-progress claim lasts, in seconds.
   * Valid range: 1–43200, and above workerTimeoutSeconds.
   * @default workerTimeoutSeconds + 10 % (at least + 5)
   */
  readonly leaseSeconds?: number;
  /**
   * Visibility timeout of the jobs queue in seconds: how soon the message of an invocation that died comes back.
   * Valid range: 1–43200, and at least workerTimeoutSeconds.
   * @default 6 × the worker timeout
   */
  readonly visibilityTimeoutSeconds?: number;
  /**
   * Threshold of the oldest-job alarm, in seconds.
   * Valid range: 60–1209600.
   * @default 3600
   */
  readonly oldestMessageAlarmSeconds?: number;
  /**
   * Retention of the functions' log groups, in days.
   * Valid range: a CloudWatch Logs retention value (1, 3, 5, 7, 14, 30, 60, 90, … 3653).
   * @default 30
   */
  readonly logRetentionDays?: number;
  /**
   * SNS topic ARN every alarm notifies.
   * @default none
   */
  readonly alarmTopicArn?: string;
  /**
   * Publish every final outcome to an outcomes queue (table stream → publisher Lambda → SQS).
   * @default true
   */
  readonly outcomeStream?: boolean;
  /**
   * The default `expect` block for jobs without one: which answers of the form count as accepted
   * (`status`), and text that must (`body_includes`) or must not (`body_excludes`) be in the
   * answer, or where its redirect must go (`location`). A job's own block replaces it whole.
   * Validated at synth by the job schema's rules.
   * @default none (2xx/3xx = submitted)
   */
  readonly expect?: FormExpectation;
  /**
   * Add the stack outputs the `threadgate` CLI reads (QueueUrl, TableName, …) under their plain
   * names, so `threadgate status --stack <stack>` finds this deployment. One Threadgate per
   * stack can have them.
   * @default true
   */
  readonly stackOutputs?: boolean;
}

// Every deploy-time setting is a prop (the stack name is `name`): adding a setting to
// ThreadgateConfig without a prop here fails `tsc`.
type MissingProps = Exclude<keyof ThreadgateConfig, keyof ThreadgateProps | 'stackName'>;
const everySettingIsAProp: [MissingProps] extends [never] ? true : MissingProps = true;
void everySettingIsAProp;

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

    const outcomes = new OutcomesTable(this, 'Outcomes', { stream: config.outcomeStream });
    const outcomeStream = config.outcomeStream
      ? new OutcomeStream(this, 'OutcomeStream', { config, table: outcomes.table })
      : undefined;
    const queues = new JobQueues(this, 'Jobs', {
      visibilityTimeout: Duration.seconds(config.visibilityTimeoutSeconds),
      maxReceiveCount: config.maxReceiveCount,
    });
    // The learned poll schedule's environments share their solve times; a static one needs none.
    const solveTimes =
      config.pollSchedule === 'learned' ? new SolveTimesTable(this, 'SolveTimes') : undefined;
    const ledger = new SlotLedgerTable(this, 'SlotLedger');
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
