import { RemovalPolicy } from 'aws-cdk-lib';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import { Construct } from 'constructs';
import { BATCH_INDEX_NAME } from '../../functions/records/store.js';

export interface OutcomesTableProps {
  /** @default RemovalPolicy.RETAIN — outcomes are the record of what was submitted. */
  readonly removalPolicy?: RemovalPolicy;
  /** A DynamoDB stream with new and old images, for the outcome stream. @default false */
  readonly stream?: boolean;
}

/**
 * One outcome row per `record_key` (see docs/design.md "Outcome row"); on-demand, with point-in-time recovery. The batch index
 * (batch_id + updated_at, all attributes) reads one batch's rows without a scan; rows without a
 * batch_id are not in it.
 */
export class OutcomesTable extends Construct {
  readonly table: dynamodb.Table;

  constructor(scope: Construct, id: string, props: OutcomesTableProps = {}) {
    super(scope, id);
    this.table = new dynamodb.Table(this, 'Table', {
      partitionKey: { name: 'record_key', type: dynamodb.AttributeType.STRING },
      billingMode: dynamodb.BillingMode.PAY_PER_REQUEST,
      pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
      encryption: dynamodb.TableEncryption.AWS_MANAGED,
      removalPolicy: props.removalPolicy ?? RemovalPolicy.RETAIN,
      ...(props.stream ? { stream: dynamodb.StreamViewType.NEW_AND_OLD_IMAGES } : {}),
    });
    this.table.addGlobalSecondaryIndex({
      indexName: BATCH_INDEX_NAME,
      partitionKey: { name: 'batch_id', type: dynamodb.AttributeType.STRING },
      sortKey: { name: 'updated_at', type: dynamodb.AttributeType.STRING },
      projectionType: dynamodb.ProjectionType.ALL,
    });
  }
}
