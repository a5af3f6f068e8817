import { RemovalPolicy } from 'aws-cdk-lib';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as iam from 'aws-cdk-lib/aws-iam';
import { Construct } from 'constructs';

/**
 * The slot ledger (functions/pipeline/ledger.ts): one partition holding the count of lanes held,
 * the cap, and one lease per running invocation, so the cap holds after a crash. No record of
 * work is in it (no record key, no token, no API key): it is destroyed with the stack. A table of
 * its own: the outcomes table's stream would carry every lease write to the outcome publisher.
 */
export class SlotLedgerTable extends Construct {
  readonly table: dynamodb.Table;

  constructor(scope: Construct, id: string, props: { encryption?: dynamodb.TableEncryption } = {}) {
    super(scope, id);
    this.table = new dynamodb.Table(this, 'Table', {
      partitionKey: { name: 'pk', type: dynamodb.AttributeType.STRING },
      sortKey: { name: 'sk', type: dynamodb.AttributeType.STRING },
      billingMode: dynamodb.BillingMode.PAY_PER_REQUEST,
      encryption: props.encryption ?? dynamodb.TableEncryption.AWS_MANAGED,
      removalPolicy: RemovalPolicy.DESTROY,
    });
  }

  /**
   * What a lease needs (the worker takes, renews and gives back its lease, and frees expired
   * ones while it waits for room; the cap adjuster writes the cap and frees expired leases):
   * dynamodb:GetItem, dynamodb:UpdateItem, dynamodb:DeleteItem and dynamodb:Query on the table.
   * Transactions need no action of their own: each of their items is checked as its own action.
   */
  grantLeases(grantee: iam.IGrantable): iam.Grant {
    return iam.Grant.addToPrincipal({
      grantee,
      actions: ['dynamodb:GetItem', 'dynamodb:UpdateItem', 'dynamodb:DeleteItem', 'dynamodb:Query'],
      resourceArns: [this.table.tableArn],
    });
  }
}
