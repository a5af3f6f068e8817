import { Annotations, CfnOutput, Duration, Stack, type StackProps } from 'aws-cdk-lib';
import type { Construct } from 'constructs';
import {
  resolveConfig,
  settingsFromContext,
  type ThreadgateConfig,
  type ThreadgateSettings,
} from './config.js';
import { CapAdjuster } from './constructs/cap-adjuster.js';
import { JobQueues } from './constructs/job-queues.js';
import { Monitoring } from './constructs/monitoring.js';
import { acknowledgeNagFindings } from './constructs/nag-acknowledgements.js';
import { OutcomeStream } from './constructs/outcome-stream.js';
import { OutcomesTable } from './constructs/outcomes-table.js';
import { PipelineState } from './constructs/pipeline-state.js';
import { Worker } from './constructs/worker.js';
import type { OptionalStackOutputKey, StackOutputKey } from './outputs.js';

export interface ThreadgateStackProps extends StackProps {
  /** Settings that override CDK context (see infra/config.ts for every setting and its default). */
  readonly settings?: ThreadgateSettings;
}

/**
 * threadgate: jobs queue + DLQ → worker (cap-limited) → CaptchaAI, outcomes table, cap
 * adjuster on a one-minute rule, pipeline-state parameter, alarms and a dashboard.
 * Output keys are a contract (docs/design.md "Stack outputs"): the CLI and the local runtime read them.
 */
export class ThreadgateStack extends Stack {
  readonly config: ThreadgateConfig;
  readonly queues: JobQueues;
  readonly outcomes: OutcomesTable;
  readonly pipelineState: PipelineState;
  readonly worker: Worker;
  readonly adjuster: CapAdjuster;
  readonly monitoring: Monitoring;
  /** Undefined when deployed with `outcomeStream=false`. */
  readonly outcomeStream: OutcomeStream | undefined;

  constructor(scope: Construct, id: string, props: ThreadgateStackProps = {}) {
    const config = resolveConfig({
      ...settingsFromContext((key) => scope.node.tryGetContext(key)),
      stackName: props.stackName ?? id,
      ...props.settings,
    });
    super(scope, id, { ...props, stackName: config.stackName });
    this.config = config;
    this.templateOptions.description =
      'threadgate: CAPTCHA-protected form submissions through CaptchaAI, capped at plan threads minus a reserve';

    if (config.allowedHosts.length === 0) {
      Annotations.of(this).addWarningV2(
        'threadgate:allowedHosts',
        'allowedHosts is empty: the worker refuses to run until you deploy with -c allowedHosts=host1,*.example.com',
      );
    }

    this.outcomes = new OutcomesTable(this, 'Outcomes', { stream: config.outcomeStream });
    this.outcomeStream = config.outcomeStream
      ? new OutcomeStream(this, 'OutcomeStream', { config, table: this.outcomes.table })
      : undefined;
    this.queues = new JobQueues(this, 'Jobs', {
      workerTimeout: Duration.seconds(config.workerTimeoutSeconds),
      maxReceiveCount: config.maxReceiveCount,
    });
    this.pipelineState = new PipelineState(this, 'PipelineState', { stackName: config.stackName });
    this.worker = new Worker(this, 'Worker', {
      config,
      queue: this.queues.queue,
      dlq: this.queues.dlq,
      table: this.outcomes.table,
      pipelineState: this.pipelineState,
    });
    this.adjuster = new CapAdjuster(this, 'CapAdjuster', {
      config,
      worker: this.worker,
      queue: this.queues.queue,
      pipelineState: this.pipelineState,
    });
    this.monitoring = new Monitoring(this, 'Monitoring', {
      stackName: config.stackName,
      queue: this.queues.queue,
      dlq: this.queues.dlq,
      worker: this.worker.fn,
      adjuster: this.adjuster.fn,
      oldestMessageAlarmSeconds: config.oldestMessageAlarmSeconds,
      alarmTopicArn: config.alarmTopicArn,
    });

    const outputs: Record<StackOutputKey, { value: string; description: string }> = {
      QueueUrl: { value: this.queues.queue.queueUrl, description: 'Jobs queue: upstream jobs send here' },
      QueueArn: { value: this.queues.queue.queueArn, description: 'Jobs queue ARN (the mapping source)' },
      DlqUrl: { value: this.queues.dlq.queueUrl, description: 'Dead-letter queue' },
      DlqArn: { value: this.queues.dlq.queueArn, description: 'Dead-letter queue ARN (redrive source)' },
      TableName: {
        value: this.outcomes.table.tableName,
        description: 'Outcomes table (one row per record_key)',
      },
      WorkerFunctionName: { value: this.worker.fn.functionName, description: 'Worker function' },
      AdjusterFunctionName: { value: this.adjuster.fn.functionName, description: 'Cap adjuster function' },
      MappingUuid: {
        value: this.worker.mapping.eventSourceMappingId,
        description: 'Jobs queue → worker mapping',
      },
      PipelineStateParameter: {
        value: this.pipelineState.parameter.parameterName,
        description: 'SSM parameter with the pipeline state (paused or not, and why)',
      },
      AdjusterRuleName: {
        value: this.adjuster.rule.ruleName,
        description: 'One-minute rule that runs the adjuster',
      },
      SecretName: {
        value: config.secretName,
        description: 'Secrets Manager secret holding the CaptchaAI API key',
      },
    };
    const optional: Partial<Record<OptionalStackOutputKey, { value: string; description: string }>> = {};
    if (this.outcomeStream) {
      optional.OutcomesQueueUrl = {
        value: this.outcomeStream.queue.queueUrl,
        description: 'Outcomes queue: one message per final outcome (at-least-once; upsert on record_key)',
      };
    }
    for (const [key, output] of Object.entries({ ...outputs, ...optional })) new CfnOutput(this, key, output);

    acknowledgeNagFindings({
      functions: [
        this.worker.bundled.fn,
        this.adjuster.bundled.fn,
        ...(this.outcomeStream ? [this.outcomeStream.bundled.fn] : []),
      ],
      mappingPolicies: [this.worker.mappingPolicy, this.adjuster.mappingPolicy],
      handOffQueues: this.outcomeStream ? [this.outcomeStream.queue] : [],
      streamReaderRoles: this.outcomeStream ? [this.outcomeStream.bundled.role] : [],
    });
  }
}
