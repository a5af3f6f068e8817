import { Annotations, ArnFormat, CfnOutput, Duration, Stack } from 'aws-cdk-lib';
import type * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import type { CaptchaType } from '../functions/captchaai/types.js';
import { BATCH_INDEX_NAME } from '../functions/records/store.js';
import { resolveConfig, type ThreadgateConfig } from './config.js';
import { CapAdjuster } from './constructs/cap-adjuster.js';
import { JobQueues } from './constructs/job-queues.js';
import { Monitoring } from './constructs/monitoring.js';
import { acknowledgeNagFindings } from './constructs/nag-acknowledgements.js';
import { OutcomeStream } from './constructs/outcome-stream.js';
import { OutcomesTable } from './constructs/outcomes-table.js';
import { PipelineState } from './constructs/pipeline-state.js';
import { SolveTimesTable } from './constructs/solve-times-table.js';
import { Worker } from './constructs/worker.js';
import type { OptionalStackOutputKey, StackOutputKey } from './outputs.js';

/** A wait in ms for every CAPTCHA type, or per type (the types left out keep their default). */
export type PerCaptchaTypeMs = number | Partial<Record<CaptchaType, number>>;

/**
 * The settings of docs/configuration.md as typed props. Every one is optional, validated at
 * synth by the same rules as CDK context (infra/config.ts), with the same defaults.
 */
export interface ThreadgateProps {
  /**
   * Prefix of the function names (`<name>-worker`, …), the SSM parameter `/<name>/pipeline-state`,
   * the alarms and the dashboard, and the metrics' `service` dimension. Letters, digits, hyphens, ≤ 50.
   * @default the enclosing stack's name
   */
  readonly name?: string;
  /** Target hosts the worker may contact: exact host or `*.suffix` (an optional `:port` is ignored). The worker refuses to start while it is empty. @default [] */
  readonly allowedHosts?: readonly string[];
  /** DNS servers (`ip` or `ip:port`) that resolve target hosts instead of the system resolver, e.g. a VPC resolver. @default [] (the system resolver) */
  readonly dnsServers?: readonly string[];
  /** Plan threads kept free for anything else using the same CaptchaAI key (cap = threads − reserve). @default 1 */
  readonly reserve?: number;
  /** Cap deployed before the cap adjuster's first run (reserved concurrency and mapping maximum). @default 4 */
  readonly initialCap?: number;
  /** The adjuster never sets a lower cap (≥ 1; a pause is not a cap of 0). @default 1 */
  readonly minCap?: number;
  /** The adjuster never sets a higher cap (≤ 1000, the mapping's limit). @default 100 */
  readonly maxCap?: number;
  /** CaptchaAI base URL. @default 'https://ocr.captchaai.com' */
  readonly captchaaiUrl?: string;
  /** Name (not ARN) of the Secrets Manager secret holding the API key, created outside the stack. @default 'threadgate/captchaai-api-key' */
  readonly secretName?: string;
  /** Multiplies every CaptchaAI wait, deadline and HTTP timeout of the worker's client. @default 1 */
  readonly timeScale?: number;
  /** Timeout of each HTTP call to the target form, in ms (real time). @default 15000 */
  readonly targetTimeoutMs?: number;
  /** How long a record that hit the CaptchaAI deadline keeps its slot, in ms (real time). @default 60000 */
  readonly cooldownMs?: number;
  /** Wait between two res.php polls of one task, in ms (× timeScale). @default 3000 for reCAPTCHA, 2000 for Turnstile and image */
  readonly pollIntervalMs?: PerCaptchaTypeMs;
  /** Wait from the submit to the first res.php poll, in ms (× timeScale). @default 15000 for reCAPTCHA, 5000 for Turnstile and image */
  readonly firstPollMs?: PerCaptchaTypeMs;
  /** Most res.php polls of one task, the last kept for the deadline (2..19). @default 17 */
  readonly pollBudget?: number;
  /** `learned` (polls placed from each environment's own solve times, per type) or `static` (firstPollMs, pollIntervalMs and pollBudget, pinned). @default 'learned' */
  readonly pollSchedule?: 'learned' | 'static';
  /** Mean res.php calls per solve the learned schedule may spend (1–19). @default 12 */
  readonly pollMeanBudget?: number;
  /**
   * How long after its start a worker invocation keeps taking the next message itself, one record
   * at a time, the next task submitted as soon as the previous answer is in hand (0–900 s; 0: one
   * record per invocation). Added to the default timeout within Lambda's 900 s. @default 120 × timeScale
   */
  readonly chainSeconds?: number;
  /** Worker timeout in seconds; a value below the worst-case attempt is refused. @default the worst case of one record (772 s) plus chainSeconds (892 s at the defaults), at least 10, at most 900 */
  readonly workerTimeoutSeconds?: number;
  /** Worker memory in MB (128–10240); the default rests on the worker's peak RSS measured as Lambda runs it. @default 168 */
  readonly workerMemoryMb?: number;
  /** Receives before SQS moves a message to the DLQ (≥ 5). @default 5 */
  readonly maxReceiveCount?: number;
  /** Receives after which the worker records a transient failure instead of retrying (< maxReceiveCount). @default 3 */
  readonly transientReceiveLimit?: number;
  /** How long a record's in-progress claim lasts, in seconds (> workerTimeoutSeconds). @default workerTimeoutSeconds + 10 % (at least + 5) */
  readonly leaseSeconds?: number;
  /** Visibility timeout of the jobs queue in seconds (>= the worker timeout): how soon the message of an invocation that died comes back. @default 6 × the worker timeout */
  readonly visibilityTimeoutSeconds?: number;
  /** Threshold of the oldest-job alarm, in seconds. @default 3600 */
  readonly oldestMessageAlarmSeconds?: number;
  /** Retention of the functions' log groups, in days (a CloudWatch Logs value). @default 30 */
  readonly logRetentionDays?: number;
  /** SNS topic ARN the alarms notify. @default none */
  readonly alarmTopicArn?: string;
  /** Publish every final outcome to an outcomes queue (table stream → publisher Lambda → SQS). @default true */
  readonly outcomeStream?: boolean;
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
 * cap adjuster on a one-minute rule, the pipeline-state parameter, alarms, a dashboard and
 * (by default) the outcomes queue.
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
    readonly queues: JobQueues;
    readonly outcomes: OutcomesTable;
    readonly pipelineState: PipelineState;
    readonly worker: Worker;
    readonly adjuster: CapAdjuster;
    readonly monitoring: Monitoring;
    readonly outcomeStream: OutcomeStream | undefined;
    /** The shared solve times of the learned poll schedule (none with `pollSchedule: 'static'`). */
    readonly solveTimes: SolveTimesTable | undefined;
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
    const pipelineState = new PipelineState(this, 'PipelineState', { stackName: config.stackName });
    // The learned poll schedule's environments share their solve times; a static one needs none.
    const solveTimes =
      config.pollSchedule === 'learned' ? new SolveTimesTable(this, 'SolveTimes') : undefined;
    const worker = new Worker(this, 'Worker', {
      config,
      queue: queues.queue,
      dlq: queues.dlq,
      table: outcomes.table,
      pipelineState,
      solveTimes,
    });
    const adjuster = new CapAdjuster(this, 'CapAdjuster', {
      config,
      worker,
      queue: queues.queue,
      pipelineState,
    });
    const monitoring = new Monitoring(this, 'Monitoring', {
      stackName: config.stackName,
      queue: queues.queue,
      dlq: queues.dlq,
      worker: worker.fn,
      adjuster: adjuster.fn,
      oldestMessageAlarmSeconds: config.oldestMessageAlarmSeconds,
      alarmTopicArn: config.alarmTopicArn,
      outcomeStream: outcomeStream && { publisher: outcomeStream.fn, failures: outcomeStream.failures },
    });
    this.parts = { queues, outcomes, pipelineState, worker, adjuster, monitoring, outcomeStream, solveTimes };
    this.jobsQueue = queues.queue;
    this.deadLetterQueue = queues.dlq;
    this.outcomesTable = outcomes.table;
    this.outcomesQueue = outcomeStream?.queue;
    this.worker = worker.fn;

    if (stackOutputs) this.addStackOutputs();
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

  /** Send job messages to the jobs queue (SendMessage, SendMessageBatch). */
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
   * What `threadgate status`, `pause`, `resume`, `redrive`, `wait` and `outcomes` need: the
   * stack's outputs, the queues' attributes, the DLQ's messages and their move back to the jobs
   * queue, the worker's configuration, the one jobs-queue mapping, the pipeline-state parameter,
   * the outcome rows and the API-key secret (status reads the plan's threads with it).
   */
  grantOperate(grantee: iam.IGrantable): iam.Grant {
    const stack = Stack.of(this);
    const { parts } = this;
    const statements: { actions: string[]; resourceArns: string[] }[] = [
      {
        actions: ['cloudformation:DescribeStacks'],
        resourceArns: [
          stack.formatArn({
            service: 'cloudformation',
            resource: 'stack',
            resourceName: `${stack.stackName}/*`,
          }),
        ],
      },
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
      .reduce((a, b) => a.combine(b));
    const failures = parts.outcomeStream?.failures;
    return [
      this.jobsQueue.grant(grantee, 'sqs:GetQueueAttributes', 'sqs:GetQueueUrl', 'sqs:SendMessage'),
      ...(failures ? [failures.grant(grantee, 'sqs:GetQueueAttributes')] : []),
      this.deadLetterQueue.grantConsumeMessages(grantee),
      parts.pipelineState.parameter.grantRead(grantee),
      parts.pipelineState.parameter.grantWrite(grantee),
      this.grantReadOutcomes(grantee),
      iam.Grant.addToPrincipal({
        grantee,
        actions: ['secretsmanager:GetSecretValue', 'secretsmanager:DescribeSecret'],
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

  /** The CloudFormation outputs the CLI and the local stack read, under their plain names (infra/outputs.ts). */
  private addStackOutputs(): void {
    const { parts, config } = this;
    const outputs: Record<StackOutputKey, { value: string; description: string }> = {
      QueueUrl: { value: this.jobsQueue.queueUrl, description: 'Jobs queue: upstream jobs send here' },
      QueueArn: { value: this.jobsQueue.queueArn, description: 'Jobs queue ARN (the mapping source)' },
      DlqUrl: { value: this.deadLetterQueue.queueUrl, description: 'Dead-letter queue' },
      DlqArn: { value: this.deadLetterQueue.queueArn, description: 'Dead-letter queue ARN (redrive source)' },
      TableName: {
        value: this.outcomesTable.tableName,
        description: 'Outcomes table (one row per record_key)',
      },
      WorkerFunctionName: { value: parts.worker.fn.functionName, description: 'Worker function' },
      AdjusterFunctionName: { value: parts.adjuster.fn.functionName, description: 'Cap adjuster function' },
      MappingUuid: {
        value: parts.worker.mapping.eventSourceMappingId,
        description: 'Jobs queue → worker mapping',
      },
      PipelineStateParameter: {
        value: parts.pipelineState.parameter.parameterName,
        description: 'SSM parameter with the pipeline state (paused or not, and why)',
      },
      AdjusterRuleName: {
        value: parts.adjuster.rule.ruleName,
        description: 'One-minute rule that runs the adjuster',
      },
      SecretName: {
        value: config.secretName,
        description: 'Secrets Manager secret holding the CaptchaAI API key',
      },
    };
    const optional: Partial<Record<OptionalStackOutputKey, { value: string; description: string }>> = {};
    if (this.outcomesQueue) {
      optional.OutcomesQueueUrl = {
        value: this.outcomesQueue.queueUrl,
        description: 'Outcomes queue: one message per final outcome (at-least-once; upsert on record_key)',
      };
    }
    if (parts.outcomeStream) {
      optional.OutcomeFailuresQueueUrl = {
        value: parts.outcomeStream.failures.queueUrl,
        description: 'Outcome stream records that could not be published (Lambda on-failure records)',
      };
    }
    for (const [key, output] of Object.entries({ ...outputs, ...optional })) {
      new CfnOutput(this, key, output).overrideLogicalId(key);
    }
  }
}
