import { RemovalPolicy } from 'aws-cdk-lib';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as iam from 'aws-cdk-lib/aws-iam';
import { Construct } from 'constructs';
import {
  STATE_ITEM_KEY,
  type StateItemAttribute,
  stateItemAttributes,
} from '../../functions/pipeline/state-item.js';

/**
 * The slot ledger (functions/pipeline/ledger.ts): one partition holding the count of lanes held,
 * the cap, and one lease per running invocation, so the cap holds after a crash; and, in a
 * partition of its own, the state item (functions/pipeline/state-item.ts): the pipeline state and
 * the lane shape. No record of work is in it (no record key, no token, no API key): it is
 * destroyed with the stack, a pause recorded in it with it. A table of its own: the outcomes
 * table's stream would carry every lease write to the outcome publisher.
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
   * GetItem and UpdateItem also cover the state item, which both functions read and write (the
   * worker's pause, the adjuster's pause and its lane shape).
   */
  grantLeases(grantee: iam.IGrantable): iam.Grant {
    return iam.Grant.addToPrincipal({
      grantee,
      actions: ['dynamodb:GetItem', 'dynamodb:UpdateItem', 'dynamodb:DeleteItem', 'dynamodb:Query'],
      resourceArns: [this.table.tableArn],
    });
  }

  /**
   * dynamodb:GetItem of the state item's `attributes` alone: `threadgate status` reads the state
   * and the shape, a data job's `wait` the state. IAM conditions confine it: the item's partition
   * key (`dynamodb:LeadingKeys`: "pipeline", a partition that holds nothing else, not the leases
   * nor the cap) and the attributes named with the key (`dynamodb:Attributes`, and a projection
   * that asks for no others).
   */
  grantStateRead(grantee: iam.IGrantable, attributes: readonly StateItemAttribute[]): iam.Grant {
    return this.grantStateItem(grantee, 'dynamodb:GetItem', attributes);
  }

  /** dynamodb:UpdateItem of the state item's `state` alone (`threadgate pause` and `resume`), confined as grantStateRead. */
  grantStateWrite(grantee: iam.IGrantable): iam.Grant {
    return this.grantStateItem(grantee, 'dynamodb:UpdateItem', ['state']);
  }

  private grantStateItem(
    grantee: iam.IGrantable,
    action: string,
    attributes: readonly StateItemAttribute[],
  ): iam.Grant {
    return iam.Grant.addToPrincipal({
      grantee,
      actions: [action],
      resourceArns: [this.table.tableArn],
      conditions: {
        'ForAllValues:StringEquals': {
          'dynamodb:LeadingKeys': [STATE_ITEM_KEY.pk],
          'dynamodb:Attributes': stateItemAttributes(attributes),
        },
        StringEqualsIfExists: { 'dynamodb:Select': 'SPECIFIC_ATTRIBUTES', 'dynamodb:ReturnValues': 'NONE' },
      },
    });
  }
}
