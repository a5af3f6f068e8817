import { Duration, RemovalPolicy, Validations } from 'aws-cdk-lib';
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
  /** Retries of a failed batch (after bisecting) before its records go to the failure queue. @default 10 */
  readonly maxRetryAttempts?: number;
  /** A record older than this is not retried: it goes to the failure queue. @default 1 hour */
  readonly maxRecordAge?: Duration;
}

/** Defaults of the mapping's failure handling (docs/design.md "Outcome stream failures"). */
export const OUTCOME_STREAM_RETRIES = 10;
export const OUTCOME_STREAM_MAX_RECORD_AGE = Duration.hours(1);

/** How long the outcomes queue keeps a message: the longest SQS allows. */
export const OUTCOMES_RETENTION = Duration.days(14);

/**
 * The outcome stream: the outcomes table's DynamoDB stream → the publisher Lambda → the
 * outcomes queue, one message per final outcome (functions/outcome-publisher.ts). The mapping
 * starts at the stream's oldest record and reports partial batch failures, so an outcome is
 * published at least once even when the worker that wrote it died right after the write. A
 * record the publisher cannot publish does not hold its shard: a failed batch is split in two
 * and retried (bisect), each part at most `maxRetryAttempts` times, and a record older than
 * `maxRecordAge` is not retried; what is given up goes to the failure queue as Lambda's
 * on-failure record (the shard and the sequence numbers, not the data: the row stays in the
 * table, where `threadgate outcomes` reads it), and the records behind it are published.
 */
export class OutcomeStream extends Construct {
  readonly queue: sqs.Queue;
  /** Lambda's on-failure records for stream records that could not be published. */
  readonly failures: sqs.Queue;
  readonly fn: lambda.IFunction;
  readonly bundled: BundledFunction;
  readonly mapping: sources.DynamoEventSource;

  constructor(scope: Construct, id: string, props: OutcomeStreamProps) {
    super(scope, id);
    const batchSize = props.batchSize ?? 100;
    if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > 10_000) {
      throw new Error(`batchSize: must be a whole number from 1 to 10000, got ${batchSize}`);
    }
    const retries = props.maxRetryAttempts ?? OUTCOME_STREAM_RETRIES;
    if (!Number.isInteger(retries) || retries < 0 || retries > 10_000) {
      throw new Error(`maxRetryAttempts: must be a whole number from 0 to 10000, got ${retries}`);
    }
    const maxRecordAge = props.maxRecordAge ?? OUTCOME_STREAM_MAX_RECORD_AGE;
    const ageSeconds = maxRecordAge.toSeconds();
    if (ageSeconds < 60 || ageSeconds > 604_800) {
      throw new Error(`maxRecordAge: must be from 60 seconds to 7 days, got ${ageSeconds} s`);
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
    this.failures = new sqs.Queue(this, 'Failures', {
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      retentionPeriod: OUTCOMES_RETENTION,
      removalPolicy: RemovalPolicy.DESTROY,
    });
    // Acknowledged here, on the one queue it concerns (as infra/constructs/nag-acknowledgements.ts does for the others).
    Validations.of(this.failures).acknowledge({
      id: 'AwsSolutions::AwsSolutions-SQS3',
      reason:
        "The outcome stream's failure queue is itself the dead-letter destination of the stream mapping (Lambda's on-failure records); a dead-letter queue behind it would have nothing to add.",
    });

    this.bundled = new BundledFunction(this, 'Publisher', {
      functionName: `${props.config.stackName}-outcome-publisher`,
      entry: 'functions/outcome-publisher.ts',
      description: 'threadgate outcome publisher: sends every final outcome from the table stream to SQS',
      timeout: Duration.seconds(30),
      memorySize: 128,
      logRetentionDays: props.config.logRetentionDays,
      logLevel: props.config.logLevel,
      environment: {
        OUTCOMES_QUEUE_URL: this.queue.queueUrl,
        POWERTOOLS_SERVICE_NAME: props.config.stackName,
      },
    });
    this.fn = this.bundled.fn;

    this.mapping = new sources.DynamoEventSource(props.table, {
      startingPosition: lambda.StartingPosition.TRIM_HORIZON,
      batchSize,
      ...(props.config.outcomeStreamBatchingSeconds > 0
        ? { maxBatchingWindow: Duration.seconds(props.config.outcomeStreamBatchingSeconds) }
        : {}),
      reportBatchItemFailures: true,
      // One batch per shard at a time keeps a record's outcomes in the order they were written.
      parallelizationFactor: 1,
      bisectBatchOnError: true,
      retryAttempts: retries,
      maxRecordAge,
      onFailure: new sources.SqsDlq(this.failures),
      enabled: true,
    });
    this.bundled.fn.addEventSource(this.mapping);
    this.queue.grantSendMessages(this.bundled.role);
  }
}
