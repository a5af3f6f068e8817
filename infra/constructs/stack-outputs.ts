import { CfnOutput } from 'aws-cdk-lib';
import type { Construct } from 'constructs';
import type { ThreadgateConfig } from '../config.js';
import type { OptionalStackOutputKey, StackOutputKey } from '../outputs.js';
import type { CapAdjuster } from './cap-adjuster.js';
import type { OutcomeStream } from './outcome-stream.js';
import type { SlotLedgerTable } from './slot-ledger-table.js';
import type { Worker } from './worker.js';

/** What the outputs are read from: the construct's members (infra/threadgate.ts). */
export interface StackOutputSources {
  readonly jobsQueue: { queueUrl: string; queueArn: string };
  readonly deadLetterQueue: { queueUrl: string; queueArn: string };
  readonly outcomesTable: { tableName: string };
  readonly outcomesQueue?: { queueUrl: string };
  readonly parts: {
    readonly worker: Worker;
    readonly adjuster: CapAdjuster;
    readonly ledger: SlotLedgerTable;
    readonly outcomeStream?: OutcomeStream;
  };
  readonly config: ThreadgateConfig;
}

/** Adds the CloudFormation outputs the CLI and the local stack read, under their plain names (infra/outputs.ts). */
export function addStackOutputs(scope: Construct, tg: StackOutputSources): void {
  const { parts, config } = tg;
  const outputs: Record<StackOutputKey, { value: string; description: string }> = {
    QueueUrl: { value: tg.jobsQueue.queueUrl, description: 'Jobs queue: upstream jobs send here' },
    QueueArn: { value: tg.jobsQueue.queueArn, description: 'Jobs queue ARN (the mapping source)' },
    DlqUrl: { value: tg.deadLetterQueue.queueUrl, description: 'Dead-letter queue' },
    DlqArn: { value: tg.deadLetterQueue.queueArn, description: 'Dead-letter queue ARN (redrive source)' },
    TableName: {
      value: tg.outcomesTable.tableName,
      description: 'Outcomes table (one row per record_key)',
    },
    WorkerFunctionName: { value: parts.worker.fn.functionName, description: 'Worker function' },
    AdjusterFunctionName: { value: parts.adjuster.fn.functionName, description: 'Cap adjuster function' },
    MappingUuid: {
      value: parts.worker.mapping.eventSourceMappingId,
      description: 'Jobs queue → worker mapping',
    },
    LedgerTableName: {
      value: parts.ledger.table.tableName,
      description:
        'Slot ledger table: lane leases and the cap, and the state item (pk pipeline, sk state): the pipeline state and the lane shape',
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
  if (tg.outcomesQueue) {
    optional.OutcomesQueueUrl = {
      value: tg.outcomesQueue.queueUrl,
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
    new CfnOutput(scope, key, output).overrideLogicalId(key);
  }
}
