import { RemovalPolicy } from 'aws-cdk-lib';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import { Construct } from 'constructs';
import {
  BATCH_INDEX_ATTRIBUTES,
  BATCH_INDEX_NAME,
  BATCH_INDEX_PARTITION_KEY,
  BATCH_INDEX_SORT_KEY,
} from '../../functions/records/batch-index.js';

export interface OutcomesTableProps {
  /** @default RemovalPolicy.RETAIN — outcomes are the record of what was submitted. */
  readonly removalPolicy?: RemovalPolicy;
  /** A DynamoDB stream with new and old images, for the outcome stream. @default false */
  readonly stream?: boolean;
  /**
   * Keeps the batch index of 0.1.0 (PREVIOUS_BATCH_INDEX_NAME) beside today's, for the
   * one deploy of an upgrade: DynamoDB creates or deletes one global secondary index per table
   * update, so a stack deployed with the old index takes two deploys, the first with this (the new
   * index is created), the second without it (the old one is deleted); CHANGELOG.md says how.
   * Also the CDK context `keepPreviousBatchIndex=true`. @default false
   */
  readonly keepPreviousBatchIndex?: boolean;
  /** Encryption at rest (the stack's `tableEncryption`). @default TableEncryption.AWS_MANAGED */
  readonly encryption?: dynamodb.TableEncryption;
}

/**
 * The attribute the table's TTL reads: the worker writes it (epoch seconds) on a claim and a final
 * write when the stack sets `outcomeRetentionDays`; rows without it are kept.
 */
export const OUTCOME_TTL_ATTRIBUTE = 'expires_at';

/** The batch index before created_at became its sort key (every attribute projected, sort updated_at). */
export const PREVIOUS_BATCH_INDEX_NAME = 'batch_id-updated_at';

/**
 * One outcome row per `record_key` (see docs/design.md "Outcome row"); on-demand, with point-in-time recovery. The batch index
 * (batch_shard + status_at, projecting batch_id, status and reason) reads one batch's rows, shard
 * by shard, without a scan; rows without a batch_id are not in it. Its partition key spreads one
 * batch over 16 partitions, its sort key lets a waiter read only what changed
 * (functions/records/batch-index.ts).
 */
export class OutcomesTable extends Construct {
  readonly table: dynamodb.Table;

  constructor(scope: Construct, id: string, props: OutcomesTableProps = {}) {
    super(scope, id);
    this.table = new dynamodb.Table(this, 'Table', {
      partitionKey: { name: 'record_key', type: dynamodb.AttributeType.STRING },
      billingMode: dynamodb.BillingMode.PAY_PER_REQUEST,
      pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
      encryption: props.encryption ?? dynamodb.TableEncryption.AWS_MANAGED,
      // Always on: the setting decides whether the worker writes the attribute (a TTL switched on
      // later is one more table update, and DynamoDB allows one per hour).
      timeToLiveAttribute: OUTCOME_TTL_ATTRIBUTE,
      removalPolicy: props.removalPolicy ?? RemovalPolicy.RETAIN,
      ...(props.stream ? { stream: dynamodb.StreamViewType.NEW_AND_OLD_IMAGES } : {}),
    });
    this.table.addGlobalSecondaryIndex({
      indexName: BATCH_INDEX_NAME,
      partitionKey: { name: BATCH_INDEX_PARTITION_KEY, type: dynamodb.AttributeType.STRING },
      sortKey: { name: BATCH_INDEX_SORT_KEY, type: dynamodb.AttributeType.STRING },
      projectionType: dynamodb.ProjectionType.INCLUDE,
      nonKeyAttributes: [...BATCH_INDEX_ATTRIBUTES],
    });
    const keepPrevious =
      props.keepPreviousBatchIndex ?? String(this.node.tryGetContext('keepPreviousBatchIndex')) === 'true';
    if (keepPrevious) {
      this.table.addGlobalSecondaryIndex({
        indexName: PREVIOUS_BATCH_INDEX_NAME,
        partitionKey: { name: 'batch_id', type: dynamodb.AttributeType.STRING },
        sortKey: { name: 'updated_at', type: dynamodb.AttributeType.STRING },
        projectionType: dynamodb.ProjectionType.ALL,
      });
    }
  }
}
