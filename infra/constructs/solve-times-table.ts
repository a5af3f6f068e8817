import { RemovalPolicy } from 'aws-cdk-lib';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as iam from 'aws-cdk-lib/aws-iam';
import { Construct } from 'constructs';

/**
 * The worker environments' shared solve times (functions/pipeline/solve-time-exchange.ts): one
 * partition of at most 32 items per CAPTCHA type, each an environment's last answers as a short
 * string. Nothing in it is a record of work (no record key, no token, no API key): it is
 * destroyed with the stack, and items expire through TTL.
 */
export class SolveTimesTable extends Construct {
  readonly table: dynamodb.Table;

  constructor(scope: Construct, id: string, props: { encryption?: dynamodb.TableEncryption } = {}) {
    super(scope, id);
    this.table = new dynamodb.Table(this, 'Table', {
      partitionKey: { name: 'pk', type: dynamodb.AttributeType.STRING },
      sortKey: { name: 'sk', type: dynamodb.AttributeType.STRING },
      billingMode: dynamodb.BillingMode.PAY_PER_REQUEST,
      encryption: props.encryption ?? dynamodb.TableEncryption.AWS_MANAGED,
      timeToLiveAttribute: 'expires_at',
      removalPolicy: RemovalPolicy.DESTROY,
    });
  }

  /** PutItem and Query, nothing else: the exchange writes its own item and reads the partition. */
  grantExchange(grantee: iam.IGrantable): iam.Grant {
    return iam.Grant.addToPrincipal({
      grantee,
      actions: ['dynamodb:PutItem', 'dynamodb:Query'],
      resourceArns: [this.table.tableArn],
    });
  }
}
