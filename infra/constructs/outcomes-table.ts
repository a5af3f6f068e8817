import { RemovalPolicy } from 'aws-cdk-lib';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import { Construct } from 'constructs';

export interface OutcomesTableProps {
  /** @default RemovalPolicy.RETAIN — outcomes are the record of what was submitted. */
  readonly removalPolicy?: RemovalPolicy;
}

/** One outcome row per `record_key` (see docs/design.md "Outcome row"); on-demand, with point-in-time recovery. */
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
    });
  }
}
