import { Duration, RemovalPolicy } from 'aws-cdk-lib';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';

export interface JobQueuesProps {
  /** The jobs queue's visibility timeout (at least the worker's timeout; the stack uses 6 × by default). */
  readonly visibilityTimeout: Duration;
  /** Receives before a message moves to the DLQ (>= 5). @default 5 */
  readonly maxReceiveCount?: number;
}

/** DLQ retention: the longest SQS allows, so an operator has two weeks to look and redrive. */
export const DLQ_RETENTION = Duration.days(14);

/**
 * The jobs queue the upstream jobs write to, and its dead-letter queue. Both use SQS-managed
 * encryption and refuse plain-HTTP access.
 */
export class JobQueues extends Construct {
  readonly queue: sqs.Queue;
  readonly dlq: sqs.Queue;

  constructor(scope: Construct, id: string, props: JobQueuesProps) {
    super(scope, id);
    const maxReceiveCount = props.maxReceiveCount ?? 5;
    if (!Number.isInteger(maxReceiveCount) || maxReceiveCount < 5) {
      throw new Error(`maxReceiveCount: must be a whole number >= 5, got ${maxReceiveCount}`);
    }

    this.dlq = new sqs.Queue(this, 'Dlq', {
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      retentionPeriod: DLQ_RETENTION,
      removalPolicy: RemovalPolicy.DESTROY,
    });

    this.queue = new sqs.Queue(this, 'Queue', {
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      // A message must stay invisible while its invocation runs (and Lambda's retries within one receive).
      visibilityTimeout: props.visibilityTimeout,
      retentionPeriod: Duration.days(14),
      deadLetterQueue: { queue: this.dlq, maxReceiveCount },
      removalPolicy: RemovalPolicy.DESTROY,
    });
  }
}
