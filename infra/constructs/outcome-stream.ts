import { Duration, RemovalPolicy } from 'aws-cdk-lib';
import type * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as sources from 'aws-cdk-lib/aws-lambda-event-sources';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import type { ThreadgateConfig } from '../config.js';
import { BundledFunction } from './bundled-function.js';

export interface OutcomeStreamProps {
  readonly config: ThreadgateConfig;
  /** The outcomes table; it must have a stream with new and old images. */
  readonly table: dynamodb.ITable;
  /** Stream records per invocation. @default 100 */
  readonly batchSize?: number;
}

/** How long the outcomes queue keeps a message: the longest SQS allows. */
export const OUTCOMES_RETENTION = Duration.days(14);

/**
 * The outcome stream: the outcomes table's DynamoDB stream → the publisher Lambda → the
 * outcomes queue, one message per final outcome (functions/outcome-publisher.ts). The mapping
 * starts at the stream's oldest record, reports partial batch failures and retries a failed
 * record until it succeeds or leaves the stream (24 h), so an outcome is published at least
 * once even when the worker that wrote it died right after the write.
 */
export class OutcomeStream extends Construct {
  readonly queue: sqs.Queue;
  readonly fn: lambda.IFunction;
  readonly bundled: BundledFunction;
  readonly mapping: sources.DynamoEventSource;

  constructor(scope: Construct, id: string, props: OutcomeStreamProps) {
    super(scope, id);
    const batchSize = props.batchSize ?? 100;
    if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > 10_000) {
      throw new Error(`batchSize: must be a whole number from 1 to 10000, got ${batchSize}`);
    }
    if (!props.table.tableStreamArn) {
      throw new Error('table: the outcome stream needs a table with a DynamoDB stream (NEW_AND_OLD_IMAGES)');
    }

    this.queue = new sqs.Queue(this, 'Queue', {
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      retentionPeriod: OUTCOMES_RETENTION,
      removalPolicy: RemovalPolicy.DESTROY,
    });

    this.bundled = new BundledFunction(this, 'Publisher', {
      functionName: `${props.config.stackName}-outcome-publisher`,
      entry: 'functions/outcome-publisher.ts',
      description: 'threadgate outcome publisher: sends every final outcome from the table stream to SQS',
      timeout: Duration.seconds(30),
      memorySize: 128,
      logRetentionDays: props.config.logRetentionDays,
      environment: {
        OUTCOMES_QUEUE_URL: this.queue.queueUrl,
        POWERTOOLS_SERVICE_NAME: props.config.stackName,
      },
    });
    this.fn = this.bundled.fn;

    this.mapping = new sources.DynamoEventSource(props.table, {
      startingPosition: lambda.StartingPosition.TRIM_HORIZON,
      batchSize,
      reportBatchItemFailures: true,
      // One batch per shard at a time keeps a record's outcomes in the order they were written.
      parallelizationFactor: 1,
      enabled: true,
    });
    this.bundled.fn.addEventSource(this.mapping);
    this.queue.grantSendMessages(this.bundled.role);
  }
}
